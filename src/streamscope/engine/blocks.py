"""A worker's batches located a block at a time: one plan call locates the epoch positions from a block's first
batch to its last (at most :data:`BLOCK_POSITIONS`), and the worker keeps its own batches of them."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from streamscope.engine.plan import EpochPlan

__all__ = ["BLOCK_POSITIONS", "Block", "blocks"]

BLOCK_POSITIONS = 1 << 16  # epoch positions located per plan call (bounds the arrays' memory)


class Block:
    """Consecutive batches of one worker: their ids, the chunk/item arrays of their samples (in order) and each
    batch's ``[a, b)`` in those arrays."""

    __slots__ = ("bounds", "ci", "ids", "ii")

    def __init__(self, ids: list[int], ci: np.ndarray, ii: np.ndarray, bounds: list[tuple[int, int]]) -> None:
        self.ids, self.ci, self.ii, self.bounds = ids, ci, ii, bounds


def blocks(plan: EpochPlan, batch_ids: range) -> Iterator[tuple[int, Block]]:
    """``(k0, block)`` over ``batch_ids`` (``k0``: the position of the block's first batch in ``batch_ids``).

    A worker's batches are every ``num_workers``-th of the epoch: a block locates the epoch positions from its
    first batch to its last in one plan call and keeps this worker's.
    """
    n = len(batch_ids)
    k0 = 0
    while k0 < n:
        ranges = [plan.batch_range(batch_ids[k0])]
        a0 = ranges[0][0]
        k1 = k0 + 1
        while k1 < n:
            r = plan.batch_range(batch_ids[k1])
            if r[1] - a0 > BLOCK_POSITIONS:
                break
            ranges.append(r)
            k1 += 1
        ci, ii = plan.range_arrays(a0, ranges[-1][1])
        lens = np.fromiter((b - a for a, b in ranges), dtype=np.int64, count=len(ranges))
        ends = np.cumsum(lens)
        if int(ends[-1]) != len(ci):  # other workers' batches in between: keep this worker's positions
            starts = np.fromiter((a - a0 for a, _ in ranges), dtype=np.int64, count=len(ranges))
            sel = np.repeat(starts - (ends - lens), lens) + np.arange(int(ends[-1]))
            ci, ii = ci[sel], ii[sel]
        bounds = list(zip((ends - lens).tolist(), ends.tolist()))
        yield k0, Block(list(batch_ids[k0:k1]), ci, ii, bounds)
        k0 = k1
