"""Live telemetry of a rank's main process: the Prometheus endpoint (:mod:`.prometheus`) and OTLP export.

Exporters here read the event bus's merged metrics (``streamscope.events.metrics_view()``) and its traced events;
DataLoader and optimize workers only record and hand their data to their main process, as for the trace log.

* :mod:`.prometheus`: the Prometheus endpoint of each rank;
* :mod:`.otel`: streamscope through ``opentelemetry-api``: the metric registry as instruments, and the span
  exporter of the event bus (an application that set up OpenTelemetry gets both with no streamscope call);
* :mod:`.spans`: which events become spans (parents, links, attributes; the span rate bound); :mod:`.spool`: a
  worker's spans handed to its main process through the run directory;
* :mod:`.otlp_config`: the ``OTEL_*`` variables, validated; :mod:`.pipeline`: the SDK set-up of
  ``streamscope.enable_telemetry()`` (bounded queues, two export threads, faults counted).
"""

__all__: list[str] = []
