"""``litdata.streaming.resolver.Dir`` at the same path."""

from streamscope._core.dirs import Dir

__all__ = ["Dir"]
