"""Lowest layer: configuration (every knob), the exception tree, units, protocols and the latency histogram. Stdlib
only."""

__all__: list[str] = []
