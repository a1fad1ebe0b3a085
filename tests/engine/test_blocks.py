"""A worker's batches located a block at a time equal the plan's batches one by one (and the chunk schedule)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamscope._core.errors import PlanError
from streamscope.engine import blocks as blocks_module
from streamscope.engine.plan import make_plan

# plans of every shape on purpose, uneven ones included: LitData's uneven-ranks UserWarning (engine/plan_layout.py,
# once per (samples, world size) and process, so under hypothesis it would fail one example and not its replay)
pytestmark = pytest.mark.filterwarnings("ignore:drop_last=False with batch_size=1:UserWarning")


@settings(max_examples=150, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 30), min_size=1, max_size=8),
    batch=st.integers(1, 9),
    world=st.integers(1, 3),
    workers=st.integers(1, 3),
    shuffle=st.booleans(),
    drop_last=st.booleans(),
    buffer=st.sampled_from([0, 7]),
    block=st.sampled_from([1, 5, 64, 1 << 16]),
    start=st.integers(0, 3),
    data=st.data(),
)
def test_blocks_equal_batch_arrays(
    sizes: list[int],
    batch: int,
    world: int,
    workers: int,
    shuffle: bool,
    drop_last: bool,
    buffer: int,
    block: int,
    start: int,
    data: Any,
) -> None:
    rank = data.draw(st.integers(0, world - 1))
    try:
        plan = make_plan(
            sizes,
            world_size=world,
            rank=rank,
            batch_size=batch,
            drop_last=drop_last,
            shuffle=shuffle,
            seed=5,
            epoch=2,
            shuffle_buffer=buffer,
        )
        plan.num_batches  # noqa: B018 (the layout is worked out lazily)
    except PlanError:  # too few samples for these ranks and batches
        return
    w = data.draw(st.integers(0, workers - 1))
    ids = range(start + w, plan.num_batches, workers)
    old = blocks_module.BLOCK_POSITIONS
    blocks_module.BLOCK_POSITIONS = block
    try:
        blocks = list(blocks_module.blocks(plan, ids))
    finally:
        blocks_module.BLOCK_POSITIONS = old
    got_ids: list[int] = []
    for k0, blk in blocks:
        assert k0 == len(got_ids)
        for m, j in enumerate(blk.ids):
            a, b = blk.bounds[m]
            ci, ii = plan.batch_arrays(j)
            assert np.array_equal(blk.ci[a:b], ci) and np.array_equal(blk.ii[a:b], ii)
        got_ids += blk.ids
    assert got_ids == list(ids)


@pytest.mark.parametrize("workers", [1, 2])
def test_plain_iteration_reads_block_by_block(tmp_path: Any, workers: int) -> None:
    """Plain iteration (one call per chunk run) yields what random access does, in the plan's order."""
    from streamscope.engine.dataset import StreamingDataset
    from tests.engine._data import write_dataset

    d = write_dataset(str(tmp_path / "ds"), 57, chunk_size=10)
    ds = StreamingDataset(d, shuffle=True, seed=3)
    plan = ds.plan(1)
    got = []
    for w in range(workers):
        ds.current_epoch = 1  # a complete pass moves to the next epoch
        got += list(ds._plain_iter("epoch", w, workers, 0))
    want = [
        ds[ds.global_index(c, i)]
        for w in range(workers)
        for j in range(w, plan.num_batches, workers)
        for c, i in plan.batch(j)
    ]
    assert got == want and sorted(s["index"] for s in got) == list(range(57))
