"""What a user switches on from code, above the engine's layers.

:mod:`.tracing` (``enable_tracer``, ``enable_metrics``, ``metrics``, ``flush_tracer``), :mod:`.telemetry`
(``enable_telemetry``: OTLP export and the Prometheus endpoint), :mod:`.merge` (``merge_datasets``) and
:mod:`.breakpoint` (a pdb prompt that works in worker processes). The tuner, when it lands, is switched on here.
"""

__all__: list[str] = []
