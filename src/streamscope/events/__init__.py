"""The tracing API every stage calls. A no-op until enabled; the runtime behind it is :mod:`streamscope.recording`.

Contract for call sites (stable; the recorder and sinks behind it may change):

* ``ACTIVE`` is the set of active category names. It is mutated in place, never rebound, so a module may
  hold a reference. Hot paths guard with one membership test: ``if "sample" in ACTIVE: ...``.
* ``span(name, cat, **fields)`` is a context manager that records a begin/end pair (``B``/``E``) when
  ``cat`` is active; the end is recorded on normal exit, on exceptions (with field ``exception``) and on
  generator close; a span still open when its process exits gets an ``E`` with ``aborted: 1``. The yielded
  dict may be updated inside the body and the ``E`` carries it. ``span_since(t0, name, cat, **fields)`` is the
  same with its begin at ``t0 = now()`` taken earlier (a loader's epoch begins when its workers are told, before
  the loop asks for the first batch: their spans must fall inside it). Spans of the categories in ``COMPACT``
  (knob ``trace_compact_categories``, default ``sample``) are recorded as one complete ``X`` event with
  ``dur`` at exit instead (same name and meaning; half the events).
* ``instant(name, cat, **fields)`` records a point event (``I``), e.g. a retry; ``crash(exc)`` records
  LitData's ``crash`` instant and prints the traceback on stderr.
* ``counter(name, cat, value, **fields)`` records a counter sample (``C``), e.g. bytes in flight; metrics
  turn these into gauges.
* ``emit(ph, name, cat, **fields)`` records any phase.
* ``series(name, cat, keys, **fields)`` is for spans a loop records once per iteration (a worker's
  ``decode_batch``): ``s.mark(now())`` when an event begins, and
  ``s.mark(now()); s.put(value)`` when it ends (one ``put`` of an int per name in ``keys``, in order); or
  ``s.begin()`` / ``s.end(*values)``, a call each. The loop pays clock reads and list appends, nothing
  else (see :class:`~streamscope.events.series.Series`); the recorder takes the complete events at every flush
  and hands them on as one bulk entry when ``cat`` is in ``COMPACT``, else as ``B``/``E`` pairs. An
  inactive category returns a series that records nothing.
* ``timeline(first, second)`` is for back-to-back events of two kinds (the loader's ``stall`` and
  ``batch``: each begins where the other ended): ONE ``mark(now())`` per boundary and a ``put`` of the
  ended event's value, ``~value`` for the second kind (see :class:`~streamscope.events.series.Timeline`).
* ``bulk(name, cat, t0, chunk=..., item=..., **fields)`` records, in ONE buffer entry, one complete event
  per element of the integer columns for things done together in one call that began at ``t0 = now()``
  (e.g. the samples of a batch collated column-wise): each event gets an even share of the measured
  interval and the field ``batched: n`` (see :mod:`.bus`). ``each(name, cat, fn, chunk, item)`` calls
  ``fn(chunk, item)`` per element, times each call, and records the results in one bulk entry with the
  measured per-element begin/end (the cheap way to trace a per-sample loop).

* ``stage(code)`` is a ``with`` block spent in a stage of the wait split without a span (:mod:`.stages`);
  ``poll()`` (one attribute test) lets a loop that only appends to series start a deferred flusher in time.
* ``instruments``: ``add_value(metric)`` adds to a counter of this process, ``observe(callback)`` registers an
  asynchronous gauge (:mod:`.instruments`).

Field values should be ints, floats, bools or short strings; URLs must already have credentials removed.
See :mod:`.vocab` for categories, levels and field names, :mod:`.exporters` for the exporter protocol,
:mod:`.registry` for the metrics and :mod:`.view` for what a metrics read returns.

The runtime (:mod:`streamscope.recording`: the recorder, its flusher, the metrics aggregation, the hand-over
between processes, the wait split) is a higher layer, which this package never imports: it installs itself
through :func:`set_runtime` (see :mod:`.runtime`). ``configure``, ``configure_from_env``, ``ensure_metrics``,
``flush`` and ``metrics_view`` here call it. Importing this package configures nothing (no environment read, no
hook, no thread, no file); ``configure(...)`` or ``configure_from_env()`` does. Fork and exit behaviour, the
hand-over of a worker's events, ``add_sink`` and the full metrics snapshot are the runtime's.

Cost: an inactive category costs the membership test; an active one appends a tuple to a bounded deque
(a full buffer drops and counts). Encoding and I/O happen on the flusher thread.
"""

