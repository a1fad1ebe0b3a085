"""``litdata.streaming.collate`` at the same path."""

from streamscope.engine.collate_fn import litdata_collate  # noqa: F401

__all__ = ["litdata_collate"]
