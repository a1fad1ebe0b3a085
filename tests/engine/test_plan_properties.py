"""Property tests of the epoch plan over random datasets, world sizes, batch sizes, workers and drop_last."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from streamscope._core.errors import PlanError
from streamscope.engine.plan import make_plan

# plans of every shape on purpose, uneven ones included: LitData's uneven-ranks UserWarning (engine/plan_layout.py,
# once per (samples, world size) and process, so under hypothesis it would fail one example and not its replay)
pytestmark = pytest.mark.filterwarnings("ignore:drop_last=False with batch_size=1:UserWarning")

SETTINGS = settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])

sizes_st = st.lists(st.integers(0, 40), min_size=1, max_size=16)


def _plans(sizes, ws, **kw):
    return [make_plan(sizes, world_size=ws, rank=r, **kw) for r in range(ws)]


def _samples(plan, batches=None):
    js = range(plan.num_batches) if batches is None else batches
    return [s for j in js for s in plan.batch(j)]


def _expected_error(n, ws, b, drop_last, regions=False):
    if n == 0:
        return None if regions else "no samples"  # an empty selection of regions is an empty plan
    if n < ws:
        return "cannot feed"
    if drop_last and n < ws * b:
        return "no batch"
    return None


def _litdata_uneven(n, ws, b, drop_last):
    """batch_size=1, drop_last=False, N not a multiple of world_size: LitData's unequal rank counts."""
    return not drop_last and b == 1 and n % ws != 0


