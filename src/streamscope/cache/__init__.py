"""The local chunk cache: atomic publish, reference counts, eviction by bytes."""
