"""Single attempts through obstore (S3, GCS, Azure), with obstore's own retries switched off.

obstore runs a process-global tokio runtime that does not survive ``fork``: once a process has used it, a
forked child that touches obstore hangs. :func:`obstore_usable` knows which pid started the runtime (the
first call through this module), and :func:`mark_runtime_started` records it; callers must not use obstore
in a process where it returns False (the S3 store falls back to boto3 there, loudly).
"""

from __future__ import annotations

import datetime as _dt
import os
import re
import sys
from collections.abc import Callable
from typing import IO, TYPE_CHECKING, Any

from streamscope._core import config
from streamscope._core.errors import (
    InvalidRangeError,
    ObjectChangedError,
    ObjectNotFoundError,
    StorageAuthError,
    StorageConnectionError,
    StorageError,
    StorageResponseError,
    StorageTimeoutError,
    TransientStorageError,
    TruncatedBodyError,
)
from streamscope._core.protocols import ObjectMeta
from streamscope.storage.redact import redact

if TYPE_CHECKING:  # obstore is optional, and these are stub-only names
    from obstore.store import ClientConfig, RetryConfig

__all__ = [
    "ObstoreBackend",
    "client_options",
    "map_error",
    "mark_runtime_started",
    "obstore_available",
    "obstore_usable",
    "retry_config",
    "runtime_pid",
]


# pid of the process whose obstore runtime is running; inherited (and then wrong) in forked children.
_RUNTIME_PID: int | None = None

_STATUS_RE = re.compile(r"status code: (\d{3})")
_CODE_RE = re.compile(r"<Code>([^<]{1,64})</Code>")
_KIND_RE = re.compile(r"kind: (\w+)")


def obstore_available() -> bool:
    """True when the obstore package can be imported."""
    try:
        import obstore  # noqa: F401
    except Exception:
        return False
    return True


def obstore_usable() -> bool:
    """False in a forked child of a process that already started obstore's runtime (it would hang)."""
    return _RUNTIME_PID is None or _RUNTIME_PID == os.getpid()


def _foreign_runtime_threads() -> bool:
    """True when this process runs tokio worker threads (an obstore runtime that other code started)."""
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:  # no procfs: cannot tell
        return False
    for tid in tasks:
        try:
            with open(f"/proc/self/task/{tid}/comm", "rb") as f:
                if f.read().startswith(b"tokio"):  # "tokio-runtime-w", obstore's "tokio-rt-worker"
                    return True
        except OSError:
            continue
    return False


def _before_fork() -> None:
    """Runs in the parent just before ``fork``: note a runtime that user code or another library started.

    obstore's runtime is process-global and its threads do not survive ``fork``; a child that used it would
    hang. Recording the parent's pid makes :func:`obstore_usable` false in the child, which then uses boto3
    and says so (warning and a ``backend_fallback`` trace event), instead of hanging.
    """
    global _RUNTIME_PID
    if _RUNTIME_PID is None and "obstore" in sys.modules and _foreign_runtime_threads():
        _RUNTIME_PID = os.getpid()


os.register_at_fork(before=_before_fork)


def runtime_pid() -> int | None:
    """The pid that started obstore's runtime (None when no obstore call was made)."""
    return _RUNTIME_PID


def mark_runtime_started() -> None:
    """Record that this process is about to use obstore's runtime."""
    global _RUNTIME_PID
    if _RUNTIME_PID is None:
        _RUNTIME_PID = os.getpid()


def _duration(seconds: float) -> _dt.timedelta:
    return _dt.timedelta(seconds=float(seconds))


def client_options(endpoint: str | None = None, ca_pem: str | None = None, insecure: bool = False) -> ClientConfig:
    """obstore ClientConfig from the storage timeout knobs."""
    opts: ClientConfig = {
        "connect_timeout": _duration(config.get("storage_connect_timeout")),
        "read_timeout": _duration(config.get("storage_read_timeout")),
        "timeout": _duration(config.get("storage_request_timeout")),
    }
    if endpoint and endpoint.lower().startswith("http://"):
        opts["allow_http"] = True
    if ca_pem:
        opts["root_certificate"] = ca_pem
    if insecure:
        opts["allow_invalid_certificates"] = True
    return opts


