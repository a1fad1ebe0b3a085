"""``litdata.streaming.dataloader`` at the same path."""

from streamscope.engine import StreamingDataLoader  # noqa: F401

__all__ = ["StreamingDataLoader"]
