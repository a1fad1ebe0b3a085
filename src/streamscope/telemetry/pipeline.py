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

The pieces: the SDK classes made lazily in :mod:`.sdk_classes`, the exporters of each signal in
:mod:`.signal_exporters`, the pump threads in :mod:`.pump`, the counts and the said-once messages in
:mod:`.export_stats`; this module puts them together.
"""

from __future__ import annotations

import math
import os
import threading
import time
from typing import Any

from streamscope._core import config
from streamscope._core.optional import require
from streamscope.events.registry import BUCKETS_S
from streamscope.telemetry.export_stats import GAVE_UP, Stats, quiet_sdk_logs, say_once
from streamscope.telemetry.otel import SCOPE, end_open_spans
from streamscope.telemetry.otlp_config import OTLPConfig, redact_url
from streamscope.telemetry.pump import Pump
from streamscope.telemetry.sdk_classes import FEATURE, make_providers, make_queue_processor, make_resource
from streamscope.telemetry.signal_exporters import counting_metric_exporter, metric_exporter, span_exporter

__all__ = ["FEATURE", "Pipeline", "Stats", "say_once"]

#: How long shutdown waits for an export its exporter's shutdown has just ended (seconds).
_EXIT_GRACE_S = 0.25


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
        self.pumps: list[Pump] = []
        self.closed = False
        self._span_lock = threading.Lock()  # one span export at a time (the pump's, or a force_flush's)
        require("opentelemetry.sdk", FEATURE)
        from opentelemetry import metrics, trace
        from opentelemetry.sdk.resources import Resource

        resource = make_resource()(Resource.create(cfg.resource))
        self._span_wake = threading.Event()
        self._metric_wake = threading.Event()
        if cfg.traces.exporters:
            if set_global and _provider_set(trace.get_tracer_provider()):
                say_once("kept:traces", "kept the application's TracerProvider: streamscope's spans go there")
            else:
                self.span_exporters = [
                    (kind if kind == "console" else redact_url(cfg.traces.endpoint), span_exporter(kind, cfg.traces))
                    for kind in cfg.traces.exporters
                ]
                self.processor = make_queue_processor()(cfg.span_queue, cfg.span_batch, self.stats, self._span_wake)
                tp = make_providers(make_queue_processor())[0](resource=resource, shutdown_on_exit=False)
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
                    exporter = counting_metric_exporter(metric_exporter(kind, cfg.metrics), self.stats, where)
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
                self.meter_provider = make_providers(make_queue_processor())[1](
                    resource=resource, metric_readers=self.readers, views=[view], shutdown_on_exit=False
                )
        quiet_sdk_logs()
        if self.tracer_provider is not None:
            if set_global:
                trace.set_tracer_provider(self.tracer_provider)
                self.installed.add("traces")
            self.pumps.append(Pump("streamscope-otlp-spans", cfg.span_delay_s, self._export_spans, self._span_wake))
        if self.meter_provider is not None:
            if set_global:
                metrics.set_meter_provider(self.meter_provider)
                self.installed.add("metrics")
            self.pumps.append(
                Pump("streamscope-otlp-metrics", cfg.metric_interval_s, self._export_metrics, self._metric_wake)
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
                    why = None if getattr(result, "name", "") == "SUCCESS" else GAVE_UP
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
