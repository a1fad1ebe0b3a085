"""The read path: StreamingDataset, StreamingDataLoader and friends."""

from __future__ import annotations

from typing import Any

__all__ = ["StreamingDataLoader", "StreamingDataset", "train_test_split"]


def __getattr__(name: str) -> Any:
    # Lazy, so that importing streamscope.engine.plan (pure numpy) does not import torch.
    if name == "StreamingDataset":
        from streamscope.engine.dataset import StreamingDataset

        return StreamingDataset
    if name == "StreamingDataLoader":
        from streamscope.engine.dataloader import StreamingDataLoader

        return StreamingDataLoader
    if name == "train_test_split":
        from streamscope.engine.split import train_test_split

        return train_test_split
    raise AttributeError(name)
