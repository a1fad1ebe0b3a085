"""Lowest layer: configuration (every knob), the exception tree, units and protocols. Stdlib only."""

__all__: list[str] = []