@SETTINGS
@given(
    sizes=sizes_st,
    ws=st.integers(1, 8),
    b=st.integers(1, 64),
    drop_last=st.booleans(),
    shuffle=st.booleans(),
    window=st.sampled_from([0, 0, 1, 7, 50]),
    seed=st.integers(0, 2**40),
    epoch=st.integers(0, 5),
)
def test_partition_invariants(sizes, ws, b, drop_last, shuffle, window, seed, epoch):
    n = sum(sizes)
    kw = dict(batch_size=b, drop_last=drop_last, shuffle=shuffle, seed=seed, epoch=epoch, shuffle_buffer=window)
    err = _expected_error(n, ws, b, drop_last)
    if err is not None:
        with pytest.raises(PlanError, match=err):
            _plans(sizes, ws, **kw)
        return
    plans = _plans(sizes, ws, **kw)
    uneven = _litdata_uneven(n, ws, b, drop_last)
    if uneven:
        # LitData's split: ranks 0..ws-2 get floor(N / ws) samples, the last rank the rest.
        assert [p.num_samples for p in plans] == [n // ws] * (ws - 1) + [n - (ws - 1) * (n // ws)]
        assert [p.num_batches for p in plans] == [p.num_samples for p in plans]
    else:
        # Every rank yields the same number of batches; no batch is empty or larger than B.
        assert len({p.num_batches for p in plans}) == 1
    for p in plans:
        lens = [p.batch_len(j) for j in range(p.num_batches)]
        assert all(1 <= x <= b for x in lens)
        assert sum(lens) == p.num_samples
        if drop_last:
            assert all(x == b for x in lens)
        # Full batches come first; the sizes never increase along the epoch.
        assert lens == sorted(lens, reverse=True)
        # the per-batch fast path and the general position mapping agree
        c, i = p.sample_range(0, p.num_samples)
        assert list(zip(c.tolist(), i.tolist())) == _samples(p)
    # The ranks' samples, in rank order, are the global order (the ws=1 plan) cut into contiguous slices.
    glob = _samples(make_plan(sizes, world_size=1, rank=0, **{**kw, "batch_size": max(b, 2), "drop_last": False}))
    assert sorted(glob) == [(c, i) for c, s in enumerate(sizes) for i in range(s)]
    ranks = [_samples(p) for p in plans]
    assert max(map(len, ranks)) - min(map(len, ranks)) <= (ws - 1 if uneven else 1)
    joined = [s for r in ranks for s in r]
    if drop_last:
        assert len(joined) == (n // (ws * b)) * ws * b
        assert joined == glob[: len(joined)]
    else:
        assert joined == glob  # every sample exactly once


@SETTINGS
@given(
    sizes=sizes_st,
    ws=st.integers(1, 4),
    b=st.integers(2, 16),
    drop_last=st.booleans(),
    shuffle=st.booleans(),
    window=st.sampled_from([0, 5]),
    w_before=st.integers(1, 4),
    w_after=st.integers(1, 4),
    data=st.data(),
)
def test_resume_at_every_batch_with_any_workers(sizes, ws, b, drop_last, shuffle, window, w_before, w_after, data):
    n = sum(sizes)
    assume(_expected_error(n, ws, b, drop_last) is None)
    kw = dict(batch_size=b, drop_last=drop_last, shuffle=shuffle, seed=3, epoch=2, shuffle_buffer=window)
    rank = data.draw(st.integers(0, ws - 1))
    plan = make_plan(sizes, world_size=ws, rank=rank, **kw)
    again = make_plan(sizes, world_size=ws, rank=rank, **kw)  # a fresh process builds its own plan
    before = [plan.batch(j) for j in range(plan.num_batches)]
    after = [again.batch(j) for j in range(again.num_batches)]
    full = Counter(s for bt in before for s in bt)
    assert sum(full.values()) == plan.num_samples
    for j in range(plan.num_batches + 1):
        # The training loop saw batches 0..j-1 built by w_before workers; w_after workers resume at j.
        seen = [s for w in range(w_before) for jj in plan.batches_for_worker(w, w_before) if jj < j for s in before[jj]]
        per_worker = [list(again.batches_for_worker(w, w_after, start_batch=j)) for w in range(w_after)]
        assert sorted(jj for bl in per_worker for jj in bl) == list(range(j, plan.num_batches))
        rest = [s for bl in per_worker for jj in bl for s in after[jj]]
        assert Counter(seen) + Counter(rest) == full  # exactly the samples not yet seen
        assert not set(seen) & set(rest)
        for w in range(w_after):
            assert again.num_batches_for_worker(w, w_after, j) == len(per_worker[w])
            assert again.num_samples_for_worker(w, w_after, j) == sum(again.batch_len(x) for x in per_worker[w])


@SETTINGS
@given(
    sizes=sizes_st,
    ws=st.integers(1, 4),
    b=st.integers(2, 16),
    shuffle=st.booleans(),
    window=st.sampled_from([0, 0, 9]),
    nw=st.integers(1, 4),
    data=st.data(),
)
def test_chunk_order_for_worker_matches_batches(sizes, ws, b, shuffle, window, nw, data):
    n = sum(sizes)
    assume(_expected_error(n, ws, b, False) is None)
    rank = data.draw(st.integers(0, ws - 1))
    plan = make_plan(
        sizes,
        world_size=ws,
        rank=rank,
        batch_size=b,
        drop_last=False,
        shuffle=shuffle,
        seed=1,
        epoch=1,
        shuffle_buffer=window,
    )
    start = data.draw(st.integers(0, plan.num_batches))
    for w in range(nw):
        first_use: list[int] = []
        for j in plan.batches_for_worker(w, nw, start):
            for c, _ in plan.batch(j):
                if c not in first_use:
                    first_use.append(c)
        assert plan.chunk_order_for_worker(w, nw, start) == first_use
        uses: dict[int, list[int]] = {}
        for k, j in enumerate(plan.batches_for_worker(w, nw, start)):
            for c, _ in plan.batch(j):
                uses.setdefault(c, []).append(k)
        assert plan.chunk_schedule_for_worker(w, nw, start) == [(c, min(uses[c]), max(uses[c])) for c in first_use]


@SETTINGS
@given(sizes=st.lists(st.integers(1, 30), min_size=1, max_size=20), ws=st.integers(1, 8), shuffle=st.booleans())
def test_rank_locality(sizes, ws, shuffle):
    """Without a window, a rank reads a contiguous run of the chunk order: at most one chunk shared per boundary."""
    n = sum(sizes)
    assume(n >= ws)
    plans = _plans(sizes, ws, batch_size=4, drop_last=False, shuffle=shuffle, seed=5, epoch=1)
    per_rank = [set(p.chunk_order()) for p in plans]
    assert sum(len(s) for s in per_rank) <= len(sizes) + ws - 1
    for p in plans:
        # chunks other than the first and last of the rank are read entirely by this rank
        order = p.chunk_order()
        counts = Counter(c for c, _ in _samples(p))
        for c in order[1:-1]:
            assert counts[c] == sizes[c]


@SETTINGS
@given(
    sizes=st.lists(st.integers(0, 60), min_size=1, max_size=12),
    window=st.integers(1, 200),
    seed=st.integers(0, 1000),
)
def test_window_moves_each_sample_less_than_window(sizes, window, seed):
    n = sum(sizes)
    assume(n >= 1)
    kw = dict(world_size=1, rank=0, batch_size=max(2, n), drop_last=False, shuffle=True, seed=seed, epoch=1)
    plain = make_plan(sizes, **kw).batch(0) if n else []
    mixed = make_plan(sizes, shuffle_buffer=window, **kw).batch(0)
    assert sorted(mixed) == sorted(plain)
    where = {s: i for i, s in enumerate(plain)}
    assert all(abs(where[s] - i) <= window for i, s in enumerate(mixed))


def test_window_spans_segments_and_mixes_chunks():
    """A window shuffle over several lazy segments: exact once, bounded displacement, neighbours from many chunks."""
    sizes = [1000] * 150  # 150k samples: three segments of 65536
    kw = dict(world_size=1, rank=0, batch_size=1000, drop_last=False, shuffle=False, seed=9, epoch=0)
    plan = make_plan(sizes, shuffle_buffer=5000, **kw)
    got = np.concatenate([plan.batch_arrays(j)[0] * 1000 + plan.batch_arrays(j)[1] for j in range(plan.num_batches)])
    assert np.array_equal(np.sort(got), np.arange(150_000))
    assert np.abs(got - np.arange(150_000)).max() <= 5000
    chunks_per_batch = [len(set(plan.batch_arrays(j)[0].tolist())) for j in range(plan.num_batches)]
    assert min(chunks_per_batch) >= 3 and max(chunks_per_batch) <= 5000 // 1000 + 2


def test_epochs_and_seeds_change_the_order():
    kw = dict(world_size=2, rank=1, batch_size=8, drop_last=False, shuffle=True)
    base = _samples(make_plan([25] * 8, seed=1, epoch=1, **kw))
    assert base != _samples(make_plan([25] * 8, seed=1, epoch=2, **kw))
    assert base != _samples(make_plan([25] * 8, seed=2, epoch=1, **kw))
    assert base == _samples(make_plan([25] * 8, seed=1, epoch=1, **kw))


def test_upsampled_regions_repeat_chunks_with_fresh_item_orders():
    regions = [(0, 0, 50), (0, 0, 50)]
    plan = make_plan(
        [50], world_size=1, rank=0, batch_size=100, drop_last=False, shuffle=True, seed=1, epoch=1, regions=regions
    )
    items = [i for _, i in plan.batch(0)]
    assert Counter(items) == Counter({i: 2 for i in range(50)})
    assert items[:50] != items[50:]


@st.composite
def _regions(draw):
    sizes = draw(st.lists(st.integers(0, 30), min_size=1, max_size=8))
    regions = []
    for _ in range(draw(st.integers(0, 12))):
        c = draw(st.integers(0, len(sizes) - 1))
        a = draw(st.integers(0, sizes[c]))
        b = draw(st.integers(a, sizes[c]))
        regions.append((c, a, b))
    return sizes, regions


@SETTINGS
@given(
    sr=_regions(),
    ws=st.integers(1, 5),
    b=st.integers(2, 12),
    drop_last=st.booleans(),
    shuffle=st.booleans(),
    window=st.sampled_from([0, 4]),
)
def test_regions_partition_exactly(sr, ws, b, drop_last, shuffle, window):
    """Arbitrary (overlapping, repeated, empty) regions: each region item is yielded once per region."""
    sizes, regions = sr
    n = sum(e - s for _, s, e in regions)
    kw = dict(batch_size=b, drop_last=drop_last, shuffle=shuffle, seed=8, epoch=3, shuffle_buffer=window)
    err = _expected_error(n, ws, b, drop_last, regions=True)
    if err is not None:
        with pytest.raises(PlanError, match=err):
            _plans(sizes, ws, regions=regions, **kw)
        return
    plans = _plans(sizes, ws, regions=regions, **kw)
    got = Counter(s for p in plans for s in _samples(p))
    want = Counter((c, i) for c, s, e in regions for i in range(s, e))
    if drop_last:
        assert sum(got.values()) == (n // (ws * b)) * ws * b
        assert not got - want
    else:
        assert got == want


@SETTINGS
@given(
    sizes=sizes_st,
    ws=st.integers(1, 8),
    b=st.integers(1, 20),
    shuffle=st.booleans(),
)
def test_unequal_batches_opt_out(sizes, ws, b, shuffle):
    """equal_batches=False: same rank slices, full batches then one partial; ranks differ by <= 1 batch."""
    n = sum(sizes)
    assume(n >= ws)
    kw = dict(batch_size=b, drop_last=False, shuffle=shuffle, seed=2, epoch=1)
    plans = _plans(sizes, ws, equal_batches=False, **kw)
    assert max(p.num_batches for p in plans) - min(p.num_batches for p in plans) <= 1
    for p in plans:
        lens = [p.batch_len(j) for j in range(p.num_batches)]
        assert all(x == b for x in lens[:-1]) and 1 <= lens[-1] <= b
    glob = _samples(make_plan(sizes, world_size=1, rank=0, **{**kw, "batch_size": max(b, 2)}))
    assert [s for p in plans for s in _samples(p)] == glob
    assert plans[0].fingerprint != make_plan(sizes, world_size=ws, rank=0, **{**kw, "batch_size": b + 1}).fingerprint
