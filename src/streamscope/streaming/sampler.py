"""``litdata.streaming.sampler.ChunkedIndex`` at the same path (used to index a ``Cache``/``BinaryReader``)."""

from streamscope.streaming.reader import ChunkedIndex

__all__ = ["ChunkedIndex"]
