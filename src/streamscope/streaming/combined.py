"""``litdata.streaming.combined`` at the same path."""

from __future__ import annotations

from typing import Any

__all__ = ["CombinedStreamingDataset"]  # noqa: F822 - resolved by __getattr__


def __getattr__(name: str) -> Any:
    # resolved on use, so this path works as soon as the stream layer provides the class
    if name == "CombinedStreamingDataset":
        from streamscope.engine.combined import CombinedStreamingDataset

        return CombinedStreamingDataset
    raise AttributeError(f"module 'streamscope.streaming.combined' has no attribute {name!r}")
