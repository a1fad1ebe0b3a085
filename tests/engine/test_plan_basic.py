"""Worked examples of the epoch plan: small cases whose answers are checked by hand."""

from __future__ import annotations

import pickle

import pytest

from streamscope._core.errors import DatasetError, PlanError, StateDictError
from streamscope.engine.resume import (
    ResumeState,
    batches_from_samples,
    check_state,
    resume_point,
)
from tests.engine._data import plan_samples, small_plan


def _plan(sizes, **kw):
    return small_plan(sizes, **{"batch_size": 4, **kw})


_all = plan_samples


def test_no_shuffle_single_rank_is_index_order():
    plan = _plan([3, 2, 4], batch_size=4)
    assert plan.num_batches == 3
    assert plan.batch(0) == [(0, 0), (0, 1), (0, 2), (1, 0)]
    assert plan.batch(1) == [(1, 1), (2, 0), (2, 1), (2, 2)]
    assert plan.batch(2) == [(2, 3)]
    assert plan.num_samples == 9


def test_two_ranks_get_contiguous_slices_and_equal_batches():
    # 9 samples, 2 ranks: rank 0 gets order positions 0..3, rank 1 gets 4..8; K = ceil(5/4) = 2 on both.
    p0 = _plan([3, 2, 4], world_size=2, rank=0)
    p1 = _plan([3, 2, 4], world_size=2, rank=1)
    assert p0.num_batches == p1.num_batches == 2
    assert [p0.batch_len(j) for j in range(2)] == [2, 2]  # 4 samples: a full batch would leave 0 for the last
    assert [p1.batch_len(j) for j in range(2)] == [4, 1]
    assert _all(p0) == [(0, 0), (0, 1), (0, 2), (1, 0)]
    assert _all(p1) == [(1, 1), (2, 0), (2, 1), (2, 2), (2, 3)]


def test_batch_sizes_spread_without_empty_batches():
    # ceil(25 / 3) = 9 samples on the largest rank, B=4 -> K=3; 8 samples: one full batch, then 2 + 2.
    plans = [_plan([25], world_size=3, rank=r) for r in range(3)]
    assert [p.num_samples for p in plans] == [8, 8, 9]
    assert {p.num_batches for p in plans} == {3}
    assert [plans[0].batch_len(j) for j in range(3)] == [4, 2, 2]
    assert [plans[2].batch_len(j) for j in range(3)] == [4, 4, 1]


def test_drop_last_keeps_prefix_of_full_batches():
    plans = [_plan([10, 7], world_size=2, rank=r, drop_last=True, batch_size=4) for r in range(2)]
    # 17 samples -> floor(17 / 8) * 8 = 16 used, positions 0..7 and 8..15.
    assert [p.num_batches for p in plans] == [2, 2]
    assert _all(plans[0]) == [(0, i) for i in range(8)]
    assert _all(plans[1]) == [(0, 8), (0, 9)] + [(1, i) for i in range(6)]
    assert plans[0].used_samples == 16


def test_errors_name_the_numbers():
    with pytest.raises(PlanError, match="no chunks"):
        _plan([])
    with pytest.raises(PlanError, match="chunks are all empty"):
        _plan([0, 0])
    with pytest.raises(PlanError, match="regions"):
        _plan([3], regions=[(0, 0)])
    with pytest.raises(PlanError, match="3 samples cannot feed world_size=4"):
        _plan([1, 2], world_size=4, rank=0)
    with pytest.raises(PlanError, match="at least 16 samples"):
        _plan([5, 5], world_size=2, rank=1, batch_size=8, drop_last=True)
    with pytest.raises(PlanError, match="rank must be in"):
        _plan([5], world_size=2, rank=2)
    with pytest.raises(PlanError, match="negative size"):
        _plan([5, -1])
    with pytest.raises(PlanError, match="region 1"):
        _plan([5, 3], regions=[(0, 0, 5), (1, 2, 4)])
    assert issubclass(PlanError, DatasetError) and issubclass(PlanError, ValueError)


def test_regions_replace_whole_chunks():
    plan = _plan([5, 3], regions=[(1, 1, 3), (0, 0, 2), (1, 0, 3)], batch_size=10)
    assert plan.batch(0) == [(1, 1), (1, 2), (0, 0), (0, 1), (1, 0), (1, 1), (1, 2)]


def test_shuffle_deterministic_and_epoch_dependent():
    a = _plan([50] * 20, shuffle=True, epoch=3, batch_size=7)
    b = _plan([50] * 20, shuffle=True, epoch=3, batch_size=7)
    c = _plan([50] * 20, shuffle=True, epoch=4, batch_size=7)
    assert _all(a) == _all(b)
    assert _all(a) != _all(c)
    assert sorted(_all(a)) == sorted(_all(c)) == [(ch, i) for ch in range(20) for i in range(50)]
    assert a.fingerprint == c.fingerprint  # the epoch is state, not configuration


