"""``litdata.streaming.cache.Dir`` at the same path (LitData re-exports the resolver's ``Dir`` there)."""

from streamscope._core.dirs import Dir

__all__ = ["Dir"]