from __future__ import annotations

import sys
import time
import traceback
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import Any

from streamscope.events import context, runtime
from streamscope.events.bus import (
    ACTIVE,
    BUF,
    BULK,
    COMPACT,
    NULL_SPAN,
    STATE,
    Bulk,
    CompleteSpan,
    Event,
    Span,
    as_list,
    expand,
    poll,
    record,
    record_at,
    record_bulk,
    take,
)
from streamscope.events.exporters import EventBatch, Exporter, ExportResult, Sink, SinkFactory
from streamscope.events.instruments import add as add_value
from streamscope.events.instruments import observe
from streamscope.events.registry import METRICS, M, Metric
from streamscope.events.runtime import Runtime
from streamscope.events.series import Kind, Series, Timeline
from streamscope.events.stages import STAGED
from streamscope.events.view import MetricsView
from streamscope.events.vocab import CATEGORIES, CNAMES, LEVELS

__all__ = [
    # what every stage calls (a membership test of ACTIVE first: see the module doc)
    "ACTIVE",
    "COMPACT",
    "add_value",
    "bulk",
    "counter",
    "crash",
    "each",
    "emit",
    "enabled",
    "instant",
    "now",
    "observe",
    "poll",
    "series",
    "span",
    "span_since",
    "stage",
    "timeline",
    # the runtime's entry points, and how it is installed (see .runtime)
    "Runtime",
    "configure",
    "configure_from_env",
    "ensure_metrics",
    "flush",
    "metrics_view",
    "set_runtime",
    # this process's buffer, read with no runtime (tests, benchmarks)
    "BUF",
    "NULL_SERIES",
    "drain",
    "dropped",
    "expand",
    # the exporter protocol, the registry and the vocabulary (their modules hold the rest)
    "BULK",
    "Bulk",
    "CATEGORIES",
    "CNAMES",
    "Event",
    "EventBatch",
    "ExportResult",
    "Exporter",
    "LEVELS",
    "M",
    "METRICS",
    "Metric",
    "MetricsView",
    "Sink",
    "SinkFactory",
    "context",
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
    if cat in STAGED:  # this process attributes the loop's wait (metrics on): the span moves its stage clock
        return staged_span(name, cat, fields, cat in COMPACT)
    if cat in COMPACT:
        return CompleteSpan(name, cat, fields)
    return Span(name, cat, fields)


def span_since(t0: int, name: str, cat: str, **fields: Any) -> Span | Any:
    """:func:`span` whose begin is at ``t0`` (an earlier :func:`now`); a plain begin/end pair, never staged or
    compacted (for spans that contain others, such as an epoch)."""
    if cat not in ACTIVE:
        return NULL_SPAN
    return Span(name, cat, fields, t0)


def _discard(_value: Any) -> None:
    """What an inactive series' ``mark`` and ``put`` do: nothing."""


class _NullSeries:
    """What :func:`series` returns for an inactive category: nothing recorded."""

    __slots__ = ()

    mark = staticmethod(_discard)
    put = staticmethod(_discard)

    def begin(self) -> int:
        """Nothing is recorded: returns 0."""
        return 0

    def end(self, *values: int) -> None:
        """Nothing: the category is not recorded."""

    def take(self) -> None:
        """Nothing is pending."""

    def finish(self) -> None:
        """Nothing is pending."""


NULL_SERIES = _NullSeries()


def series(name: str, cat: str, keys: tuple[str, ...], **fields: Any) -> Series | _NullSeries:
    """A :class:`Series` of complete ``name`` events with integer columns ``keys`` and constant ``fields``.

    Use it from one thread: ``s.mark(now())`` ... ``s.mark(now()); s.put(value)`` (a ``put`` per key) per
    event, or ``s.begin()`` ... ``s.end(*values)``.
    """
    if cat not in ACTIVE:
        return NULL_SERIES
    return Series(name, cat, tuple(keys), fields, cat in COMPACT)


def timeline(first: Kind, second: Kind) -> Timeline | _NullSeries:
    """A :class:`Timeline` of back-to-back events of two kinds, each ``(name, cat, column, fields)``.

    Use it from one thread: ``t.mark(now())`` when the first event begins, then ``t.mark(now()); t.put(v)``
    when an event ends and the next begins (``v`` its value for the first kind, ``~v`` for the second).
    Nothing is recorded (no series, no clock read needed) when neither category is active.
    """
    if first[1] not in ACTIVE and second[1] not in ACTIVE:
        return NULL_SERIES
    return Timeline(first, second)


#: CLOCK_MONOTONIC nanoseconds: the clock of every event (pass ``now()`` as ``t0`` to :func:`bulk`).
now = time.monotonic_ns
_mono = time.monotonic_ns


def bulk(name: str, cat: str, t0: int, **fields: Any) -> None:
    """Record one complete event per element of the sequence-valued fields, done together since ``t0``.

    Fields whose value is a list or a 1-D integer array are columns (all of one length ``n``, ints only);
    the others are common to every event. The interval ``[t0, now()]`` is split evenly among the ``n``
    events, which carry ``batched: n`` to say so. One buffer entry whatever ``n`` (a full buffer drops and
    counts all ``n``). Nothing is recorded when ``cat`` is inactive or there is no column.
    """
    if cat not in ACTIVE:
        return
    t1 = _mono()
    cols = {}
    for k in list(fields):
        v = fields[k]
        if type(v) is list or getattr(v, "ndim", 0) == 1:
            cols[k] = fields.pop(k)
    if not cols:
        return
    n = {len(v) for v in cols.values()}
    if len(n) == 1:
        record_bulk(name, cat, t0, t1, cols, fields)
    else:  # a call-site bug must not reach the sinks (or the data path): drop and count
        with STATE.drop_lock:
            STATE.dropped += max(n)


def each(
    name: str,
    cat: str,
    fn: Callable[[Any, int], Any],
    chunk: Any,
    item: Any,
    prepare: Callable[[int], Any] | None = None,
    **fields: Any,
) -> list[Any]:
    """``[fn(c, i) for c, i in zip(chunk, item)]``, each call timed, recorded as one bulk entry.

    Every call gets its own measured complete event (``chunk``, ``item``, ``dur``) when ``cat`` is active.
    With ``prepare``, ``fn`` gets ``prepare(c)`` instead of ``c``, called outside the timed interval (e.g.
    opening the chunk, which has its own spans). A call that raises gets its own ``X`` event with field
    ``exception``; the events of the calls before it are recorded, and the exception propagates.
    """
    cl, il = as_list(chunk), as_list(item)
    if cat not in ACTIVE:
        if prepare is None:
            return [fn(c, i) for c, i in zip(cl, il)]
        return [fn(prepare(c), i) for c, i in zip(cl, il)]
    out: list[Any] = []
    starts: list[int] = []
    ends: list[int] = []
    add, s_add, e_add, mono = out.append, starts.append, ends.append, _mono
    try:
        for c, i in zip(cl, il):
            x = c if prepare is None else prepare(c)
            s_add(mono())
            add(fn(x, i))
            e_add(mono())
    except BaseException as exc:
        k = len(ends)
        if k < len(starts):  # the timed call raised (not prepare)
            t0 = starts.pop()
            f = {"chunk": cl[k], "item": il[k], **fields, "exception": type(exc).__name__}
            f["dur"] = (mono() - t0) / 1000
            record_at("X", name, cat, t0, f)
        raise
    finally:
        k = len(ends)
        if k:
            cols = {"chunk": cl, "item": il} if k == len(cl) else {"chunk": cl[:k], "item": il[:k]}
            record_bulk(name, cat, starts[0], ends[-1], cols, fields, starts, ends)
    return out


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


def crash(exc: BaseException, name: str = "crash", *, stderr: bool = True, **fields: Any) -> None:
    """Record a ``crash`` instant with the exception class and message; the traceback goes to stderr unless
    ``stderr`` is False (a DataLoader worker's error is printed by the main process that re-raises it)."""
    if "crash" in ACTIVE:
        record("I", name, "crash", {**fields, "exception": type(exc).__name__, "error": f"{type(exc).__name__}: {exc}"})
    if not stderr:
        return
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
    """Set the traced and the metrics-only categories of this process and start recording (the runtime's).

    ``streamscope.enable_tracer`` is the user-facing way; this is the low-level one. Once called,
    :func:`configure_from_env` leaves this process's configuration alone.
    """
    runtime.get().configure(frozenset(trace), frozenset(metrics), flush_interval)


def configure_from_env(force: bool = False) -> None:
    """Configure this process from ``STREAMSCOPE_TRACE_*`` / ``LITDATA_TRACE_*`` and ``STREAMSCOPE_METRICS_LEVEL``,
    once (a later call does nothing unless ``force``; see ``streamscope.recording.setup``). streamscope's entry
    points call it: its public names, a dataset or loader built, a spawned worker's bootstrap."""
    runtime.get().configure_from_env(force)


def ensure_metrics(level: str = "chunk") -> None:
    """Switch metrics recording on at ``level``'s categories (metrics only: no trace log) unless what this process
    records already covers them; workers started from now on inherit it (``STREAMSCOPE_METRICS_LEVEL``). What an
    exporter that needs the metrics (the Prometheus endpoint, OpenTelemetry's collections) calls."""
    runtime.get().ensure_metrics(level)


def flush(publish: bool = True, repair: bool = True) -> None:
    """Hand everything buffered in this process (its series' complete events too) to the sinks and metrics now,
    and ask the exporters to push what they buffered.

    ``publish=False``: the process's metrics snapshot file is left to the flusher's next tick or to exit.
    ``repair=False``: the run's done processes are retired (and the spans dead ones left open closed) at a later
    flush, e.g. once the workers now exiting are gone.
    """
    runtime.get().flush(publish, repair)


def metrics_view() -> MetricsView:
    """The run's metrics as data points of the registry (:mod:`.registry`), read without side effects.

    This process merged with every process of its run (its DataLoader workers, the finished ones included): as
    of the flusher's last tick for the others, and for this process's own events (``metrics_interval``, 1 s);
    nothing is flushed or exported and no file is read. Rank and node attributes are this process's.
    """
    return runtime.get().metrics_view()


_NO_STAGE = nullcontext()


def stage(code: int) -> AbstractContextManager[None]:
    """A ``with`` block this process spends in stage ``code`` (:mod:`.stages`) without a span of the stage's
    category, e.g. waiting for a chunk another process downloads (``stages.DOWNLOAD``). Nothing unless this process
    attributes its loop's waits (metrics on, :data:`~.stages.STAGED` not empty)."""
    return _stage(code) if STAGED else _NO_STAGE


def _staged_span_first(name: str, cat: str, fields: dict[str, Any], compact: bool) -> Span | CompleteSpan:
    """:data:`staged_span` until a runtime is installed: installs it (which rebinds ``staged_span``), then asks it."""
    return runtime.get().staged_span(name, cat, fields, compact)


def _stage_first(code: int) -> AbstractContextManager[None]:
    """:data:`_stage` until a runtime is installed: installs it, then asks it."""
    return runtime.get().stage(code)


#: The runtime's staged span (a module global, so :func:`span` looks it up as it looks up ``Span``).
staged_span: Callable[[str, str, dict[str, Any], bool], Span | CompleteSpan] = _staged_span_first
_stage: Callable[[int], AbstractContextManager[None]] = _stage_first


def set_runtime(rt: Runtime) -> None:
    """Install ``rt`` as the runtime behind this API (``streamscope.recording.install`` calls it, once per
    interpreter; a forked child keeps its parent's). The hot paths look up what it provides as module globals, as
    before: no indirection per event."""
    global staged_span, _stage
    runtime.put(rt)
    staged_span = rt.staged_span
    _stage = rt.stage
