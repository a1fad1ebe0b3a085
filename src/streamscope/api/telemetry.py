"""``streamscope.enable_telemetry()``: live metrics and spans over OTLP (and a Prometheus endpoint), in one call.

For applications that have not set up OpenTelemetry themselves. An application that has (its own SDK set-up, or
``opentelemetry-instrument``) needs no call: streamscope instruments through ``opentelemetry-api`` and its
metrics and spans reach the application's providers (see :mod:`streamscope.telemetry.otel`).

What the call does, in the rank's main process only (a DataLoader or optimize worker that runs it does nothing):

1. reads its arguments and the ``OTEL_*`` variables (:mod:`streamscope.telemetry.otlp_config`; a malformed value
   raises :class:`~streamscope._core.errors.TelemetryConfigError` naming it, before anything is set up);
2. sets up the OpenTelemetry SDK with OTLP exporters (:mod:`streamscope.telemetry.pipeline`) as the global tracer
   and meter providers, unless the application set one already (it is kept, and streamscope's data goes there);
   ``OTEL_SDK_DISABLED=true`` sets up nothing. With a Prometheus endpoint asked for (``prometheus_port`` or
   ``STREAMSCOPE_PROMETHEUS_PORT``), only when OTLP is configured too (an ``OTEL_EXPORTER_OTLP_*ENDPOINT``,
   ``OTEL_TRACES_EXPORTER`` / ``OTEL_METRICS_EXPORTER``, or an OTLP argument): Prometheus alone exports nothing
   else, and nothing waits at exit;
3. instruments streamscope: the metric registry as OpenTelemetry instruments, metrics recording switched on
   (``chunk`` level, no trace log), and spans at the tracer's level (``trace_level``; see below) when spans are
   exported;
4. opens the Prometheus endpoint when ``prometheus_port`` or ``STREAMSCOPE_PROMETHEUS_PORT`` says so (the variable
   alone opens it too, at the first dataset or loader: :mod:`streamscope.telemetry.prometheus`).

Call it before building datasets and loaders, so that workers inherit what it switches on.
"""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from streamscope import events as ev
from streamscope import recording
from streamscope._core import config
from streamscope._core.errors import TelemetryConfigError
from streamscope.events import context, vocab
from streamscope.recording.views import node_rank
from streamscope.telemetry import otel, otlp_config, prometheus
from streamscope.telemetry.otlp_config import OTLPConfig

__all__ = ["Telemetry", "enable_telemetry"]

#: Resource attribute names streamscope adds (OpenTelemetry's ``service.name`` and ``host.name``, and its own).
RANK_ATTR = "streamscope.rank"
NODE_ATTR = "streamscope.node"
RUN_ATTR = "streamscope.run.id"


@dataclass
class Telemetry:
    """What :func:`enable_telemetry` set up (returned by it; a second call returns the same object).

    Attributes:
        config: the OTLP configuration used (None: OpenTelemetry not set up, see ``disabled``).
        disabled: ``OTEL_SDK_DISABLED`` was true, or this is not a rank's main process.
        installed: the global providers this call set (``traces``, ``metrics``); a signal missing was set by the
            application (kept) or switched off (``OTEL_TRACES_EXPORTER=none``).
        trace_categories: the categories traced (what becomes spans, and Litracer lines when the log is on).
        prometheus_port: the port of the Prometheus endpoint, or None.
    """

    config: OTLPConfig | None = None
    disabled: bool = False
    installed: frozenset[str] = frozenset()
    trace_categories: frozenset[str] = frozenset()
    prometheus_port: int | None = None
    pipeline: Any = field(default=None, repr=False)

    def force_flush(self, timeout: float = 30.0) -> bool:
        """Hand this process's buffered events to the exporters, then export what is queued and the metrics now (on
        the calling thread: an unreachable endpoint takes up to its timeout). True when every export succeeded."""
        ev.flush()
        if self.pipeline is None:
            return True
        return bool(self.pipeline.force_flush(timeout))

    def shutdown(self, timeout: float | None = None) -> None:
        """Flush, last export (at most ``timeout`` s, default ``otel_exit_timeout``) and stop. Process exit does
        this by itself."""
        ev.flush()
        if self.pipeline is not None:
            self.pipeline.shutdown(timeout)

    @property
    def stats(self) -> dict[str, dict[str, int]]:
        """Spans and metric points exported, failed exports and items dropped, per signal."""
        if self.pipeline is None:
            return {}
        s = self.pipeline.stats
        with s.lock:
            return {"exported": dict(s.exported), "failed": dict(s.failed), "dropped": dict(s.dropped)}