def retry_config() -> RetryConfig:
    """obstore RetryConfig that disables its retries: :mod:`streamscope.storage.retry` is the one policy."""
    return {"max_retries": 0, "retry_timeout": _duration(1.0)}


def _first_line(message: str) -> str:
    head = message.split("\n\nDebug source:", 1)[0]
    head = re.sub(r"\s+", " ", head).strip()
    return head[:600]


def map_error(exc: BaseException, where: str, op: str) -> StorageError:
    """Translate an obstore exception into the streamscope error tree (message names ``where``)."""
    if isinstance(exc, StorageError):
        return exc
    text = str(exc)
    status_m = _STATUS_RE.search(text)
    status = int(status_m.group(1)) if status_m else None
    code_m = _CODE_RE.search(text)
    code = code_m.group(1) if code_m else None
    kinds = set(_KIND_RE.findall(text))
    name = type(exc).__name__
    detail = redact(_first_line(text))
    msg = f"{op} {where!r} failed: " + (f"{code} " if code else "") + (f"(HTTP {status}) " if status else "")
    msg = redact(msg) + detail

    err: StorageError
    if name == "PreconditionError" or status == 412:
        err = ObjectChangedError(redact(f"{op} {where!r}: the object changed during the download (ETag mismatch)"))
    elif isinstance(exc, FileNotFoundError) or name == "NotFoundError" or status == 404:
        if code in ("NoSuchBucket", "ContainerNotFound") or "container does not exist" in text.lower():
            what = "bucket" if code == "NoSuchBucket" else "container"
            err = ObjectNotFoundError(
                redact(f"{op} {where!r} failed: the {what} does not exist ({code or 'ContainerNotFound'})")
            )
            err.missing_bucket = True  # type: ignore[attr-defined]
        else:
            err = ObjectNotFoundError(redact(f"{op} {where!r} failed: no such object") + f" ({code or 404})")
        status = status or 404
    elif name in ("PermissionDeniedError", "UnauthenticatedError") or status in (401, 403):
        hint = " - check the credentials in storage_options or the environment"
        err = StorageAuthError(redact(f"{op} {where!r} was refused: {code or status or name}{hint}"))
    elif status == 416 or code == "InvalidRange":
        err = InvalidRangeError(msg)
    elif status is not None and (status >= 500 or status == 429 or code in ("SlowDown", "RequestTimeout")):
        err = TransientStorageError(msg)
    elif "Timeout" in kinds or "timed out" in text.lower():
        err = StorageTimeoutError(redact(f"{op} {where!r} timed out: ") + detail)
    elif "InvalidListResponse" in text or "InvalidXml" in text or "invalid list response" in text.lower():
        err = StorageResponseError(redact(f"{op} {where!r}: the server's answer is not valid S3 XML: ") + detail)
    elif "certificate" in text.lower() or "tls" in kinds or "InvalidCertificate" in text:
        err = StorageError(
            redact(f"{op} {where!r}: TLS verification failed (set AWS_CA_BUNDLE or storage_options['verify']): ")
            + detail
        )
    elif "Body" in kinds or "body error" in text or "IncompleteMessage" in text or "end of file" in text:
        err = TruncatedBodyError(redact(f"{op} {where!r}: the response body was cut short: ") + detail)
    elif "Connect" in kinds:
        err = StorageConnectionError(redact(f"{op} {where!r}: cannot connect to the endpoint: ") + detail)
    elif "Interrupted" in kinds or "ConnectionReset" in text or "connection" in text.lower():
        err = StorageConnectionError(redact(f"{op} {where!r}: connection dropped: ") + detail)
    elif "Unknown" in kinds or "Decode" in kinds or "decode" in text.lower():
        err = StorageResponseError(redact(f"{op} {where!r}: the server's answer is not valid HTTP/S3: ") + detail)
    elif status is not None:
        err = StorageError(msg)
    else:
        err = StorageError(redact(f"{op} {where!r} failed ({name}): ") + detail)
    err.status = status  # type: ignore[attr-defined]
    err.code = code  # type: ignore[attr-defined]
    err.url = where  # type: ignore[attr-defined]
    return err


