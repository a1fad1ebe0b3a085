"""streamscope: a LitData-compatible streaming-data engine for deep-learning training that you can see into.

Switch from LitData by changing one import: ``import streamscope as ld``.
"""

from __future__ import annotations

__version__ = "0.1.0"

from streamscope._core.errors import (  # noqa: E402
    ChunkWaitTimeoutError,
    StreamscopeError,
)

__all__ = [
    "ChunkWaitTimeoutError",
    "StreamscopeError",
    "__version__",
]
