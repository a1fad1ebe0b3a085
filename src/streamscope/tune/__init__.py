"""The auto-tuner: moves live knobs from live metrics."""

__all__: list[str] = []
