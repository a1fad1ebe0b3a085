"""``litdata.exceptions`` at the same path: the public exception types of the streaming/optimize I/O."""

from streamscope._core.errors import ChunkWaitTimeoutError

__all__ = ["ChunkWaitTimeoutError"]
