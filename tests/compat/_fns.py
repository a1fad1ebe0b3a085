"""Picklable functions for optimize()/map() as LitData's README writes them (workers import this module)."""

from __future__ import annotations

import os
from typing import Any

import numpy as np


def sample(i: int) -> dict[str, Any]:
    """README-style sample: an index, a small image array, a class id and a name."""
    rng = np.random.default_rng(i)
    return {"index": i, "image": rng.integers(0, 255, (3, 4, 4), dtype=np.uint8), "class": i % 7, "name": f"s{i}"}


def pairs(i: int) -> Any:
    """A generator fn: each input yields two samples."""
    for k in range(2):
        yield {"index": 2 * i + k, "value": float(i) + k / 10}


def tokens(i: int) -> Any:
    """A token sequence of variable length (TokensLoader datasets)."""
    import torch

    return torch.arange(i * 100, i * 100 + 20 + (i % 5) * 3, dtype=torch.int32)


def shifted(i: int) -> dict[str, Any]:
    """Samples for the append-mode second run (indexes after ``sample``'s)."""
    return sample(1000 + i)


def write_text(item: Any, output_dir: str) -> None:
    """A map() fn: writes one small file per input into ``output_dir``."""
    with open(os.path.join(output_dir, f"item-{item}.txt"), "w") as f:
        f.write(f"content {item}\n")


def random_images(index: int) -> dict[str, Any]:
    """LitData README quick start: a PIL image, a numpy integer class and the index (seeded, so reproducible)."""
    from PIL import Image

    rng = np.random.RandomState(index)
    image = Image.fromarray(rng.randint(0, 256, (8, 8, 3), dtype=np.uint8))
    return {"index": index, "image": image, "class": rng.randint(10)}


def mixed(i: int) -> Any:
    """A tuple sample mixing leaf types: tensor, str, bytes, float, nested list, numpy scalar, bool."""
    import torch

    return (
        torch.arange(i % 3 + 1, dtype=torch.float32) * i,
        f"text-{i}",
        bytes([i % 256]) * (i % 4 + 1),
        i / 4,
        [i, {"nested": i * 3}],
        np.int64(i) * 7,
        bool(i % 2),
    )


def negate(sample: dict[str, Any]) -> dict[str, Any]:
    """A transform for StreamingDataset(transform=...), importable by spawned workers."""
    return {"i": sample["index"], "neg": -sample["index"]}


def byte_len(data: bytes) -> int:
    """A StreamingRawDataset transform: the item's size."""
    return len(data)


def batch_sum(items: list[int]) -> dict[str, Any]:
    """optimize(batch_size=3): fn receives a list of inputs."""
    return {"first": items[0], "sum": sum(items), "n": len(items)}


def ident(i: int) -> int:
    return i


def plus_100(i: int) -> int:
    return i + 100


def nothing(i: int) -> None:
    """An optimize() fn that returns no sample (every input filtered out)."""
    return None


def write_is_last(item: Any, output_dir: str, is_last: bool) -> None:
    """A map() fn taking LitData's optional ``is_last``: the file name records it."""
    with open(os.path.join(output_dir, f"{item}_{is_last}.txt"), "w") as f:
        f.write("x")
