"""LitData-compatible module paths (``litdata.streaming.*``) mapped onto streamscope's layers.

Only re-exports live here; the code is in the layer that owns it.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = [
    "Cache",
    "CombinedStreamingDataset",
    "ParallelStreamingDataset",
    "StreamingDataLoader",
    "StreamingDataset",
    "TokensLoader",
]

_LAZY: dict[str, str] = {
    "StreamingDataset": "streamscope.engine",
    "StreamingDataLoader": "streamscope.engine",
    "CombinedStreamingDataset": "streamscope.engine.combined",
    "ParallelStreamingDataset": "streamscope.engine.parallel",
    "TokensLoader": "streamscope.format.item_loader",
    "Cache": "streamscope.streaming.cache",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'streamscope.streaming' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
