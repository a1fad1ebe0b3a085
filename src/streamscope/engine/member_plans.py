"""How Combined and Parallel datasets walk their members: each member's own epoch plan on this rank (every
sample once, rank slices as in its own plan, batches of one), cached per ``(member, epoch)``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from streamscope.engine.plan import EpochPlan, make_plan

__all__ = ["member_plan"]


def member_plan(
    cache: dict[tuple[int, int], EpochPlan], datasets: Sequence[Any], i: int, epoch: int, world_size: int, rank: int
) -> EpochPlan:
    """Member dataset ``i``'s own order of ``epoch`` on this rank (every sample once, rank slices as in its own
    plan), cached in ``cache`` by ``(i, epoch)``: how Combined and Parallel datasets walk their members."""
    key = (i, epoch)
    plan = cache.get(key)
    if plan is None:
        d = datasets[i]
        if len(cache) > 4 * len(datasets):
            cache.clear()
        plan = make_plan(
            d.chunk_sizes,
            world_size=world_size,
            rank=rank,
            batch_size=1,
            drop_last=False,
            shuffle=d.shuffle,
            seed=d.seed,
            epoch=epoch,
            shuffle_buffer=d.shuffle_buffer,
            regions=d.regions,
            equal_batches=False,
        )
        cache[key] = plan
    return plan
