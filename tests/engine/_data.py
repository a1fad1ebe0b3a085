"""Small datasets for the read-path tests, written with the format package's ChunkWriter."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import numpy as np

from streamscope.format.index import write_index
from streamscope.format.item_loader import TokensLoader
from streamscope.format.writer import ChunkWriter


def write_dataset(
    out_dir: str,
    n: int,
    make: Callable[[int], Any] | None = None,
    *,
    chunk_size: int = 10,
    compression: str | None = None,
    tokens_loader: TokensLoader | None = None,
) -> str:
    """Write ``n`` samples ``make(i)`` (default ``{"index": i, "name": f"s{i}"}``) into ``out_dir``."""
    make = make or (lambda i: {"index": i, "name": f"s{i}"})
    w = ChunkWriter(out_dir, chunk_size=chunk_size, compression=compression, item_loader=tokens_loader)
    for i in range(n):
        w.add_item(i, make(i))
    w.done()
    write_index(os.path.join(out_dir, "index.json"), w.chunks, w.config)
    return out_dir


def image_sample(i: int) -> dict[str, Any]:
    """The benchmark's sample shape, small: uint8 image, int label, str name."""
    rng = np.random.default_rng(i)
    return {"image": rng.integers(0, 255, (3, 8, 8), dtype=np.uint8), "label": i, "name": f"img{i}"}


def index_of(sample: Any) -> int:
    """The sample id of a default sample (dict with "index")."""
    return int(sample["index"])


def small_plan(sizes: list[int], **kw: Any) -> Any:
    """``make_plan`` with the plan tests' defaults (one rank, batch 4, no shuffle, seed 42, epoch 1)."""
    from streamscope.engine.plan import make_plan

    args: dict[str, Any] = dict(world_size=1, rank=0, batch_size=4, drop_last=False, shuffle=False, seed=42, epoch=1)
    args.update(kw)
    return make_plan(sizes, **args)


def plan_samples(plan: Any) -> list[Any]:
    """Every sample of ``plan``, batch after batch."""
    return [s for j in range(plan.num_batches) for s in plan.batch(j)]
