"""The one retry policy of streamscope's storage layer.

Every network operation of every backend runs through :func:`call`: bounded exponential backoff with
jitter, at most ``max_attempts`` attempts, and a total ``deadline`` across them. Backends translate their
native errors into :class:`~streamscope._core.errors.StorageError` subclasses; :func:`is_retryable` decides
from the class alone:

* retryable: :class:`TransientStorageError` (5xx, 503 SlowDown, connection refused/reset, truncated bodies)
  and :class:`StorageTimeoutError`;
* final: not found, auth, invalid range, malformed URL, garbage responses, anything else.

Client libraries' own retries are switched off (obstore ``max_retries=0``, botocore
``total_max_attempts=1``) so this is the only policy. Each attempt is a ``download``-category span named
for its operation (``get``, ``get_range``, ``download_file``, ``head``, ``list``, ``put``, ``upload_file``,
``delete_object``; the span name ``download`` itself is left to the chunk-level span the cache records
around a store call, LitData's meaning) with ``op``, ``url``
(credentials removed), ``attempt``, ``bytes``, ``duration_s``, ``status`` (``ok``, ``retry`` or ``error``)
and, on failure, ``http_status`` (or the error class when there is no HTTP status), ``exception`` and
``error``. A retry is an instant ``retry`` (with ``delay_s``), a final failure an instant ``give_up``.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from streamscope._core import config
from streamscope._core.errors import StorageError, StorageTimeoutError, TransientStorageError
from streamscope.events import kinds
from streamscope.storage.redact import redact

__all__ = ["RetryPolicy", "call", "is_retryable", "status_of"]


T = TypeVar("T")
log = logging.getLogger("streamscope.storage")

_rng = random.Random()


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how long to retry.

    Attributes:
        max_attempts: Attempts including the first (>= 1).
        base_delay: Backoff before the first retry, in seconds; doubles per attempt.
        max_delay: Upper bound of one backoff, in seconds.
        deadline: Total seconds one operation may take across its attempts; no attempt starts after it.
        jitter: Share of each backoff that is random (0 = fixed, 1 = "full jitter").
    """

    max_attempts: int = 5
    base_delay: float = 0.1
    max_delay: float = 5.0
    deadline: float = 120.0
    jitter: float = 1.0

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError(f"max_attempts must be >= 1, got {self.max_attempts}")
        if self.base_delay < 0 or self.max_delay < 0 or self.deadline <= 0:
            raise ValueError("delays must be >= 0 and the deadline > 0")
        if not 0.0 <= self.jitter <= 1.0:
            raise ValueError(f"jitter must be within [0, 1], got {self.jitter}")

    @classmethod
    def from_config(cls) -> RetryPolicy:
        """The policy the ``storage_*`` knobs describe (read now, so live changes apply to new calls)."""
        return cls(
            max_attempts=int(config.get("storage_max_attempts")),
            base_delay=float(config.get("storage_retry_base_delay")),
            max_delay=float(config.get("storage_retry_max_delay")),
            deadline=float(config.get("storage_deadline")),
            jitter=float(config.get("storage_retry_jitter")),
        )

    def backoff(self, retry: int, rng: random.Random | None = None) -> float:
        """Seconds to wait before retry number ``retry`` (1 = the first retry)."""
        raw = min(self.max_delay, self.base_delay * (2.0 ** (retry - 1)))
        r = (rng or _rng).random()
        return raw * (1.0 - self.jitter) + raw * self.jitter * r


def is_retryable(exc: BaseException) -> bool:
    """True for failures another attempt may cure."""
    return isinstance(exc, TransientStorageError | StorageTimeoutError)


def status_of(exc: BaseException) -> Any:
    """The HTTP status (or, when there is none, the error class name) of a failed attempt."""
    status = getattr(exc, "status", None)
    return status if status is not None else type(exc).__name__


def call(
    op: str,
    url: str,
    fn: Callable[[dict[str, Any]], T],
    *,
    policy: RetryPolicy | None = None,
    name: str | None = None,
    **fields: Any,
) -> T:
    """Run ``fn`` under the retry policy and trace every attempt.

    Args:
        op: Operation name for messages and traces (``get``, ``get_range``, ``head``, ``put``, ...).
        url: The object's URL with credentials removed.
        fn: One attempt. Receives the span's field dict (set ``bytes`` and ``status`` in it); raises a
            :class:`StorageError` subclass on failure.
        policy: Defaults to :meth:`RetryPolicy.from_config`.
        name: Span name; defaults to ``op``. (Not ``download``: that name keeps LitData's meaning, one span
            per chunk download, which the cache records around the store call; these spans nest inside it.)
        **fields: Extra span fields (e.g. ``chunk=``).

    Returns:
        What ``fn`` returned.

    Raises:
        StorageError: The last error, its message extended with the number of attempts when it was retried.
    """
    pol = policy or RetryPolicy.from_config()
    name = name or op
    start = time.monotonic()
    attempt = 0
    while True:
        attempt += 1
        error: StorageError | None = None
        delay = 0.0
        give_up = ""
        t0 = time.monotonic()
        with kinds.storage_op(name, op=op, url=url, attempt=attempt, **fields) as f:
            try:
                result = fn(f)
                f["status"] = "ok"
            except StorageError as exc:
                error = exc
                if is_retryable(exc):
                    delay = pol.backoff(attempt)
                    if attempt >= pol.max_attempts:
                        give_up = f"{attempt} attempts"
                    elif time.monotonic() - start + delay >= pol.deadline:
                        give_up = f"the {pol.deadline:g} s deadline"
                f["status"] = "retry" if is_retryable(exc) and not give_up else "error"
                f["exception"] = type(exc).__name__
                f["error"] = f"{type(exc).__name__}: {exc}"
                http_status = getattr(exc, "status", None)
                if http_status is not None:
                    f["http_status"] = http_status
            f["duration_s"] = round(time.monotonic() - t0, 6)
        if error is None:
            return result
        if not is_retryable(error):
            raise error
        elapsed = time.monotonic() - start
        if give_up:
            kinds.give_up(
                op=op,
                url=url,
                attempt=attempt,
                status="error",
                http_status=status_of(error),
                exception=type(error).__name__,
                elapsed_s=round(elapsed, 3),
            )
            log.info("storage %s %s gave up after %s: %s", op, url, give_up, redact(error))
            cls = type(error) if give_up.endswith("attempts") else StorageTimeoutError
            final = cls(redact(f"{error} (gave up after {attempt} attempt(s) in {elapsed:.1f} s, reached {give_up})"))
            for attr in ("status", "code", "url"):
                if hasattr(error, attr):
                    setattr(final, attr, getattr(error, attr))
            raise final from None
        kinds.retry(
            op=op,
            url=url,
            attempt=attempt,
            status="retry",
            http_status=status_of(error),
            exception=type(error).__name__,
            delay_s=round(delay, 4),
        )
        log.debug("storage %s %s attempt %d failed (%s); retrying in %.3f s", op, url, attempt, redact(error), delay)
        time.sleep(delay)
