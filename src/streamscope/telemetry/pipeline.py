"""The OpenTelemetry SDK set-up of ``enable_telemetry()``: OTLP exporters behind bounded queues, on two threads of
the rank's main process.

Built from an :class:`~streamscope.telemetry.otlp_config.OTLPConfig` (needs the ``otel`` extra; imported lazily:
the SDK's import costs 0.15-0.25 s):

* traces: a ``TracerProvider`` whose span processor (:class:`QueueSpanProcessor`) appends each ended span to a
  bounded queue (``OTEL_BSP_MAX_QUEUE_SIZE``; a full queue drops the span and counts it); the *span pump* thread
  exports batches (``OTEL_BSP_MAX_EXPORT_BATCH_SIZE``) every ``OTEL_BSP_SCHEDULE_DELAY``, or sooner when a batch
  is full;
* metrics: a ``MeterProvider`` with a reader that has no thread of its own and a View giving streamscope's
  histograms the registry's bounds in seconds; the *metric pump* thread collects and exports every
  ``OTEL_METRIC_EXPORT_INTERVAL``.

Why not the SDK's ``BatchSpanProcessor`` and ``PeriodicExportingMetricReader`` threads: opentelemetry-python
re-creates them in every forked child (``os.register_at_fork``), so each DataLoader worker forked per epoch would
start two threads, and its metric reader would export a copy of the parent's metrics from the worker. Here a forked
child inherits no thread, and the processor and instruments do nothing outside the process that built them.

Faults never reach the training loop: exports run on the pumps; an export that fails (endpoint unreachable,
hanging past ``OTEL_EXPORTER_OTLP_TIMEOUT``, answering 4xx/5xx) counts ``streamscope.events.export.errors`` and
its items in ``streamscope.events.export.dropped``, and is said once on stderr (the SDK's own repeated log lines
are cut to their first). Memory stays bounded by the queue whatever the endpoint does. At exit the last export
may take at most ``otel_exit_timeout`` seconds (and a quarter second for an export its exporter's shutdown has just
ended); what is still being sent then is counted as dropped and said, so a run shorter than one export's retries
still reports what it lost.
"""

from __future__ import annotations

import functools
import logging
import math
import os
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from streamscope._core import config
from streamscope._core.optional import require
from streamscope.events import instruments
from streamscope.events.registry import BUCKETS_S, M
from streamscope.telemetry.otel import SCOPE, end_open_spans
from streamscope.telemetry.otlp_config import OTLPConfig, SignalConfig, redact_url

__all__ = ["FEATURE", "Pipeline", "Stats", "say_once"]


FEATURE = "OTLP export (streamscope.enable_telemetry)"

_said: set[str] = set()
#: How long shutdown waits for an export its exporter's shutdown has just ended (seconds).
_EXIT_GRACE_S = 0.25
#: Why an export failed when the exporter returned FAILURE (the SDK logged the cause).
_GAVE_UP = "the exporter gave up, see the OpenTelemetry log line above"


def say_once(key: str, message: str) -> None:
    """``message`` on stderr the first time ``key`` comes up in this process (never raises)."""
    if key in _said:
        return
    _said.add(key)
    try:
        sys.stderr.write(f"streamscope telemetry: {message}\n")
    except Exception:
        pass