_HANDLE: Telemetry | None = None
_HANDLE_PID = 0


def enable_telemetry(
    *,
    endpoint: str | None = None,
    protocol: str | None = None,
    headers: Mapping[str, str] | None = None,
    timeout: float | None = None,
    compression: str | None = None,
    service_name: str | None = None,
    resource_attributes: Mapping[str, Any] | None = None,
    metric_export_interval: float | None = None,
    trace_level: str | None = None,
    prometheus_port: int | None = None,
    run_id: str | None = None,
) -> Telemetry:
    """Export this rank's metrics and spans over OTLP (and serve Prometheus), honouring the ``OTEL_*`` variables.

    Each argument overrides its variable; without either, OpenTelemetry's defaults apply (``http/protobuf`` to
    ``http://localhost:4318``; streamscope compresses with gzip unless told ``none``), except with a Prometheus
    endpoint: ``enable_telemetry(prometheus_port=9464)`` with no OTLP endpoint, exporter variable or OTLP argument
    (``endpoint``, ``protocol``, ``headers``, ``timeout``, ``compression``) sets up no OTLP export at all.

    Args:
        endpoint: base URL of the collector (as ``OTEL_EXPORTER_OTLP_ENDPOINT``: ``/v1/traces`` and ``/v1/metrics``
            are appended for HTTP; used as is for gRPC).
        protocol: ``http/protobuf`` or ``grpc`` (``OTEL_EXPORTER_OTLP_PROTOCOL``; gRPC needs the ``otel-grpc`` extra).
        headers: sent with every request (merged over ``OTEL_EXPORTER_OTLP_HEADERS``).
        timeout: seconds one export may take, retries included (``OTEL_EXPORTER_OTLP_TIMEOUT``, in milliseconds).
        compression: ``gzip`` or ``none`` (``OTEL_EXPORTER_OTLP_COMPRESSION``).
        service_name: the ``service.name`` resource attribute (``OTEL_SERVICE_NAME``; default ``streamscope``).
        resource_attributes: more resource attributes (over ``OTEL_RESOURCE_ATTRIBUTES``).
        metric_export_interval: seconds between metric exports (``OTEL_METRIC_EXPORT_INTERVAL``, in ms; 60 s).
        trace_level: what becomes spans, as ``enable_tracer(level=...)`` (``off``, ``batch``, ``chunk``, ``sample``,
            ``debug``): one level for every sink, the Litracer log included. None: the tracer's level when tracing
            is on, else ``chunk``. ``off``: metrics only.
        prometheus_port: serve Prometheus on this port (``STREAMSCOPE_PROMETHEUS_PORT``; 0: a free one). A port in
            use raises here; the variable's port in use is a warning line.
        run_id: the ``streamscope.run.id`` resource attribute (``STREAMSCOPE_RUN_ID`` / ``TORCHELASTIC_RUN_ID``;
            default: a new id, passed on to the processes this one starts).

    Returns:
        A :class:`Telemetry` handle (``force_flush()``, ``shutdown()``, ``stats``).

    Raises:
        TelemetryConfigError: a malformed argument or ``OTEL_*`` variable (the message names it; nothing was set up).
        PrometheusPortError: ``prometheus_port`` is in use.
        TraceConfigError: an unknown ``trace_level``.
        MissingDependencyError: the OpenTelemetry SDK is not installed (``pip install "streamscope[otel]"``).
    """
    global _HANDLE, _HANDLE_PID
    cats = _trace_categories(trace_level)
    rank = int(context.env_fields()["dist_global_rank"])
    rid = str(run_id) if run_id is not None else str(config.get("run_id") or "")
    if not rid:
        rid = uuid.uuid4().hex[:16]
    defaults = {
        "service.name": "streamscope",
        "host.name": socket.gethostname(),
        RANK_ATTR: rank,
        NODE_ATTR: node_rank(rank),
        RUN_ATTR: rid,
    }
    if prometheus_port is not None and (
        isinstance(prometheus_port, bool) or not isinstance(prometheus_port, int) or not 0 <= prometheus_port <= 65535
    ):
        raise TelemetryConfigError(f"enable_telemetry(prometheus_port=...): {prometheus_port!r} is not a TCP port")
    # Prometheus asked for and no OTLP configured: no export to OpenTelemetry's default endpoint (otlp_config)
    prometheus_asked = prometheus_port is not None or bool(os.environ.get("STREAMSCOPE_PROMETHEUS_PORT", "").strip())
    cfg = otlp_config.load(
        endpoint=endpoint,
        protocol=protocol,
        headers=headers,
        timeout=timeout,
        compression=compression,
        service_name=service_name,
        resource_attributes_=resource_attributes,
        metric_export_interval=metric_export_interval,
        default_resource=defaults,
        otlp_default=not prometheus_asked,
    )
    if not otel.is_rank_main():
        return Telemetry(disabled=True)
    os.environ["STREAMSCOPE_RUN_ID"] = rid
    exports = not cfg.disabled and bool(cfg.traces.exporters or cfg.metrics.exporters)
    if _HANDLE is not None and _HANDLE_PID == os.getpid():
        handle = _HANDLE  # set up once per process: a later call changes the level and the Prometheus port only,
        if handle.pipeline is None and not handle.disabled and exports:  # or adds OTLP to a Prometheus-only set-up
            handle.config = cfg
            _set_up_otlp(handle, cfg)
    else:
        handle = Telemetry(config=cfg, disabled=cfg.disabled)
        if exports:
            _set_up_otlp(handle, cfg)
        _HANDLE, _HANDLE_PID = handle, os.getpid()
    if not handle.disabled:
        if handle.pipeline is not None:
            handle.trace_categories = _switch_tracing(cats)
        else:  # nothing exports spans: the tracer's level stays as it is (no trace log started for nothing)
            rec = recording.RECORDER
            on = rec.started and rec.pid == os.getpid()
            handle.trace_categories = rec.trace_cats if on else frozenset()
        ev.ensure_metrics("chunk")
    port = _start_prometheus(prometheus_port)
    if port is not None:
        handle.prometheus_port = port
    return handle


