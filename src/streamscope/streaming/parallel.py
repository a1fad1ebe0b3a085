"""``litdata.streaming.parallel`` at the same path."""

from __future__ import annotations

from typing import Any

__all__ = ["ParallelStreamingDataset"]  # noqa: F822 - resolved by __getattr__


def __getattr__(name: str) -> Any:
    # resolved on use, like the other compat modules (keeps `import streamscope.streaming.parallel` light)
    if name == "ParallelStreamingDataset":
        from streamscope.engine.parallel import ParallelStreamingDataset

        return ParallelStreamingDataset
    raise AttributeError(f"module 'streamscope.streaming.parallel' has no attribute {name!r}")