def _meta(d: dict[str, Any]) -> ObjectMeta:
    lm = d.get("last_modified")
    mtime = lm.timestamp() if isinstance(lm, _dt.datetime) else None
    return ObjectMeta(key=str(d["path"]), size=int(d["size"]), mtime=mtime, etag=d.get("e_tag"))


class ObstoreBackend:
    """Single attempts against one bucket through an obstore store built by ``factory``.

    Args:
        factory: Builds the obstore store (``S3Store``/``GCSStore``/``AzureStore``) in this process.
        name: Reported as ``backend_name``.
    """

    def __init__(self, factory: Callable[[], Any], name: str = "obstore") -> None:
        import obstore

        self._obs = obstore
        self.name = name
        self._factory = factory
        self._store: Any = None

    def _s(self, where: str, op: str) -> Any:
        if self._store is None:
            try:
                self._store = self._factory()
            except StorageError:
                raise
            except Exception as exc:
                raise StorageError(
                    redact(f"cannot configure a client for {where!r}: {_first_line(str(exc))}")
                ) from None
        mark_runtime_started()
        return self._store

    def _run(self, op: str, where: str, fn: Callable[[Any], Any]) -> Any:
        store = self._s(where, op)
        try:
            return fn(store)
        except StorageError:
            raise
        except Exception as exc:
            raise map_error(exc, where, op) from None

    def get(self, path: str, where: str) -> tuple[bytes, int | None]:
        def fn(store: Any) -> tuple[bytes, int | None]:
            res = self._obs.get(store, path)
            size = res.meta.get("size")
            return bytes(res.bytes()), (int(size) if size is not None else None)

        return self._run("get", where, fn)

    def get_range(self, path: str, start: int, end: int, where: str) -> bytes:
        return self._run("get_range", where, lambda s: bytes(self._obs.get_range(s, path, start=start, end=end)))

    def head(self, path: str, where: str) -> ObjectMeta:
        return self._run("head", where, lambda s: _meta(self._obs.head(s, path)))

    def put(self, path: str, data: bytes, where: str) -> None:
        self._run("put", where, lambda s: self._obs.put(s, path, data, use_multipart=False))

    def put_file(self, path: str, src: str, where: str) -> None:
        from pathlib import Path

        self._run("upload_file", where, lambda s: self._obs.put(s, path, Path(src)))

    def list(self, prefix: str, where: str) -> list[ObjectMeta]:
        directory = prefix.rsplit("/", 1)[0] if "/" in prefix else ""
        # obstore sends a space in the list prefix as "+" in the query string, which some S3 servers (moto)
        # verify differently from the signature: list from the nearest ancestor without spaces and filter here.
        while " " in directory:
            directory = directory.rsplit("/", 1)[0] if "/" in directory else ""

        def fn(store: Any) -> list[ObjectMeta]:
            out: list[ObjectMeta] = []
            for batch in self._obs.list(store, prefix=directory or None, chunk_size=1000):
                for d in batch:
                    if str(d["path"]).startswith(prefix):
                        out.append(_meta(d))
            return out

        return self._run("list", where, fn)

    def delete(self, path: str, where: str) -> None:
        try:
            self._run("delete", where, lambda s: self._obs.delete(s, path))
        except ObjectNotFoundError as exc:
            # Azure answers 404 for a blob that is not there (S3 answers 204): deleting nothing is not an
            # error, but a missing bucket or container is
            if getattr(exc, "missing_bucket", False):
                raise

    def download(
        self,
        path: str,
        out: IO[bytes],
        where: str,
        start: int = 0,
        if_match: str | None = None,
        on_meta: Callable[[int | None, str | None], None] | None = None,
    ) -> tuple[int, int | None]:
        def fn(store: Any) -> tuple[int, int | None]:
            options: dict[str, Any] = {}
            if start:
                options["range"] = {"offset": start}
            if if_match:
                options["if_match"] = if_match
            res = self._obs.get(store, path, options=options or None)
            meta = res.meta
            size = int(meta["size"]) if meta.get("size") is not None else None
            if on_meta is not None:
                on_meta(size, meta.get("e_tag"))
            written = 0
            for buf in res.stream(min_chunk_size=256 << 10):  # small: a cut-off body loses little
                mv = memoryview(buf)
                out.write(mv)
                written += len(mv)
            return written, (size - start if size is not None else None)

        return self._run("download_file", where, fn)