def _set_up_otlp(handle: Telemetry, cfg: OTLPConfig) -> None:
    """The OpenTelemetry SDK with the exporters ``cfg`` names, as the global providers (:mod:`.pipeline`), and
    streamscope instrumented on them."""
    from streamscope.telemetry.pipeline import Pipeline

    pipe = Pipeline(cfg)
    handle.pipeline = pipe
    handle.installed = frozenset(pipe.installed)
    otel.install(keep_default_sink=False)


def _trace_categories(level: str | None) -> frozenset[str] | None:
    if level is None:
        return None
    return vocab.categories_for_level(level)


def _switch_tracing(cats: frozenset[str] | None) -> frozenset[str]:
    """Trace ``cats`` (None: keep the tracer's level when it is on, else ``chunk``), for every sink."""
    rec = recording.RECORDER
    on = rec.started and rec.pid == os.getpid() and bool(rec.trace_cats)
    if cats is None:
        if on:
            return rec.trace_cats
        cats = vocab.LEVELS["chunk"]
    elif on and cats == rec.trace_cats:
        return cats
    level = next((name for name, c in vocab.LEVELS.items() if c == cats), "chunk")
    os.environ["STREAMSCOPE_TRACE_LEVEL"] = level if cats else "off"
    os.environ["STREAMSCOPE_TRACE_CATEGORIES"] = ",".join(sorted(cats))
    ev.configure(cats, rec.metric_cats, rec.flush_interval if rec.started else None)
    return cats


def _start_prometheus(port: int | None) -> int | None:
    """The Prometheus endpoint (:mod:`streamscope.telemetry.prometheus`): on ``port`` (a failure raises), or as
    ``STREAMSCOPE_PROMETHEUS_PORT`` says when ``port`` is None (a failure is one warning line, as when the variable
    opens it at the first dataset); the port it listens on, or None."""
    if port is None:
        return prometheus.start_from_env(warn=True)
    return prometheus.start_endpoint(port, str(config.get("prometheus_addr")))
