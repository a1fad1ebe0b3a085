"""Exporters: what the batch processor hands the traced events to, in OpenTelemetry's shape.

An exporter (a *sink*) has

* ``export(batch: EventBatch) -> ExportResult``: take one batch of events (from the flusher thread);
* ``force_flush(timeout_millis: int = 30_000) -> bool``: push anything it buffered, within the timeout;
* ``shutdown() -> None``: flush and release its resources (once, at process exit or when tracing is switched off).

as OpenTelemetry's ``SpanExporter`` (``SpanExportResult``). An exporter pairs an encoder (a pure function of the
batch: Litracer lines, Chrome JSON, Perfetto, OTLP) with a transport (a file, HTTP); they live in higher layers
(``streamscope.trace``) and are made known to ``events`` in one of two ways:

* ``events.add_sink(factory)``: a zero-argument callable returning an exporter, called lazily in every process
  that records events (again in a forked child, which never reuses its parent's objects);
* the environment variable ``STREAMSCOPE_TRACE_SINKS``: a comma list of ``module:attr`` dotted paths to such
  factories (a class works), resolved with importlib at the first export. This is how a spawned DataLoader
  or optimize worker gets its exporter without anyone calling ``enable_tracer`` in it.

An exporter must not block for long. A failure (``ExportResult.FAILURE`` returned, or an exception raised) is
counted and reported once on stderr by the processor, which carries on: the data path never sees it. Older
sinks whose ``export`` returns None and whose ``force_flush`` takes no timeout still work.
"""

from __future__ import annotations

import enum
import importlib
import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from streamscope.events.bus import Event

__all__ = [
    "EventBatch",
    "ExportResult",
    "Exporter",
    "FLUSH_TIMEOUT_MILLIS",
    "Sink",
    "SinkFactory",
    "force_flush",
    "parse_specs",
    "resolve",
]


#: How long :meth:`Exporter.force_flush` may take by default (OpenTelemetry's default, in ms).
FLUSH_TIMEOUT_MILLIS = 30_000


class ExportResult(enum.Enum):
    """What :meth:`Exporter.export` returns (OpenTelemetry's ``SpanExportResult``)."""

    SUCCESS = 0
    FAILURE = 1


@dataclass(frozen=True)
class EventBatch:
    """Events of one process handed to an exporter.

    An exporter whose class sets ``mixed_batches = True`` may also get the events of several processes in one
    batch (the recorder then writes what other processes handed over together with its own, see
    :class:`~streamscope.recording.handover.Parcel`): ``envs`` holds the fields of every process but the recording one.

    Attributes:
        events: tuples ``(ph, name, cat, ts_ns, pid, tid, fields)`` in recording order per process; ``ts_ns``
            is CLOCK_MONOTONIC nanoseconds.
        epoch_offset_ns: add to ``ts_ns`` for Unix-epoch nanoseconds (one anchor shared by every process
            of a run, so timestamps compare across processes).
        env: rank/worker fields of the recording process (``dist_world_size`` ... ``worker_rank``).
        envs: pid -> rank/worker fields of the other processes whose events the batch holds (mixed batches).
    """

    events: list[Event]
    epoch_offset_ns: int
    env: dict[str, int]
    envs: dict[int, dict[str, int]] = field(default_factory=dict)

    def env_of(self, pid: int) -> dict[str, int]:
        """The rank/worker fields of process ``pid``'s events."""
        return self.envs.get(pid, self.env) if self.envs else self.env


@runtime_checkable
class Exporter(Protocol):
    """What the batch processor calls. Encoding belongs to the exporter's encoder; delivery to its transport."""

    def export(self, batch: EventBatch) -> ExportResult | None:
        """Take a batch of events (called from the flusher thread, or the thread that flushes)."""

    def force_flush(self, timeout_millis: int = FLUSH_TIMEOUT_MILLIS) -> bool:
        """Push anything buffered to its destination; True when it all went."""

    def shutdown(self) -> None:
        """Flush and release resources; called once."""


#: The name the event bus has used for exporters since its first sink.
Sink = Exporter
SinkFactory = Callable[[], Exporter]


def force_flush(exporter: Any, timeout_millis: int = FLUSH_TIMEOUT_MILLIS) -> bool:
    """``exporter.force_flush(timeout_millis)``, or ``force_flush()`` for an exporter whose method takes no timeout.

    Returns what it returns (None counts as True). Raises what it raises.
    """
    fn = exporter.force_flush
    if _takes_timeout(fn):
        ok = fn(timeout_millis)
    else:
        ok = fn()
    return ok is None or bool(ok)


_TAKES_TIMEOUT: dict[Any, bool] = {}


def _takes_timeout(fn: Any) -> bool:
    key = getattr(fn, "__func__", fn)
    known = _TAKES_TIMEOUT.get(key)
    if known is None:
        try:
            params = inspect.signature(fn).parameters.values()
            known = any(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL) for p in params)
        except (TypeError, ValueError):
            known = False
        if len(_TAKES_TIMEOUT) < 256:
            _TAKES_TIMEOUT[key] = known
    return known


def resolve(spec: str) -> SinkFactory:
    """Import ``module:attr`` and return the factory it names.

    Raises:
        ImportError, AttributeError: when the path does not resolve.
    """
    mod, _, attr = spec.strip().partition(":")
    if not mod or not attr:
        raise ImportError(f"sink spec {spec!r} is not of the form 'package.module:Factory'")
    obj: object = importlib.import_module(mod)
    for part in attr.split("."):
        obj = getattr(obj, part)
    if not callable(obj):
        raise TypeError(f"sink spec {spec!r} does not name a callable")
    return obj  # type: ignore[return-value]


def parse_specs(raw: str) -> list[str]:
    """Split a ``STREAMSCOPE_TRACE_SINKS`` value into its dotted paths (order kept, duplicates removed)."""
    out: list[str] = []
    for p in raw.split(","):
        p = p.strip()
        if p and p not in out:
            out.append(p)
    return out
