"""streamscope in OpenTelemetry's terms, through ``opentelemetry-api`` only: metric instruments and spans.

OpenTelemetry's rule for libraries: instrument with the API, let the application choose the SDK. So:

* **Metrics**: every metric of the registry (:mod:`streamscope.events.registry`) is an instrument of the meter
  ``streamscope``: counters, up-down counters and gauges are observable instruments whose callbacks read
  :func:`streamscope.events.metrics_view` (one read per collection, on the SDK's reader thread: nothing on the data
  path); histograms are synchronous histograms with the registry's bounds as bucket advice, fed at each
  collection with what arrived since the last one (:func:`replay`: bucket counts, count and sum exact). Registered
  against the global API meter, whose proxy forwards to a provider the application sets later. The first collection
  by a real SDK switches metrics recording on (``chunk`` level) when it is off.
* **Spans**: :class:`OTelSpanSink`, an exporter of the event bus in the rank's main process, turns finished events
  into spans of the tracer ``streamscope`` with their real start and end times (:mod:`.spans` picks which, with
  parents and links; :class:`SpanWriter` bounds the rate). It gets the traced categories, so the tracer's level
  (``enable_tracer(level=...)``, ``STREAMSCOPE_TRACE_LEVEL``) chooses what reaches every sink, the Litracer log and
  OpenTelemetry alike. Other processes of the rank spool theirs to it (:mod:`.spool`).

:func:`on_entry` does both when the application has loaded OpenTelemetry: streamscope's entry points (a dataset or
loader built) call it through ``streamscope.recording.setup``, so an application that configured OpenTelemetry
(its own SDK set-up, or ``opentelemetry-instrument``) gets streamscope's telemetry with no streamscope call.
``streamscope.enable_telemetry()`` (:mod:`.pipeline`) sets up the SDK for applications that did not.

Only a rank's main process instruments (:func:`is_rank_main`): DataLoader and optimize workers record and hand
their data over, as for the trace log.
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable
from typing import Any

from streamscope import events as ev
from streamscope._core import config
from streamscope._core.version import VERSION as __version__
from streamscope.events import kinds
from streamscope.events.exporters import FLUSH_TIMEOUT_MILLIS, EventBatch, ExportResult, parse_specs
from streamscope.events.registry import METRICS, Instrument, Metric
from streamscope.events.view import Histogram, MetricsView
from streamscope.recording import DEFAULT_SINK, RECORDER, Reporter
from streamscope.telemetry.prometheus import is_rank_main_process
from streamscope.telemetry.spans import ESSENTIAL_CATEGORIES, LINKED_CATEGORIES, Op, SpanEncoder
from streamscope.telemetry.spool import SpoolReader, SpoolSink

__all__ = [
    "MAX_LINKS",
    "MAX_OPEN",
    "MetricInstruments",
    "OTelSpanSink",
    "REPORT",
    "SAMPLED_OUT",
    "SCOPE",
    "SPAN_SINK",
    "SpanWriter",
    "add_span_sink",
    "end_open_spans",
    "install",
    "is_rank_main",
    "on_entry",
    "replay",
    "span_sink",
]


#: The span exporter's factory path (``STREAMSCOPE_TRACE_SINKS``): a spawned worker resolves it too.
SPAN_SINK = "streamscope.telemetry.otel:span_sink"
#: Instrumentation scope of streamscope's meter and tracer.
SCOPE = "streamscope"
#: Attributes of the spans' counts (on each epoch span).
SAMPLED_OUT = "streamscope.spans.sampled_out"
#: Bounds of the span writer's state (open spans, spans held back, downloads a read may link to).
MAX_OPEN = 4096
MAX_LINKS = 4096

REPORT = Reporter()
_lock = threading.RLock()


def is_rank_main() -> bool:
    """True in a rank's main process; False in a DataLoader worker (forked or spawned, also while a spawned one
    unpickles its dataset), an optimize worker or any other daemonic multiprocessing child (the Prometheus
    endpoint's rule, :func:`~streamscope.telemetry.prometheus.is_rank_main_process`)."""
    return is_rank_main_process()


def _real(provider: Any) -> bool:
    """A provider of an SDK (OpenTelemetry's or a vendor's), not the API's proxy or no-op one."""
    return not type(provider).__module__.startswith(("opentelemetry.metrics", "opentelemetry.trace"))


def add_span_sink(keep_default: bool = True) -> None:
    """Add :data:`SPAN_SINK` to ``STREAMSCOPE_TRACE_SINKS`` (this process and every worker it starts) and rebuild
    the exporters. With no sink named there, the Litracer log the recorder would have written by default stays
    (``keep_default``; ``enable_telemetry()`` keeps it only while tracing is on, so it starts no log of its own)."""
    specs = parse_specs(os.environ.get("STREAMSCOPE_TRACE_SINKS", ""))
    if SPAN_SINK in specs:
        return
    if not specs and not RECORDER.factories and (keep_default or RECORDER.trace_cats):
        specs = [DEFAULT_SINK]  # what the recorder would have used without any sink named
    specs.append(SPAN_SINK)
    os.environ["STREAMSCOPE_TRACE_SINKS"] = ",".join(specs)
    if RECORDER.started and RECORDER.trace_cats and RECORDER.pid == os.getpid():
        ev.configure(RECORDER.trace_cats, RECORDER.metric_cats, RECORDER.flush_interval)


# --------------------------------------------------------------------------------------------------
# metrics
# --------------------------------------------------------------------------------------------------


def replay(bounds: tuple[float, ...], counts: Iterable[int], total: float, top: float) -> list[tuple[float, int]]:
    """Values to record so that a histogram with ``bounds`` gets ``counts`` per bucket and sum ``total``.

    Bucket i holds values in ``(bounds[i-1], bounds[i]]`` (the first from 0, the last above every bound up to
    ``top``, the largest value). One value per bucket at the same relative position ``t`` in every bucket, with
    ``t`` chosen so the values sum to ``total``: possible because the true values lay in those buckets. Returns
    ``(value, how many times)`` for the buckets that got any.
    """
    counts = list(counts)
    los = [0.0, *bounds]
    his = [*bounds, max(top, bounds[-1] if bounds else top)]
    low = sum(c * lo for c, lo in zip(counts, los))
    width = sum(c * (hi - lo) for c, lo, hi in zip(counts, los, his))
    t = (total - low) / width if width > 0 else 1.0
    t = min(1.0, max(1e-9, t))
    out = []
    for c, lo, hi in zip(counts, los, his):
        if c <= 0:
            continue
        v = lo + t * (hi - lo)
        if v <= lo and hi > lo:
            v = math.nextafter(lo, math.inf)
        out.append((min(v, hi), c))
    return out


class MetricInstruments:
    """The registry's metrics as instruments of ``meter`` (see the module doc). Reads nothing outside the process
    that created it (a forked child reports nothing: its parent exports the rank).

    Args:
        meter: an OpenTelemetry meter (the API's global one by default, see :func:`install`).
        read: returns the metrics to report (default :func:`streamscope.events.metrics_view`, and then the first
            collection switches metrics recording on when it is off).
    """

    #: Callbacks of one collection share one read of the metrics (each instrument's callback is called on its own).
    SHARE_S = 0.05

    def __init__(self, meter: Any, read: Callable[[], MetricsView] | None = None) -> None:
        from opentelemetry.metrics import Observation

        self._observation = Observation
        self.pid = os.getpid()
        self.read = read or ev.metrics_view
        self.switch_on = read is None  # the run's metrics: recording switches on at the first collection
        self._view: MetricsView | None = None
        self._at = -math.inf
        self._hist_seen: dict[tuple[str, tuple[tuple[str, str], ...]], Histogram] = {}
        self._lock = threading.Lock()
        self.histograms: dict[str, Any] = {}
        self.instruments: dict[str, Any] = {}
        for m in METRICS:
            kw = dict(unit=m.unit, description=m.description)
            if m.instrument is Instrument.HISTOGRAM:
                inst = meter.create_histogram(m.name, explicit_bucket_boundaries_advisory=list(m.buckets or ()), **kw)
                self.histograms[m.name] = inst
            else:
                make = {
                    Instrument.COUNTER: meter.create_observable_counter,
                    Instrument.UP_DOWN_COUNTER: meter.create_observable_up_down_counter,
                    Instrument.GAUGE: meter.create_observable_gauge,
                }[m.instrument]
                inst = make(m.name, callbacks=[self._callback(m)], **kw)
            self.instruments[m.name] = inst

    def _callback(self, metric: Metric) -> Callable[[Any], list[Any]]:
        def observe(_options: Any) -> list[Any]:
            view = self.current()
            if view is None:
                return []
            obs = self._observation
            return [obs(p.value, p.attrs) for p in view.of(metric)]

        return observe

    def current(self) -> MetricsView | None:
        """The metrics for this collection (read once per :attr:`SHARE_S`); histograms get their news at a new read.
        None in another process than the one that registered the instruments."""
        if os.getpid() != self.pid:
            return None
        with self._lock:
            now = time.monotonic()
            if self._view is not None and now - self._at < self.SHARE_S:
                return self._view
            if self.switch_on and not (RECORDER.started and RECORDER.metric_cats):  # only a real SDK collects
                try:
                    ev.ensure_metrics("chunk")
                except Exception as exc:
                    REPORT("otel:metrics-on", f"could not switch metrics on: {type(exc).__name__}: {exc}")
            view = self.read()
            self._replay(view)
            self._view, self._at = view, now
            return view

    def _replay(self, view: MetricsView) -> None:
        for name, inst in self.histograms.items():
            for p in view._index.get(name, ()):
                h = p.histogram
                if h is None:
                    continue
                key = (name, p.attributes)
                prev = self._hist_seen.get(key)
                counts = list(h.counts)
                total = h.sum
                if prev is not None and prev.count <= h.count and len(prev.counts) == len(counts):
                    d = [a - b for a, b in zip(counts, prev.counts)]
                    if min(d) >= 0:
                        counts, total = d, h.sum - prev.sum
                self._hist_seen[key] = h
                if not any(counts):
                    continue
                attrs = p.attrs
                for value, n in replay(h.bounds, counts, total, h.max):
                    for _ in range(n):
                        inst.record(value, attrs)


_INSTRUMENTS: MetricInstruments | None = None


def install(meter: Any = None, keep_default_sink: bool = True) -> MetricInstruments | None:
    """Instrument this process (once; a rank's main process only): the registry's instruments on ``meter`` (the
    API's global ``streamscope`` meter by default) and the span exporter on the event bus (:func:`add_span_sink`).
    Metrics recording is switched on when the global meter provider is an SDK's."""
    global _INSTRUMENTS
    if not is_rank_main():
        return None
    from opentelemetry import metrics

    with _lock:
        if _INSTRUMENTS is None or _INSTRUMENTS.pid != os.getpid():
            _INSTRUMENTS = MetricInstruments(meter or metrics.get_meter(SCOPE, __version__))
        add_span_sink(keep_default_sink)
        if _real(metrics.get_meter_provider()):
            ev.ensure_metrics("chunk")
        return _INSTRUMENTS


def on_entry() -> None:
    """streamscope's entry points call this once per process after OpenTelemetry's API is loaded (see
    ``streamscope.recording.setup``): instrument a rank's main process; nothing elsewhere, nor with the ``otel_auto``
    knob off (``STREAMSCOPE_OTEL_AUTO=0``)."""
    if is_rank_main() and config.get("otel_auto"):
        install()


# --------------------------------------------------------------------------------------------------
# spans
# --------------------------------------------------------------------------------------------------


class SpanWriter:
    """:class:`~streamscope.telemetry.spans.Op` records as spans of an OpenTelemetry tracer, rate-bounded.

    A token bucket (``rate`` spans/s, ``burst`` at once) admits every span but those of :data:`ESSENTIAL_CATEGORIES`
    and failed ones (always admitted). A span not admitted is not started; its children take its parent, and its
    epoch span counts it (:data:`SAMPLED_OUT`). State is bounded: at most :data:`MAX_OPEN` open spans (the oldest
    is ended, marked ``streamscope.end_lost``, when a begin's end never comes) and :data:`MAX_LINKS` downloads.

    Args:
        tracer: an OpenTelemetry tracer (the API's global one follows a provider set later).
        main_pid: the rank's main process (its epoch spans are the others' parents by time).
    """

    def __init__(
        self,
        tracer: Any,
        main_pid: int,
        rate: float = 100.0,
        burst: int = 1000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        from opentelemetry import context, trace

        self._trace = trace
        self._empty = context.Context()
        self.tracer = tracer
        self.main_pid = main_pid
        self.rate = max(0.0, float(rate))
        self.burst = max(1.0, float(burst))
        self.tokens = self.burst
        self.clock = clock
        self.last = clock()
        self.sampled_out = 0
        self.started = 0
        self.live: OrderedDict[tuple[int, int], Any] = OrderedDict()
        self.skipped: OrderedDict[tuple[int, int], Any] = OrderedDict()
        self.downloads: OrderedDict[str, Any] = OrderedDict()
        #: the main process's epoch spans: [begin, end or None, span context, key, sampled_out at begin]
        self.containers: deque[list[Any]] = deque(maxlen=64)

    def _admit(self, op: Op) -> bool:
        if op.cat in ESSENTIAL_CATEGORIES or op.error is not None:
            return True
        now = self.clock()
        self.tokens = min(self.burst, self.tokens + (now - self.last) * self.rate)
        self.last = now
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return True
        self.sampled_out += 1
        return False

    def _container(self, t: int) -> Any:
        for c in reversed(self.containers):
            if c[0] <= t and (c[1] is None or t <= c[1]):
                return c[2]
        return None

    def _parent(self, op: Op) -> Any:
        p = op.parent
        if p is not None:
            sp = self.live.get(p)
            if sp is not None:
                return sp.get_span_context()
            if p in self.skipped:
                return self.skipped[p]
        if op.cat == kinds.EPOCH.cat and op.pid == self.main_pid:
            return None  # a rank's epoch is a root
        return self._container(op.t0)

    def _start(self, op: Op) -> Any:
        trace = self._trace
        parent = self._parent(op)
        if not self._admit(op):
            if op.kind == "start" and op.key is not None:
                self.skipped[op.key] = parent
                if len(self.skipped) > MAX_OPEN:
                    self.skipped.popitem(last=False)
            return None
        ctx = trace.set_span_in_context(trace.NonRecordingSpan(parent)) if parent is not None else self._empty
        links = []
        if op.cat in LINKED_CATEGORIES and op.stem is not None:
            dl = self.downloads.get(op.stem)
            if dl is not None:
                links.append(trace.Link(dl, {"streamscope.link": kinds.DOWNLOAD.name}))
        kind = trace.SpanKind.CLIENT if op.cat == kinds.DOWNLOAD.cat else trace.SpanKind.INTERNAL
        span = self.tracer.start_span(
            op.name, context=ctx, kind=kind, attributes=op.attrs, links=links, start_time=op.t0
        )
        self.started += 1
        sc = span.get_span_context()
        if op.cat == kinds.DOWNLOAD.cat and op.name == kinds.DOWNLOAD.name and op.stem is not None:
            self.downloads[op.stem] = sc
            self.downloads.move_to_end(op.stem)
            if len(self.downloads) > MAX_LINKS:
                self.downloads.popitem(last=False)
        if op.cat == kinds.EPOCH.cat and op.pid == self.main_pid and op.key is not None:
            self.containers.append([op.t0, op.t1 if op.kind == "whole" else None, sc, op.key, self.sampled_out])
        return span

    def _end(self, span: Any, op: Op, t1: int, key: tuple[int, int] | None) -> None:
        trace = self._trace
        if op.kind == "end" and op.attrs:
            span.set_attributes(op.attrs)
        if op.error is not None:
            span.set_status(trace.Status(trace.StatusCode.ERROR, op.error))
        for c in self.containers:
            if c[3] == key:
                c[1] = t1
                span.set_attribute(SAMPLED_OUT, self.sampled_out - c[4])
                break
        span.end(end_time=max(t1, 0))

    def end_all(self) -> int:
        """End every open span now, marked ``streamscope.end_lost``; how many."""
        n = 0
        while self.live:
            _key, span = self.live.popitem(last=False)
            span.set_attribute("streamscope.end_lost", True)
            span.end()
            n += 1
        self.skipped.clear()
        return n

    def write(self, ops: Iterable[Op]) -> None:
        """Start, end or annotate spans, in order."""
        live = self.live
        for op in ops:
            kind = op.kind
            if kind == "start":
                span = self._start(op)
                if span is not None and op.key is not None:
                    live[op.key] = span
                    if len(live) > MAX_OPEN:
                        _key, old = live.popitem(last=False)
                        old.set_attribute("streamscope.end_lost", True)
                        old.end()
            elif kind == "end":
                span = live.pop(op.key, None) if op.key is not None else None
                if span is None:
                    self.skipped.pop(op.key, None)  # type: ignore[arg-type]
                    continue
                self._end(span, op, op.t1, op.key)
            elif kind == "whole":
                span = self._start(op)
                if span is not None:
                    self._end(span, op, op.t1, op.key)
            elif kind == "note" and op.parent is not None:
                span = live.get(op.parent)
                if span is not None:
                    span.add_event(op.name, op.attrs, timestamp=op.t0)


def end_open_spans() -> int:
    """End the spans still open in this process's span writer now (marked ``streamscope.end_lost``): their ends will
    not come (process exit). How many."""
    st = _STATE
    if st is None or st.pid != os.getpid():
        return 0
    with st.lock:
        return st.writer.end_all()


class _SinkState:
    """The span exporter's state in one process: kept when the event bus rebuilds its exporters."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.encoder = SpanEncoder(self.pid, int(float(config.get("otel_stall_min")) * 1e9))
        from opentelemetry import trace

        self.writer = SpanWriter(
            trace.get_tracer(SCOPE, __version__),
            self.pid,
            float(config.get("otel_span_rate")),
            int(config.get("otel_span_burst")),
        )
        self.reader = SpoolReader()
        self.lock = threading.Lock()


_STATE: _SinkState | None = None


def _state() -> _SinkState:
    global _STATE
    with _lock:
        if _STATE is None or _STATE.pid != os.getpid():
            _STATE = _SinkState()
        return _STATE


class OTelSpanSink:
    """The event bus's exporter into OpenTelemetry's tracer, in a rank's main process (see the module doc).

    ``export`` encodes the batch (:class:`~streamscope.telemetry.spans.SpanEncoder`) and writes its spans
    (:class:`SpanWriter`) to the global tracer provider: the application's, or the one ``enable_telemetry()``
    set up. The SDK's span processor takes them from there (its queue is bounded); nothing here waits for a network.
    ``tick`` (every flush) takes what the rank's other processes spooled (:mod:`.spool`).
    """

    mixed_batches = True

    def __init__(self) -> None:
        self.state = _state()
        self.closed = False

    def export(self, batch: EventBatch) -> ExportResult:
        """Write the batch's spans; FAILURE once shut down (OpenTelemetry's exporter contract: the state is shared
        by the process's span exporters, so a shut-down one must not keep writing through it)."""
        if self.closed:
            return ExportResult.FAILURE
        self._write(batch)
        return ExportResult.SUCCESS

    def tick(self) -> None:
        if not self.closed:
            self._write(None)

    def _write(self, batch: EventBatch | None) -> None:
        """``batch`` and what other processes spooled, as one batch in time order: a worker's flush spooled its
        events before it handed the rest over in a parcel (which ``batch`` may hold), and a chunk's download by one
        worker is written before another worker's reads of that chunk link to it."""
        st = self.state
        with st.lock:
            batches = st.reader.collect(RECORDER.metrics_dir)
            if batch is not None:
                batches.append(batch)
            if batches:
                st.writer.write(st.encoder.encode(batches[0] if len(batches) == 1 else _merged(batches)))

    def force_flush(self, timeout_millis: int = FLUSH_TIMEOUT_MILLIS) -> bool:
        """Takes what other processes spooled. The SDK's queue is the SDK's to flush: a call here must not wait for
        a slow endpoint (``enable_telemetry()``'s handle flushes it)."""
        self.tick()
        return True

    def shutdown(self) -> None:
        """Takes what other processes spooled, once; later calls do nothing."""
        self.tick()
        self.closed = True


def _merged(batches: list[EventBatch]) -> EventBatch:
    """One batch of the events of ``batches``, each process with its own rank/worker fields."""
    events: list[Any] = []
    envs: dict[int, dict[str, int]] = {}
    for b in batches:
        events += b.events
        for pid in {e[4] for e in b.events}:
            envs[pid] = b.env_of(pid)
    return EventBatch(events, batches[-1].epoch_offset_ns, batches[-1].env, envs)


def span_sink() -> OTelSpanSink | SpoolSink:
    """The factory of :data:`SPAN_SINK`: the OpenTelemetry exporter in a rank's main process, the spool elsewhere."""
    if is_rank_main():
        return OTelSpanSink()
    return SpoolSink(RECORDER.metrics_dir)
