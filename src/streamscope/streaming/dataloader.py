"""``litdata.streaming.dataloader`` at the same path."""

from streamscope.stream import StreamingDataLoader  # noqa: F401

__all__ = ["StreamingDataLoader"]
