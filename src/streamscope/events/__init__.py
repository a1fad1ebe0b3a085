"""The tracing API every stage calls. A no-op until enabled.

Contract for call sites (stable; the recorder and sinks behind it may change):

* ``ACTIVE`` is the set of active category names. It is mutated in place, never rebound, so a module may
  hold a reference. Hot paths guard with one membership test: ``if "sample" in ACTIVE: ...``.
* ``span(name, cat, **fields)`` is a context manager that records a begin/end pair (``B``/``E``) when
  ``cat`` is active; the end is recorded on normal exit, on exceptions (with field ``exception``) and on
  generator close; a span still open when its process exits gets an ``E`` with ``aborted: 1``. The yielded
  dict may be updated inside the body and the ``E`` carries it. Spans of the categories in ``COMPACT``
  (knob ``trace_compact_categories``, default ``sample``) are recorded as one complete ``X`` event with
  ``dur`` at exit instead (same name and meaning; half the events).
* ``instant(name, cat, **fields)`` records a point event (``I``), e.g. a retry; ``crash(exc)`` records
  LitData's ``crash`` instant and prints the traceback on stderr.
* ``counter(name, cat, value, **fields)`` records a counter sample (``C``), e.g. bytes in flight; metrics
  turn these into gauges.
* ``emit(ph, name, cat, **fields)`` records any phase.

Field values should be ints, floats, bools or short strings; URLs must already have credentials removed.
See :mod:`streamscope.events.vocab` for categories, levels and field names, :mod:`.recorder` for the
flusher, fork and exit behaviour, :mod:`.sinks` for the plugin mechanism and :mod:`.metrics` for metrics.

Cost: an inactive category costs the membership test; an active one appends a tuple to a bounded deque
(a full buffer drops and counts). Encoding and I/O happen on the flusher thread.
"""

from __future__ import annotations

import sys
import traceback
from typing import Any

from streamscope.events import vocab
from streamscope.events.bus import ACTIVE, BUF, COMPACT, NULL_SPAN, STATE, CompleteSpan, Event, Span, record, take
from streamscope.events.metrics import MetricsSnapshot, SpanStats
from streamscope.events.recorder import RECORDER, configure_from_env
from streamscope.events.sinks import EventBatch, Sink, SinkFactory
from streamscope.events.vocab import CATEGORIES, CNAMES, LEVELS

__all__ = [
    "ACTIVE",
    "CATEGORIES",
    "COMPACT",
    "CNAMES",
    "LEVELS",
    "Event",
    "EventBatch",
    "MetricsSnapshot",
    "Sink",
    "SinkFactory",
    "SpanStats",
    "add_sink",
    "configure",
    "counter",
    "crash",
    "drain",
    "dropped",
    "emit",
    "enabled",
    "flush",
    "instant",
    "metrics_snapshot",
    "remove_sink",
    "shutdown",
    "span",
    "vocab",
]


def enabled(cat: str) -> bool:
    """True when category ``cat`` is being recorded."""
    return cat in ACTIVE


def span(name: str, cat: str, **fields: Any) -> Span | Any:
    """Record a begin/end pair around the ``with`` body when ``cat`` is active.

    The yielded dict may be updated inside the body (e.g. ``f["bytes"] = n``); the end event carries it.
    """
    if cat not in ACTIVE:
        return NULL_SPAN
    if cat in COMPACT:
        return CompleteSpan(name, cat, fields)
    return Span(name, cat, fields)


def instant(name: str, cat: str, **fields: Any) -> None:
    """Record a point event when ``cat`` is active."""
    if cat in ACTIVE:
        record("I", name, cat, fields)


def counter(name: str, cat: str, value: float, **fields: Any) -> None:
    """Record a counter sample when ``cat`` is active."""
    if cat in ACTIVE:
        fields["value"] = value
        record("C", name, cat, fields)


def emit(ph: str, name: str, cat: str, **fields: Any) -> None:
    """Record an event of phase ``ph`` (``B``, ``E``, ``I``, ``C``, ``X`` with field ``dur`` in µs)."""
    if cat in ACTIVE:
        record(ph, name, cat, fields)


def crash(exc: BaseException, name: str = "crash", **fields: Any) -> None:
    """Record a ``crash`` instant with the exception class and message; the traceback goes to stderr."""
    if "crash" in ACTIVE:
        record("I", name, "crash", {**fields, "exception": type(exc).__name__, "error": f"{type(exc).__name__}: {exc}"})
    try:
        traceback.print_exception(type(exc), exc, exc.__traceback__, file=sys.stderr)
    except Exception:
        pass


def drain() -> list[Event]:
    """Take and clear the events recorded so far in this process (tests use this when no flusher runs)."""
    return take()


def dropped() -> int:
    """Events dropped in this process because the buffer was full."""
    return STATE.dropped


def configure(
    trace: frozenset[str] | set[str] = frozenset(),
    metrics: frozenset[str] | set[str] = frozenset(),
    flush_interval: float | None = None,
) -> None:
    """Set the traced and the metrics-only categories of this process and start the flusher.

    ``streamscope.enable_tracer`` is the user-facing way; this is the low-level one.
    """
    RECORDER.configure(frozenset(trace), frozenset(metrics), flush_interval)


def add_sink(factory: SinkFactory) -> None:
    """Register a sink factory (a zero-argument callable returning a :class:`Sink`) in this process.

    Forked children build their own instance from the factory; spawned processes need the
    ``STREAMSCOPE_TRACE_SINKS`` environment variable instead (see :mod:`streamscope.events.sinks`).
    """
    with RECORDER.lock:
        if factory not in RECORDER.factories:
            RECORDER.factories.append(factory)
        if RECORDER.sinks is not None:
            RECORDER._flush_locked()
            RECORDER._shutdown_sinks()


def remove_sink(factory: SinkFactory) -> None:
    """Unregister a sink factory added with :func:`add_sink` (its instance is shut down)."""
    with RECORDER.lock:
        if factory in RECORDER.factories:
            RECORDER._flush_locked()
            RECORDER.factories.remove(factory)
            RECORDER._shutdown_sinks()


def flush() -> None:
    """Hand everything buffered in this process to the sinks and metrics now."""
    RECORDER.flush()
    for _spec, sink in RECORDER.sinks or []:
        try:
            sink.force_flush()
        except Exception:
            RECORDER.sink_errors += 1


def shutdown() -> None:
    """What process exit does: close open spans (``aborted``), flush, shut the sinks down."""
    RECORDER.shutdown()


def metrics_snapshot() -> MetricsSnapshot:
    """Metrics of this process merged with those its worker processes published."""
    return RECORDER.snapshot_all()


_ = BUF, LEVELS, CNAMES  # re-exported names
configure_from_env()
