"""What a user switches on from code, above the engine's layers.

:mod:`.tracing` (``enable_tracer``, ``enable_metrics``, ``metrics``, ``flush_tracer``), :mod:`.telemetry`
(``enable_telemetry``: OTLP export and the Prometheus endpoint), :mod:`.merge` (``merge_datasets``) and
:mod:`.breakpoint` (a pdb prompt that works in worker processes). :mod:`.autotune` attaches the auto-tuner to a
loader (``StreamingDataLoader(autotune=...)``), :mod:`.observe` the model's gauges when the tuner is off.
"""

__all__: list[str] = []
