"""Live telemetry of a rank's main process: the Prometheus endpoint (:mod:`.prometheus`) and OTLP export.

Exporters here read the event bus's merged metrics (``streamscope.events.metrics_view()``); DataLoader and
optimize workers only record and hand their data to their main process, as for the trace log.
"""
