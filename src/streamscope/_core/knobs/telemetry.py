"""Knobs of telemetry: the Prometheus endpoint and the OpenTelemetry wiring."""

from __future__ import annotations

from streamscope._core.knob import parse_port
from streamscope._core.knob_registry import knob

__all__: list[str] = []

# Prometheus

knob(
    "prometheus_port",
    None,
    "port",
    ("STREAMSCOPE_PROMETHEUS_PORT",),
    "Serve the metrics for Prometheus on this port in each rank's main process (unset: off), from its first "
    "dataset or loader on (or `streamscope.enable_telemetry()`); switches metrics on (chunk level). Local rank r "
    "listens on port + r; 0 picks a free port per rank, said on stderr. A port in use is a warning line naming "
    "it (training goes on); `streamscope.telemetry.prometheus.start_endpoint` is the call that raises instead.",
    parse_port,
)
knob(
    "prometheus_addr",
    "127.0.0.1",
    "address",
    ("STREAMSCOPE_PROMETHEUS_ADDR",),
    "Address the Prometheus endpoint listens on (0.0.0.0 or :: for a Prometheus on another host).",
)

# OpenTelemetry

knob(
    "otel_auto",
    True,
    "flag",
    ("STREAMSCOPE_OTEL_AUTO",),
    "When the application has loaded OpenTelemetry's API, streamscope's entry points (a dataset or loader built) "
    "wire streamscope to its global providers with no call: the registry's metrics, and spans at the tracer's "
    "level. 0: only streamscope.enable_telemetry() does.",
)
knob(
    "otel_span_rate",
    100.0,
    "spans/s",
    ("STREAMSCOPE_OTEL_SPAN_RATE",),
    "Sustained rate of chunk-level and stall spans a rank exports to OpenTelemetry (a token bucket, see "
    "otel_span_burst); spans over it are counted on their epoch span (streamscope.spans.sampled_out), not sent. "
    "Epoch, crash and failed spans are always sent; per-sample and per-batch work never becomes a span.",
)
knob(
    "otel_span_burst",
    1000,
    "spans",
    ("STREAMSCOPE_OTEL_SPAN_BURST",),
    "Spans a rank may export at once above otel_span_rate (the token bucket's size).",
)
knob(
    "otel_stall_min",
    0.01,
    "s",
    ("STREAMSCOPE_OTEL_STALL_MIN",),
    "Shortest wait of the training loop for its next batch that becomes a stall span (every wait is in the "
    "streamscope.loader.wait metrics; with num_workers=0 every batch's decoding is a wait).",
)
knob(
    "otel_exit_timeout",
    5.0,
    "s",
    ("STREAMSCOPE_OTEL_EXIT_TIMEOUT",),
    "Longest enable_telemetry()'s last export may hold up process exit (an unreachable or hanging endpoint).",
)
knob(
    "run_id",
    "",
    "text",
    ("STREAMSCOPE_RUN_ID", "TORCHELASTIC_RUN_ID"),
    "Id of the training run, the streamscope.run.id resource attribute of every rank's telemetry (torchrun's "
    "TORCHELASTIC_RUN_ID is the same on every rank). Empty: enable_telemetry() makes one and passes it to the "
    "processes it starts.",
)
