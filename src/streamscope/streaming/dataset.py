"""``litdata.streaming.dataset`` at the same path (with ``Dir``, which LitData's module imports and code
imports from it)."""

from streamscope._core.dirs import Dir  # noqa: F401
from streamscope.engine import StreamingDataset  # noqa: F401

__all__ = ["Dir", "StreamingDataset"]
