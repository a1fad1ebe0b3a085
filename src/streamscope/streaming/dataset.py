"""``litdata.streaming.dataset`` at the same path."""

from streamscope.stream import StreamingDataset  # noqa: F401

__all__ = ["StreamingDataset"]
