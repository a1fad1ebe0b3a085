"""Hypothesis: partitioning over ranks x workers and resume after any batch with any worker count.

Workers are simulated in-process by interleaving ``iter_batches`` generators round robin, which is what
PyTorch's DataLoader does with worker processes (the real-process path is covered in test_dataloader.py, and with
real ranks over S3 in test_ddp_s3.py). The second half checks the plan alone at scale: up to 64 ranks x 8 workers,
every epoch and every elastic resume (another world size, worker count or batch size after any batch).
"""

from __future__ import annotations

import itertools
import json
import warnings
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streamscope._core.errors import DatasetError, PlanError
from streamscope.engine.dataset import StreamingDataset
from streamscope.engine.plan import EpochPlan, make_plan
from streamscope.engine.resume import resume_plan
from tests.engine._data import write_dataset


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
    with warnings.catch_warnings():
        # streamscope warns of an uneven split (drop_last=False, batch_size=1), once per process and split:
        # checked by test_plan_litdata_gaps.py::test_uneven_ranks_warn_once, not the subject here
        warnings.filterwarnings("ignore", "drop_last=False with batch_size=1", UserWarning)
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


# --- the partition math at scale: up to 64 ranks x 8 workers, plan level (no files) ------------------------------
#
# Every (rank, worker) of a job is simulated: worker w of W builds batches_for_worker(w, W, start), the rank's
# DataLoader collects them round robin from worker 0 (torch's in_order collection), and the training loop of every
# rank receives its batches in order. Samples are named by their global id (chunk offset + item).

