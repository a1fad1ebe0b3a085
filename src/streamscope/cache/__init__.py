"""The local chunk cache: atomic publish, reference counts, eviction by bytes."""

__all__: list[str] = []
