"""The exporters of each signal, by kind (``console`` or ``otlp``) and protocol (OTLP over HTTP or gRPC, gzipped or
not), the metric one wrapped to count the outcome of each export (the SDK's reader ignores it)."""

from __future__ import annotations

from typing import Any

from streamscope._core.optional import require
from streamscope.telemetry.export_stats import GAVE_UP, Stats
from streamscope.telemetry.otlp_config import SignalConfig
from streamscope.telemetry.sdk_classes import FEATURE

__all__ = ["counting_metric_exporter", "metric_exporter", "span_exporter"]


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


def counting_metric_exporter(inner: Any, stats: Stats, where: str) -> Any:
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
            stats.sent("metrics", n, where, None if result is export_mod.MetricExportResult.SUCCESS else GAVE_UP)
            return result

        def force_flush(self, timeout_millis: float = 10_000) -> bool:
            return bool(inner.force_flush(timeout_millis=timeout_millis))

        def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
            inner.shutdown(timeout_millis=timeout_millis, **kwargs)

    return CountingMetricExporter()


def _otlp(module: str, cls: str, sc: SignalConfig) -> Any:
    """The OTLP exporter ``cls`` of one signal (``module``: ``trace_exporter`` or ``metric_exporter``), over gRPC
    or HTTP as ``sc`` says."""
    if sc.protocol == "grpc":
        mod = require(f"opentelemetry.exporter.otlp.proto.grpc.{module}", "OTLP/gRPC export", "otel-grpc")
        grpc = require("grpc", "OTLP/gRPC export", "otel-grpc")
        comp = grpc.Compression.Gzip if sc.compression == "gzip" else grpc.Compression.NoCompression
        return getattr(mod, cls)(
            endpoint=sc.endpoint, insecure=sc.insecure, headers=sc.headers, timeout=sc.timeout_s, compression=comp
        )
    mod = require(f"opentelemetry.exporter.otlp.proto.http.{module}", FEATURE, "otel")
    http = require("opentelemetry.exporter.otlp.proto.http", FEATURE, "otel")
    comp = http.Compression.Gzip if sc.compression == "gzip" else http.Compression.NoCompression
    return getattr(mod, cls)(endpoint=sc.endpoint, headers=sc.headers, timeout=sc.timeout_s, compression=comp)


def span_exporter(kind: str, sc: SignalConfig) -> Any:
    if kind == "console":
        return require("opentelemetry.sdk.trace.export", FEATURE).ConsoleSpanExporter()
    return _otlp("trace_exporter", "OTLPSpanExporter", sc)


def metric_exporter(kind: str, sc: SignalConfig) -> Any:
    if kind == "console":
        return require("opentelemetry.sdk.metrics.export", FEATURE).ConsoleMetricExporter()
    return _otlp("metric_exporter", "OTLPMetricExporter", sc)