CI = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
BIG = settings(max_examples=2000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
PROFILES = [pytest.param(CI, id="ci"), pytest.param(BIG, id="big", marks=pytest.mark.heavy)]

# uneven chunk sizes (empty chunks too): tiny datasets with fewer samples than ranks x workers, and larger ones
sizes_st = st.one_of(
    st.lists(st.integers(0, 6), min_size=1, max_size=10),
    st.lists(st.integers(0, 97), min_size=1, max_size=40),
)
ws_st = st.one_of(st.integers(1, 8), st.integers(9, 64))
nw_st = st.integers(0, 8)  # 0: iteration in the main process, counts as one worker


def _gids(plan: EpochPlan, offsets: np.ndarray, j: int) -> np.ndarray:
    c, i = plan.batch_arrays(j)
    return offsets[c] + i


def _deliver(plan: EpochPlan, offsets: np.ndarray, nw: int, start: int) -> list[np.ndarray]:
    """The batches the training loop of ``plan``'s rank receives from ``nw`` workers, from batch ``start`` on."""
    per_worker = [list(plan.batches_for_worker(w, nw, start)) for w in range(max(1, nw))]
    for w, ids in enumerate(per_worker):
        assert plan.num_batches_for_worker(w, nw, start) == len(ids)
        assert plan.num_samples_for_worker(w, nw, start) == sum(plan.batch_len(j) for j in ids)
    received = [j for turn in itertools.zip_longest(*per_worker) for j in turn if j is not None]
    # round robin over the workers is the plan's batch order: nothing missing, nothing twice
    assert received == list(range(start, plan.num_batches))
    return [_gids(plan, offsets, j) for j in received]


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def _expected_plan_error(n: int, ws: int, b: int, drop_last: bool) -> str | None:
    """The documented refusals of make_plan (plan.py, "Ranks")."""
    if n == 0:
        return "no samples"
    if n < ws:
        return "cannot feed"
    if drop_last and n < ws * b:
        return "no batch"
    return None


def _global_order(sizes: list[int], offsets: np.ndarray, **kw: Any) -> np.ndarray:
    """The epoch's order of every sample (one rank, nothing dropped) as global ids."""
    one = make_plan(sizes, world_size=1, rank=0, batch_size=1, **{**kw, "drop_last": False})
    c, i = one.sample_range(0, one.num_samples)
    return offsets[c] + i


def _check_epochs(sizes, ws, nw, b, drop_last, shuffle, window, seed, epochs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # LitData's uneven split warns; it is checked here
        _check_epochs_quiet(sizes, ws, nw, b, drop_last, shuffle, window, seed, epochs)


def _check_epochs_quiet(sizes, ws, nw, b, drop_last, shuffle, window, seed, epochs):
    n = sum(sizes)
    offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
    for epoch in epochs:
        kw = dict(drop_last=drop_last, shuffle=shuffle, seed=seed, epoch=epoch, shuffle_buffer=window)
        err = _expected_plan_error(n, ws, b, drop_last)
        if err is not None:
            with pytest.raises(PlanError, match=err):
                [make_plan(sizes, world_size=ws, rank=r, batch_size=b, **kw) for r in range(ws)]
            return
        plans = [make_plan(sizes, world_size=ws, rank=r, batch_size=b, **kw) for r in range(ws)]
        got = [_deliver(p, offsets, nw, 0) for p in plans]
        counts = [len(g) for g in got]
        lens = [[len(x) for x in g] for g in got]
        if drop_last:
            used = (n // (ws * b)) * ws * b  # the first `used` samples of the global order, the rest skipped
            assert counts == [used // (ws * b)] * ws
            assert all(x == b for g in lens for x in g)
        elif b == 1 and n % ws:
            used = n  # LitData's split: ranks 0..ws-2 get floor(n / ws), the last rank the rest
            assert counts == [n // ws] * (ws - 1) + [n - (ws - 1) * (n // ws)]
        else:
            used = n  # every rank the same number of non-empty batches: ceil(ceil(n / ws) / b)
            assert counts == [_ceil(_ceil(n, ws), b)] * ws
            assert all(1 <= x <= b for g in lens for x in g)
        delivered = np.concatenate([x for g in got for x in g])
        # rank by rank, batch by batch: the global order (every sample once), or its first `used` samples
        assert np.array_equal(delivered, _global_order(sizes, offsets, **kw)[:used])
        if not drop_last:
            assert np.array_equal(np.sort(delivered), np.arange(n))


@pytest.mark.parametrize("profile", PROFILES)
def test_epoch_partition_at_scale(profile: settings) -> None:
    """Every sample once per epoch over all (rank, worker) (or drop_last's documented prefix), equal batches."""
    profile(
        given(
            sizes=sizes_st,
            ws=ws_st,
            nw=nw_st,
            b=st.integers(1, 16),
            drop_last=st.booleans(),
            shuffle=st.booleans(),
            window=st.sampled_from([0, 0, 13]),
            seed=st.integers(0, 2**32),
            epochs=st.lists(st.integers(0, 50), min_size=1, max_size=3, unique=True),
        )(_check_epochs)
    )()


def _check_resume(sizes, stages, drop_last, shuffle, window, seed, epoch, data):
    """Run ``stages[0]`` = (world_size, workers, batch_size), save after any batch, resume in each later stage."""
    n = sum(sizes)
    offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
    order = dict(drop_last=drop_last, shuffle=shuffle, seed=seed, shuffle_buffer=window)
    ws, nw, b = stages[0]
    if _expected_plan_error(n, ws, b, drop_last) is not None:
        return  # refused at the start (checked by test_epoch_partition_at_scale)
    plans = [make_plan(sizes, world_size=ws, rank=r, batch_size=b, epoch=epoch, **order) for r in range(ws)]
    glob = _global_order(sizes, offsets, epoch=epoch, **order)
    first_used = (n // (ws * b)) * ws * b if drop_last else n
    delivered: list[np.ndarray] = []
    start, complete = 0, False
    for ws2, nw2, b2 in stages[1:]:
        got = [_deliver(p, offsets, nw, start) for p in plans]
        counts = [p.num_batches for p in plans]
        # the ranks step together; in LitData's uneven split (batch_size=1) rank 0 has the fewest batches and a
        # checkpoint at its end would already name the next epoch, so the save point stays inside the epoch there
        last = min(counts) - (1 if len(set(counts)) > 1 else 0)
        j = data.draw(st.integers(start, last), label="batches consumed at the save")
        states = {json.dumps(p.state(j), sort_keys=True) for p in plans}
        assert len(states) == 1  # one checkpoint serves every rank
        state = plans[0].state(j)
        consumed = [x for g in got for x in g[: j - start]]
        delivered += consumed
        # what no rank consumed, in the order of the plans (rank by rank): what the next stage must cover
        left = [x for g in got for x in g[j - start :]]
        rest = np.concatenate(left) if left else np.zeros(0, dtype=np.int64)
        if j == plans[0].num_batches:  # the epoch was complete: the next one starts from its beginning
            if _expected_plan_error(n, ws2, b2, drop_last) is not None:
                with pytest.raises(PlanError):
                    [resume_plan(state, sizes, world_size=ws2, rank=r, batch_size=b2, **order) for r in range(ws2)]
            else:
                nxt = [resume_plan(state, sizes, world_size=ws2, rank=r, batch_size=b2, **order) for r in range(ws2)]
                assert all(s == 0 and p.epoch == epoch + 1 for p, s in nxt)
            plans, complete = [], True
            break
        want = _expected_plan_error(len(rest), ws2, b2, drop_last)
        if want is not None:  # the rest cannot feed the new ranks: a clear error, not a hang or a wrong epoch
            with pytest.raises(PlanError, match="cannot feed|no batch|nothing"):
                [resume_plan(state, sizes, world_size=ws2, rank=r, batch_size=b2, **order) for r in range(ws2)]
            plans = []
            break
        resumed = [resume_plan(state, sizes, world_size=ws2, rank=r, batch_size=b2, **order) for r in range(ws2)]
        plans = [p for p, _ in resumed]
        starts = {s for _, s in resumed}
        assert starts == ({j} if (ws2, b2) == (ws, b) else {0})
        start = starts.pop()
        # the resumed ranks cut exactly the rest (or drop_last's prefix of it) by the rules of a fresh epoch
        after = [_gids(p, offsets, j2) for p in plans for j2 in range(start, p.num_batches)]
        joined = np.concatenate(after) if after else np.zeros(0, dtype=np.int64)
        keep = (len(rest) // (ws2 * b2)) * ws2 * b2 if drop_last else len(rest)
        if (ws2, b2) == (ws, b):
            keep = len(rest)  # the same plan continues: nothing more is dropped
        assert np.array_equal(joined, rest[:keep])
        if drop_last or b2 > 1 or len(rest) % ws2 == 0:
            assert len({p.num_batches for p in plans}) == 1
        ws, nw, b = ws2, nw2, b2
    if plans:
        delivered += [x for p in plans for x in _deliver(p, offsets, nw, start)]
        complete = True
    union = np.concatenate(delivered) if delivered else np.zeros(0, dtype=np.int64)
    assert len(np.unique(union)) == len(union)  # nothing twice, across every save and load
    assert np.isin(union, glob[:first_used]).all()  # nothing outside the epoch (or drop_last's prefix)
    if complete and not drop_last:
        assert np.array_equal(np.sort(union), np.arange(n))  # every sample of the epoch exactly once


stage_st = st.tuples(ws_st, nw_st, st.integers(1, 16))


@pytest.mark.parametrize("profile", PROFILES)
def test_elastic_resume_at_scale(profile: settings) -> None:
    """Save after any batch; load with another (ranks, workers[, batch size]): the epoch completes exactly."""

    def check(sizes, first, changes, drop_last, shuffle, window, seed, epoch, data):
        # half the changes keep the batch size: the usual elastic resume changes only ranks and workers
        stages = [first] + [(w, k, first[2] if keep_b else b) for w, k, b, keep_b in changes]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # LitData's uneven split warns; it is checked above
            _check_resume(sizes, stages, drop_last, shuffle, window, seed, epoch, data)

    profile(
        given(
            sizes=sizes_st,
            first=stage_st,
            changes=st.lists(st.tuples(ws_st, nw_st, st.integers(1, 16), st.booleans()), min_size=1, max_size=3),
            drop_last=st.booleans(),
            shuffle=st.booleans(),
            window=st.sampled_from([0, 0, 13]),
            seed=st.integers(0, 2**32),
            epoch=st.integers(0, 50),
            data=st.data(),
        )(check)
    )()


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    n=st.integers(1, 150),
    chunk=st.integers(1, 17),
    bs=st.integers(1, 9),
    world=st.integers(1, 6),
    world_after=st.integers(1, 6),
    workers=st.integers(1, 4),
    workers_after=st.integers(1, 4),
    drop_last=st.booleans(),
    shuffle=st.booleans(),
    stop=st.floats(0, 1),
)
def test_elastic_resume_through_the_dataset(
    tmp_path_factory, n, chunk, bs, world, world_after, workers, workers_after, drop_last, shuffle, stop
):
    """A dataset state saved by every rank of one world size resumes in ranks of another: the rest exactly."""
    d = write_dataset(str(tmp_path_factory.mktemp("e")), n, chunk_size=chunk)
    kw = dict(shuffle=shuffle, drop_last=drop_last, seed=7)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # LitData's uneven split (batch_size=1) warns
        try:
            before = [as_rank(d, r, world, **kw) for r in range(world)]
            plans = [ds.plan(1, bs) for ds in before]
        except DatasetError:
            return  # a configuration that cannot give every rank a batch (test_partition_and_resume)
        k = int(stop * (min(p.num_batches for p in plans) - 1))  # inside the epoch on every rank
        seen = [i for ds in before for _, b in round_robin(ds, 1, 0, workers, bs)[:k] for i in b]
        states = [ds.state_dict(k * bs, workers, bs, epoch=1, batches_consumed=k) for ds in before]
        assert len({json.dumps(s["plan_state"], sort_keys=True) for s in states}) == 1
        rest_left = sum(p.num_samples for p in plans) - len(seen)
        after = [as_rank(d, r, world_after, **kw) for r in range(world_after)]
        if rest_left < world_after or (drop_last and rest_left < world_after * bs):
            with pytest.raises(DatasetError, match="cannot feed|no batch"):
                after[0].resume_position(states[0], bs)
            return
        rest = []
        for ds in after:
            epoch, start = ds.resume_position(states[0], bs)
            assert epoch == 1 and start == (k if world_after == world else 0)
            rest += [i for _, b in round_robin(ds, 1, start, workers_after, bs) for i in b]
    got = seen + rest
    assert len(got) == len(set(got))  # nothing twice
    if not drop_last:
        assert sorted(got) == list(range(n))  # the epoch exactly
    else:
        assert len(rest) == (rest_left // (world_after * bs)) * world_after * bs
