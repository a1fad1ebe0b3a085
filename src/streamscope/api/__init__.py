"""The one place that wires pipelines, sinks and the tuner together."""

__all__: list[str] = []