class _OnceFilter(logging.Filter):
    """Lets each message template of the OpenTelemetry exporters' loggers through once: an endpoint that stays down
    would otherwise log every batch and every retry."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: set[tuple[str, Any]] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        key = (record.name, record.msg)
        if key in self.seen:
            return False
        self.seen.add(key)
        return True


_FILTER = _OnceFilter()
_QUIETED = ("opentelemetry.exporter", "opentelemetry.sdk.metrics", "opentelemetry.sdk.trace")


def _quiet_sdk_logs() -> None:
    for name in list(logging.root.manager.loggerDict):
        if name.startswith(_QUIETED):
            lg = logging.getLogger(name)
            if _FILTER not in lg.filters:
                lg.addFilter(_FILTER)


class Stats:
    """Counts of one pipeline (also added to the registry's ``streamscope.events.export.*`` counters)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.said: set[str] = set()
        self.exported = {"traces": 0, "metrics": 0}
        self.failed = {"traces": 0, "metrics": 0}
        self.dropped = {"traces": 0, "metrics": 0}
        #: items an export holds right now (see :meth:`sending`, :meth:`abandon`)
        self.in_flight = {"traces": 0, "metrics": 0}
        self.abandoned = False

    def sending(self, signal: str, n: int) -> None:
        """An export of ``n`` items begins; :meth:`sent` ends it."""
        with self.lock:
            self.in_flight[signal] += n

    def sent(self, signal: str, n: int, where: str, why: str | None) -> None:
        """The export of :meth:`sending` returned: its items exported (``why`` None) or failed (``why`` says why).
        Not counted again when shutdown has already counted them as dropped (:meth:`abandon`)."""
        with self.lock:
            if self.abandoned:
                return
            self.in_flight[signal] -= n
            if why is None:
                self.exported[signal] += n
                return
        self.fail(signal, n, where, why)

    def abandon(self) -> dict[str, int]:
        """Shutdown gives up on the exports still running: their items, per signal (counted as dropped by the
        caller); the outcomes they report later are ignored."""
        with self.lock:
            self.abandoned = True
            left = {k: v for k, v in self.in_flight.items() if v > 0}
            self.in_flight = {k: 0 for k in self.in_flight}
            return left

    def fail(self, signal: str, n: int, where: str, why: str) -> None:
        with self.lock:
            self.failed[signal] += 1
            self.dropped[signal] += n
        instruments.add_key(M.EXPORT_ERRORS.name, 1)
        if n:
            instruments.add_key(M.EXPORT_DROPPED.name, n)
        self.say(
            f"fail:{signal}",
            f"OTLP {signal} export to {where} failed ({why}); the training loop carries on, what cannot be sent is "
            f"dropped and counted in {M.EXPORT_DROPPED.name} (said once)",
        )

    def drop(self, signal: str, n: int, why: str) -> None:
        with self.lock:
            self.dropped[signal] += n
        instruments.add_key(M.EXPORT_DROPPED.name, n)
        self.say(f"drop:{signal}", f"{why}; what was dropped is counted in {M.EXPORT_DROPPED.name} (said once)")

    def say(self, key: str, message: str) -> None:
        """``message`` on stderr the first time ``key`` comes up for this pipeline."""
        with self.lock:
            if key in self.said:
                return
            self.said.add(key)
        say_once(f"{id(self)}:{key}", message)


def _span_processor_base() -> type:
    base: type = require("opentelemetry.sdk.trace", FEATURE).SpanProcessor
    return base


@functools.cache  # the classes are made once (the SDK is imported lazily)
def _make_queue_processor() -> type:
    base = _span_processor_base()

    class QueueSpanProcessor(base):  # type: ignore[misc, valid-type]
        """Ended spans into a bounded queue (a full queue drops and counts); the span pump exports them."""

        def __init__(self, size: int, batch: int, stats: Stats, wake: threading.Event) -> None:
            self.pid = os.getpid()
            self.size = size
            self.batch = batch
            self.queue: deque[Any] = deque()
            self.stats = stats
            self.wake = wake
            self.closed = False

        def on_start(self, span: Any, parent_context: Any = None) -> None:
            return None

        def on_end(self, span: Any) -> None:
            if self.closed or os.getpid() != self.pid:
                return  # a forked child: its parent exports
            q = self.queue
            if len(q) >= self.size:
                self.stats.drop(
                    "traces", 1, f"the span queue (OTEL_BSP_MAX_QUEUE_SIZE={self.size}) is full: the endpoint is slow"
                )
                return
            q.append(_slim(span))
            if len(q) >= self.batch:
                self.wake.set()

        def take(self, n: int) -> list[Any]:
            q = self.queue
            out: list[Any] = []
            while q and len(out) < n:
                out.append(q.popleft())
            return out

        def shutdown(self) -> None:
            self.closed = True

        def force_flush(self, timeout_millis: int = 30_000) -> bool:
            return True

    return QueueSpanProcessor


#: What the process-dependent resource detection gives in a forked child of the pipeline (see below): no news.
_UNCHANGED = object()


def _unchanged() -> object:
    return _UNCHANGED


def _fork_hook_without_redetection(sdk_module: str, handle_fork: Callable[[], None]) -> None:
    """Run an SDK provider's fork hook (in a forked child) with its resource re-detection left out.

    opentelemetry-sdk (1.39+) re-runs the process-dependent resource detectors (``service.instance.id``) in every
    forked child, on a thread pool of their own, and merges their resource into the provider's: a few ms and two
    threads per DataLoader worker forked per epoch. A forked child exports nothing through this pipeline (see the
    module doc), so its providers keep the parent's resource; the hook's other work (its locks made anew) runs as
    the SDK has it. The child has one thread here, so swapping the module's function for the call is safe.
    """
    mod = sys.modules.get(sdk_module)
    name = "_get_process_dependent_resource"
    saved = getattr(mod, name, None)
    if saved is None:
        handle_fork()
        return
    setattr(mod, name, _unchanged)
    try:
        handle_fork()
    finally:
        setattr(mod, name, saved)


@functools.cache  # the classes are made once (the SDK is imported lazily)
def _make_providers(queue_processor: type) -> tuple[type, type]:
    """The SDK's ``TracerProvider`` and ``MeterProvider`` with :func:`_fork_hook_without_redetection`. The tracer
    provider keeps the SDK's whole hook once a span processor other than ``queue_processor`` is added to it (that
    processor may export from a child)."""
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.trace import TracerProvider

    class PipelineTracerProvider(TracerProvider):
        exports_in_children = False

        def add_span_processor(self, span_processor: Any) -> None:
            if not isinstance(span_processor, queue_processor):
                self.exports_in_children = True
            super().add_span_processor(span_processor)

        def _handle_fork(self) -> None:
            base = super()._handle_fork
            if self.exports_in_children:
                base()
            else:
                _fork_hook_without_redetection(TracerProvider.__module__, base)

        def _update_resource(self, resource: Any) -> None:
            if resource is not _UNCHANGED:
                super()._update_resource(resource)

    class PipelineMeterProvider(MeterProvider):
        def _handle_fork(self) -> None:
            _fork_hook_without_redetection(MeterProvider.__module__, super()._handle_fork)

        def _update_resource(self, resource: Any) -> None:
            if resource is not _UNCHANGED:
                super()._update_resource(resource)

    return PipelineTracerProvider, PipelineMeterProvider


@functools.cache  # the class is made once (the SDK is imported lazily)
def _make_resource() -> type:
    base = require("opentelemetry.sdk.resources", FEATURE).Resource

    class PipelineResource(base):  # type: ignore[misc, valid-type]
        """The SDK's ``Resource`` (immutable) with its hash computed once: the OTLP encoder groups every span by
        resource, and the SDK's hash serialises the attributes to JSON at each call."""

        def __init__(self, resource: Any) -> None:
            super().__init__(resource.attributes, resource.schema_url)
            self._hash: int = super().__hash__()

        def __hash__(self) -> int:
            return self._hash

    return PipelineResource


_READABLE: Any = None


def _slim(span: Any) -> Any:
    """An ended span as a plain ``ReadableSpan`` (its events and links as tuples): what the exporter reads, in about
    a third of the memory of the SDK's live span (its lock and bounded lists), so a full queue stays small."""
    global _READABLE
    try:
        if _READABLE is None:
            _READABLE = require("opentelemetry.sdk.trace", FEATURE).ReadableSpan
        return _READABLE(
            name=span.name,
            context=span.context,
            parent=span.parent,
            resource=span.resource,
            attributes=span.attributes,
            events=tuple(span.events),
            links=tuple(span.links),
            kind=span.kind,
            status=span.status,
            start_time=span.start_time,
            end_time=span.end_time,
            instrumentation_scope=span.instrumentation_scope,
        )
    except Exception:
        return span


def _count_points(data: Any) -> int:
    n = 0
    try:
        for rm in data.resource_metrics:
            for sm in rm.scope_metrics:
                for m in sm.metrics:
                    n += len(m.data.data_points)
    except Exception:
        return 0
    return n


def _counting_metric_exporter(inner: Any, stats: Stats, where: str) -> Any:
    export_mod = require("opentelemetry.sdk.metrics.export", FEATURE)

    class CountingMetricExporter(export_mod.MetricExporter):  # type: ignore[misc, name-defined]
        """Counts the outcome of each export of ``inner`` (the SDK's reader ignores it)."""

        def __init__(self) -> None:
            super().__init__(
                preferred_temporality=getattr(inner, "_preferred_temporality", None),
                preferred_aggregation=getattr(inner, "_preferred_aggregation", None),
            )
            self.inner = inner

        def export(self, metrics_data: Any, timeout_millis: float = 10_000, **kwargs: Any) -> Any:
            n = _count_points(metrics_data)
            stats.sending("metrics", n)
            try:
                result = inner.export(metrics_data, timeout_millis=timeout_millis, **kwargs)
            except Exception as exc:
                stats.sent("metrics", n, where, f"{type(exc).__name__}: {exc}")
                return export_mod.MetricExportResult.FAILURE
            stats.sent("metrics", n, where, None if result is export_mod.MetricExportResult.SUCCESS else _GAVE_UP)
            return result

        def force_flush(self, timeout_millis: float = 10_000) -> bool:
            return bool(inner.force_flush(timeout_millis=timeout_millis))

        def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
            inner.shutdown(timeout_millis=timeout_millis, **kwargs)

    return CountingMetricExporter()


def _span_exporter(kind: str, sc: SignalConfig) -> Any:
    if kind == "console":
        return require("opentelemetry.sdk.trace.export", FEATURE).ConsoleSpanExporter()
    if sc.protocol == "grpc":
        mod = require("opentelemetry.exporter.otlp.proto.grpc.trace_exporter", "OTLP/gRPC export", "otel-grpc")
        grpc = require("grpc", "OTLP/gRPC export", "otel-grpc")
        comp = grpc.Compression.Gzip if sc.compression == "gzip" else grpc.Compression.NoCompression
        return mod.OTLPSpanExporter(
            endpoint=sc.endpoint, insecure=sc.insecure, headers=sc.headers, timeout=sc.timeout_s, compression=comp
        )
    mod = require("opentelemetry.exporter.otlp.proto.http.trace_exporter", FEATURE, "otel")
    http = require("opentelemetry.exporter.otlp.proto.http", FEATURE, "otel")
    comp = http.Compression.Gzip if sc.compression == "gzip" else http.Compression.NoCompression
    return mod.OTLPSpanExporter(endpoint=sc.endpoint, headers=sc.headers, timeout=sc.timeout_s, compression=comp)


def _metric_exporter(kind: str, sc: SignalConfig) -> Any:
    if kind == "console":
        return require("opentelemetry.sdk.metrics.export", FEATURE).ConsoleMetricExporter()
    if sc.protocol == "grpc":
        mod = require("opentelemetry.exporter.otlp.proto.grpc.metric_exporter", "OTLP/gRPC export", "otel-grpc")
        grpc = require("grpc", "OTLP/gRPC export", "otel-grpc")
        comp = grpc.Compression.Gzip if sc.compression == "gzip" else grpc.Compression.NoCompression
        return mod.OTLPMetricExporter(
            endpoint=sc.endpoint, insecure=sc.insecure, headers=sc.headers, timeout=sc.timeout_s, compression=comp
        )
    mod = require("opentelemetry.exporter.otlp.proto.http.metric_exporter", FEATURE, "otel")
    http = require("opentelemetry.exporter.otlp.proto.http", FEATURE, "otel")
    comp = http.Compression.Gzip if sc.compression == "gzip" else http.Compression.NoCompression
    return mod.OTLPMetricExporter(endpoint=sc.endpoint, headers=sc.headers, timeout=sc.timeout_s, compression=comp)


class _Pump:
    """A daemon thread of the rank's main process that runs ``step(final)`` every ``interval`` seconds (or when
    woken), and once more with ``final=True`` when stopped."""

    def __init__(self, name: str, interval: float, step: Callable[[bool], None], wake: threading.Event) -> None:
        self.interval = interval
        self.step = step
        self.wake = wake
        self.stopping = False
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stopping:
            self.wake.wait(self.interval)
            self.wake.clear()
            if self.stopping:
                break
            self._step(False)
        self._step(True)

    def _step(self, final: bool) -> None:
        try:
            self.step(final)
        except Exception as exc:  # the pump must survive anything
            say_once(f"pump:{self.thread.name}", f"{self.thread.name} error: {type(exc).__name__}: {exc}")

    def stop(self, timeout: float) -> bool:
        """Ask for the final step and wait for it at most ``timeout`` seconds; True when it finished."""
        self.stopping = True
        self.wake.set()
        if threading.current_thread() is self.thread:
            return False
        self.thread.join(max(0.0, timeout))
        return not self.thread.is_alive()


class Pipeline:
    """The SDK objects of one ``enable_telemetry()`` call (see the module doc).

    Attributes:
        tracer_provider, meter_provider: ours (None for a signal switched off, or when the application had set one:
            see :attr:`installed`).
        installed: which global providers this pipeline set (``traces``, ``metrics``).
        stats: what was exported, failed and dropped.
    """

    def __init__(self, cfg: OTLPConfig, set_global: bool = True) -> None:
        self.cfg = cfg
        self.pid = os.getpid()
        self.stats = Stats()
        self.installed: set[str] = set()
        self.tracer_provider: Any = None
        self.meter_provider: Any = None
        self.span_exporters: list[tuple[str, Any]] = []
        self.processor: Any = None
        self.readers: list[Any] = []
        self.pumps: list[_Pump] = []
        self.closed = False
        self._span_lock = threading.Lock()  # one span export at a time (the pump's, or a force_flush's)
        require("opentelemetry.sdk", FEATURE)
        from opentelemetry import metrics, trace
        from opentelemetry.sdk.resources import Resource

        resource = _make_resource()(Resource.create(cfg.resource))
        self._span_wake = threading.Event()
        self._metric_wake = threading.Event()
        if cfg.traces.exporters:
            if set_global and _provider_set(trace.get_tracer_provider()):
                say_once("kept:traces", "kept the application's TracerProvider: streamscope's spans go there")
            else:
                self.span_exporters = [
                    (kind if kind == "console" else redact_url(cfg.traces.endpoint), _span_exporter(kind, cfg.traces))
                    for kind in cfg.traces.exporters
                ]
                self.processor = _make_queue_processor()(cfg.span_queue, cfg.span_batch, self.stats, self._span_wake)
                tp = _make_providers(_make_queue_processor())[0](resource=resource, shutdown_on_exit=False)
                tp.add_span_processor(self.processor)
                self.tracer_provider = tp
        if cfg.metrics.exporters:
            if set_global and _provider_set(metrics.get_meter_provider()):
                say_once("kept:metrics", "kept the application's MeterProvider: streamscope's metrics go there")
            else:
                from opentelemetry.sdk.metrics import Histogram
                from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
                from opentelemetry.sdk.metrics.view import ExplicitBucketHistogramAggregation, View

                for kind in cfg.metrics.exporters:
                    where = kind if kind == "console" else redact_url(cfg.metrics.endpoint)
                    exporter = _counting_metric_exporter(_metric_exporter(kind, cfg.metrics), self.stats, where)
                    # an infinite interval: the reader starts no thread (ours collects; see the module doc)
                    self.readers.append(
                        PeriodicExportingMetricReader(
                            exporter,
                            export_interval_millis=math.inf,
                            export_timeout_millis=cfg.metric_timeout_s * 1000,
                        )
                    )
                view = View(
                    instrument_type=Histogram,
                    meter_name=SCOPE,
                    aggregation=ExplicitBucketHistogramAggregation(boundaries=BUCKETS_S),
                )
                self.meter_provider = _make_providers(_make_queue_processor())[1](
                    resource=resource, metric_readers=self.readers, views=[view], shutdown_on_exit=False
                )
        _quiet_sdk_logs()
        if self.tracer_provider is not None:
            if set_global:
                trace.set_tracer_provider(self.tracer_provider)
                self.installed.add("traces")
            self.pumps.append(_Pump("streamscope-otlp-spans", cfg.span_delay_s, self._export_spans, self._span_wake))
        if self.meter_provider is not None:
            if set_global:
                metrics.set_meter_provider(self.meter_provider)
                self.installed.add("metrics")
            self.pumps.append(
                _Pump("streamscope-otlp-metrics", cfg.metric_interval_s, self._export_metrics, self._metric_wake)
            )
        # At exit after the event bus: its last flush (threading's exit hook) and the spans of workers killed at exit,
        # which the run's owner closes in a multiprocessing finalizer of priority -10 (events.recorder)
        import multiprocessing.util as mp_util

        self._finalizer = mp_util.Finalize(None, self._at_exit, exitpriority=-20)

    # --- the pumps -------------------------------------------------------------------------------------

    def _export_spans(self, final: bool) -> None:
        proc = self.processor
        if proc is None:
            return
        with self._span_lock:
            self._drain(proc, final)

    def _drain(self, proc: Any, final: bool) -> None:
        deadline = time.monotonic() + self.cfg.span_timeout_s
        while proc.queue:
            batch = proc.take(self.cfg.span_batch)
            for where, exporter in self.span_exporters:
                self.stats.sending("traces", len(batch))
                try:
                    result = exporter.export(batch)
                    why = None if getattr(result, "name", "") == "SUCCESS" else _GAVE_UP
                except Exception as exc:
                    why = f"{type(exc).__name__}: {exc}"
                self.stats.sent("traces", len(batch), where, why)
            if not final and (len(proc.queue) < self.cfg.span_batch or time.monotonic() > deadline):
                break  # a partial batch waits for the next tick

    def _export_metrics(self, final: bool) -> None:
        for reader in self.readers:
            reader.collect(timeout_millis=self.cfg.metric_timeout_s * 1000)

    # --- flushing and shutdown ---------------------------------------------------------------------------

    def force_flush(self, timeout: float = 30.0) -> bool:
        """Export what is queued and collect the metrics now, on the calling thread (at most ``timeout`` s per
        export, the exporters' own limit). True when nothing failed meanwhile."""
        if self.closed or os.getpid() != self.pid:
            return False
        before = dict(self.stats.failed)
        self._export_spans(True)
        for reader in self.readers:
            reader.collect(timeout_millis=timeout * 1000)
        return self.stats.failed == before

    def shutdown(self, timeout: float | None = None) -> None:
        """Last export (at most ``timeout`` s, default the ``otel_exit_timeout`` knob), then stop. Idempotent."""
        if self.closed or os.getpid() != self.pid:
            return
        self.closed = True
        finalizer = getattr(self, "_finalizer", None)
        if finalizer is not None:
            finalizer.cancel()
        if self.processor is not None:
            try:
                end_open_spans()  # their ends will not come: sent as they are rather than lost
            except Exception:
                pass
        if timeout is None:
            try:
                timeout = float(config.get("otel_exit_timeout"))
            except Exception:
                timeout = 5.0
        deadline = time.monotonic() + timeout
        for pump in self.pumps:
            pump.stop(deadline - time.monotonic())
        proc = self.processor
        if proc is not None:
            proc.closed = True
            left = proc.take(len(proc.queue))
            if left:  # not sent within the time allowed: lost, and counted
                self.stats.drop("traces", len(left), "spans still queued at shutdown were not sent in time")
        for _where, exporter in self.span_exporters:
            try:
                exporter.shutdown()  # ends an export still retrying
            except Exception:
                pass
        if self.meter_provider is not None:
            try:
                self.meter_provider.shutdown(timeout_millis=max(0.0, deadline - time.monotonic()) * 1000)
            except Exception:
                pass
        if self.tracer_provider is not None:
            try:
                self.tracer_provider.shutdown()
            except Exception:
                pass
        # An export still retrying when the pumps' time ran out was ended by its exporter's shutdown above: its
        # pump reports the failure within moments. What is still being sent after that grace is dropped here, so
        # that a run shorter than one export's retries still counts and says what it could not send.
        for pump in self.pumps:
            if pump.thread is not threading.current_thread():
                pump.thread.join(_EXIT_GRACE_S)
        for signal, n in self.stats.abandon().items():
            self.stats.drop(signal, n, f"OTLP {signal} still being sent at shutdown (otel_exit_timeout {timeout:g} s)")

    def _at_exit(self) -> None:
        if os.getpid() == self.pid:
            self.shutdown()


def _provider_set(provider: Any) -> bool:
    """The application (or an earlier set-up) set this global provider: not the API's proxy or no-op one."""
    return not type(provider).__module__.startswith(("opentelemetry.metrics", "opentelemetry.trace"))
