"""The auto-tuner: moves live knobs from live metrics."""