def test_workers_round_robin_and_chunk_order():
    plan = _plan([4, 4, 4], batch_size=2)
    assert list(plan.batches_for_worker(0, 2)) == [0, 2, 4]
    assert list(plan.batches_for_worker(1, 2)) == [1, 3, 5]
    # resuming at batch 3: worker 0 builds the first batch the loader receives
    assert list(plan.batches_for_worker(0, 2, start_batch=3)) == [3, 5]
    assert list(plan.batches_for_worker(1, 2, start_batch=3)) == [4]
    assert list(plan.batches_for_worker(0, 0, start_batch=4)) == [4, 5]  # num_workers=0: the main process
    assert plan.chunk_order_for_worker(0, 2) == [0, 1, 2]
    assert plan.chunk_order_for_worker(1, 3) == [0, 2]  # batches 1 (chunk 0) and 4 (chunk 2)
    # batch (k-th of the worker) of first and last use
    assert plan.chunk_schedule_for_worker(0, 2) == [(0, 0, 0), (1, 1, 1), (2, 2, 2)]
    assert plan.chunk_schedule_for_worker(0, 1, start_batch=1) == [(0, 0, 0), (1, 1, 2), (2, 3, 4)]
    with pytest.raises(PlanError, match="worker_id 2"):
        plan.batches_for_worker(2, 2)


def test_resume_helpers():
    assert resume_point(2, 5, 10) == (2, 5)
    assert resume_point(2, 10, 10) == (3, 0)
    with pytest.raises(StateDictError):
        resume_point(2, 11, 10)
    assert batches_from_samples(12, 4) == 3
    assert batches_from_samples(13, 4) == 4


def test_state_roundtrip_and_mismatch_names_setting():
    plan = _plan([10, 10], shuffle=True)
    st = ResumeState.from_dict(plan.state(3))
    assert st.start(_plan([10, 10], shuffle=True)) == (1, 3)
    with pytest.raises(StateDictError, match=r"seed: saved 42, now 7"):
        check_state(plan.state(3), _plan([10, 10], shuffle=True, seed=7))
    with pytest.raises(StateDictError, match=r"batch_size.*world_size"):
        check_state(plan.state(3), _plan([10, 10], shuffle=True, batch_size=2, world_size=2))
    with pytest.raises(StateDictError, match=r"dataset \(chunk sizes\)"):
        check_state(plan.state(3), _plan([10, 11], shuffle=True))
    with pytest.raises(StateDictError, match="shuffle"):
        check_state(plan.state(3), _plan([10, 10], shuffle=False))
    with pytest.raises(StateDictError, match="missing or bad key"):
        check_state({"epoch": 1}, plan)


def test_plan_pickles():
    plan = _plan([30, 30], shuffle=True, shuffle_buffer=10, batch_size=5)
    _ = plan.batch(3)
    clone = pickle.loads(pickle.dumps(plan))
    assert _all(clone) == _all(plan)


def test_mixing_reports_chunks_per_batch():
    plain = _plan([100] * 20, shuffle=True, batch_size=16)
    mixed = _plan([100] * 20, shuffle=True, batch_size=16, shuffle_buffer=400)
    a, b = plain.mixing(), mixed.mixing()
    assert a["chunks_per_batch_min"] >= 1 and a["chunks_per_batch_mean"] < 1.5  # within-chunk shuffle only
    assert b["chunks_per_batch_mean"] > 2.5  # the window draws each batch from several chunks
    assert b["chunks_per_batch_max"] <= 400 // 100 + 2
    assert a["batches_sampled"] == b["batches_sampled"] == 64


def test_extreme_seed_and_epoch():
    big = 2**63 - 1
    a = _plan([7, 9], shuffle=True, seed=big, epoch=big, shuffle_buffer=5)
    assert sorted(_all(a)) == [(0, i) for i in range(7)] + [(1, i) for i in range(9)]
    with pytest.raises(PlanError, match="seed"):
        _plan([3], seed=-1)
    with pytest.raises(PlanError, match="seed"):
        _plan([3], seed=2**63)


def test_split_batches_and_sample_range():
    from streamscope.engine.plan_layout import split_batches

    assert split_batches(9, 3, 4).tolist() == [0, 4, 8, 9]
    assert split_batches(7, 3, 4).tolist() == [0, 4, 6, 7]
    assert split_batches(8, 3, 4).tolist() == [0, 4, 6, 8]
    with pytest.raises(PlanError):
        split_batches(2, 3, 4)
    plan = _plan([5, 6], world_size=2, rank=1, shuffle=True, shuffle_buffer=3, batch_size=2)
    c, i = plan.sample_range(0, plan.num_samples)
    assert list(zip(c.tolist(), i.tolist())) == _all(plan)
    with pytest.raises(IndexError):
        plan.sample_range(0, plan.num_samples + 1)


def test_huge_chunk_uses_lazy_permutation():
    from streamscope.engine.shuffle import MATERIALISE_MAX

    size = MATERIALISE_MAX + 5
    plan = _plan([size, 3], shuffle=True, batch_size=1000)
    first = [s for j in range(3) for s in plan.batch(j)]
    c, i = plan.sample_range(0, 3000)
    assert first == list(zip(c.tolist(), i.tolist()))
    items = [x for ch, x in first if ch == 0]
    assert len(set(items)) == len(items) and all(0 <= x < size for x in items)
