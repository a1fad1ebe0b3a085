"""Hypothesis: partitioning over ranks x workers and resume after any batch with any worker count.

Workers are simulated in-process by interleaving ``iter_batches`` generators round robin, which is what
PyTorch's DataLoader does with worker processes (the real-process path is covered in test_dataloader.py).
"""

from __future__ import annotations

import itertools

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streamscope._core.errors import DatasetError
from streamscope.stream.dataset import StreamingDataset
from tests.stream._data import write_dataset


def round_robin(ds: StreamingDataset, epoch: int, start: int, workers: int, bs: int) -> list[tuple[int, list[int]]]:
    gens = [ds.iter_batches(epoch, start, w, workers, bs, None, collate=False) for w in range(workers)]
    out = []
    active = list(gens)
    while active:
        for g in list(active):
            try:
                j, samples = next(g)
            except StopIteration:
                active.remove(g)
                continue
            out.append((j, [s["index"] for s in samples]))
    return out


def as_rank(path: str, rank: int, world: int, **kw) -> StreamingDataset:
    ds = StreamingDataset(path, **kw)
    ds.world_size, ds.rank = world, rank
    ds.drop_last = kw.get("drop_last", world > 1)
    return ds


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    n=st.integers(1, 120),
    chunk=st.integers(1, 17),
    bs=st.integers(1, 9),
    world=st.integers(1, 4),
    workers=st.integers(1, 4),
    workers_after=st.integers(1, 4),
    drop_last=st.booleans(),
    shuffle=st.booleans(),
    stop=st.floats(0, 1),
)
def test_partition_and_resume(tmp_path_factory, n, chunk, bs, world, workers, workers_after, drop_last, shuffle, stop):
    d = write_dataset(str(tmp_path_factory.mktemp("h")), n, chunk_size=chunk)
    all_ids: list[int] = []
    counts = set()
    for rank in range(world):
        ds = as_rank(d, rank, world, shuffle=shuffle, drop_last=drop_last, seed=n)
        try:
            plan = ds.plan(1, bs)
        except DatasetError:
            # only when the configuration cannot give every rank a batch (documented in plan.py)
            assert n < world or (drop_last and n < world * bs)
            return
        full = round_robin(ds, 1, 0, workers, bs)
        assert [j for j, _ in full] == list(range(plan.num_batches))  # in order, none missing
        assert all(0 < len(b) <= bs for _, b in full)
        counts.add(len(full))
        k = int(stop * len(full))
        rest = round_robin(ds, 1, k, workers_after, bs)
        assert [b for _, b in full[:k]] + [b for _, b in rest] == [b for _, b in full]
        all_ids.extend(itertools.chain.from_iterable(b for _, b in full))
    if drop_last or bs > 1 or n % world == 0:
        assert len(counts) == 1  # every rank the same number of batches
    # else LitData's uneven split (batch_size=1, drop_last=False): the last rank has the extra batches
    assert len(all_ids) == len(set(all_ids))
    if not drop_last:
        assert sorted(all_ids) == list(range(n))
    else:
        assert len(all_ids) == (n // (world * bs)) * world * bs
