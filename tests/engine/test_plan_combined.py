"""The combined (multi-dataset) epoch plan: partition, equal batches, per-stream purity, weights, resume."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streamscope._core.errors import PlanError, StateDictError
from streamscope.engine.combined_plan import make_combined_plan, rank_counts
from streamscope.engine.resume import ResumeState

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _plans(totals, ws, **kw):
    return [make_combined_plan(totals, world_size=ws, rank=r, **kw) for r in range(ws)]


@SETTINGS
@given(
    totals=st.lists(st.integers(0, 60), min_size=1, max_size=4),
    ws=st.integers(1, 4),
    b=st.integers(1, 9),
    method=st.sampled_from(["stratified", "per_stream"]),
    over_all=st.booleans(),
    drop_last=st.booleans(),
    seed=st.integers(0, 2**32),
)
def test_combined_invariants(totals, ws, b, method, over_all, drop_last, seed):
    kw = dict(batch_size=b, seed=seed, epoch=2, batching_method=method, iterate_over_all=over_all, drop_last=drop_last)
    try:
        plans = _plans(totals, ws, **kw)
    except PlanError as exc:
        # only when some rank cannot have a batch
        assert (
            "no batch" in str(exc)
            or "no samples" in str(exc)
            or "cannot fill" in str(exc)
            or "sum to zero" in str(exc)
            or "samples for" in str(exc)
        )
        return
    assert len({p.num_batches for p in plans}) == 1  # every rank steps together
    for r, p in enumerate(plans):
        lens = [p.batch_len(j) for j in range(p.num_batches)]
        assert all(1 <= x <= b for x in lens)
        if drop_last:
            assert all(x == b for x in lens)
        seen: dict[int, list[int]] = {}
        for j in range(p.num_batches):
            d, k = p.batch_arrays(j)
            if method == "per_stream":
                assert len(set(d.tolist())) == 1  # a batch comes from one dataset
            for dd, kk in zip(d.tolist(), k.tolist()):
                seen.setdefault(dd, []).append(kk)
        for dd, ks in seen.items():
            # each dataset's samples are consumed in its own order, from its start, without gaps or repeats
            assert ks == list(range(len(ks)))
            assert len(ks) <= rank_counts(totals[dd], ws)[r]
            if over_all and not drop_last:
                assert len(ks) == rank_counts(totals[dd], ws)[r]
        if over_all and not drop_last:
            assert set(seen) == {d for d, t in enumerate(totals) if rank_counts(t, ws)[r] > 0}
        for j in range(p.num_batches + 1):
            used = Counter(dd for jj in range(j) for dd, _ in p.batch(jj))
            assert p.consumed(j) == [used.get(d, 0) for d in range(len(totals))]


def test_weights_shape_the_mix_and_renormalise():
    p = make_combined_plan([4000, 4000], world_size=1, rank=0, batch_size=100, seed=3, epoch=1, weights=[0.8, 0.2])
    first = Counter(d for j in range(20) for d, _ in p.batch(j))  # first 2000 picks: both datasets live
    assert 0.75 < first[0] / 2000 < 0.85
    # once dataset 0 is exhausted, only dataset 1 remains: the tail is all 1
    last = Counter(d for d, _ in p.batch(p.num_batches - 1))
    assert set(last) == {1}
    assert p.num_samples == 8000


def test_default_weights_follow_sizes_and_stop_at_first():
    p = make_combined_plan([900, 100], world_size=1, rank=0, batch_size=10, seed=5, epoch=1, iterate_over_all=False)
    c = Counter(d for j in range(p.num_batches) for d, _ in p.batch(j))
    assert c[1] <= 100 and c[0] > 600  # stops when the first dataset runs out, near the end of both


def test_per_stream_alternates_between_datasets():
    p = make_combined_plan([40, 40], world_size=1, rank=0, batch_size=4, seed=1, epoch=1, batching_method="per_stream")
    ds = [p.batch(j)[0][0] for j in range(p.num_batches)]
    assert all(a != b for a, b in zip(ds, ds[1:]))  # "a different dataset" while both remain


def test_ranks_and_epochs_draw_different_sequences():
    a = make_combined_plan([50, 50], world_size=2, rank=0, batch_size=5, seed=1, epoch=1)
    b = make_combined_plan([50, 50], world_size=2, rank=1, batch_size=5, seed=1, epoch=1)
    c = make_combined_plan([50, 50], world_size=2, rank=0, batch_size=5, seed=1, epoch=2)
    seq = lambda p: [d for j in range(p.num_batches) for d, _ in p.batch(j)]  # noqa: E731
    assert seq(a) != seq(b) and seq(a) != seq(c)
    assert seq(a) == seq(make_combined_plan([50, 50], world_size=2, rank=0, batch_size=5, seed=1, epoch=1))


def test_resume_state_and_errors():
    kw = dict(world_size=1, rank=0, batch_size=4, seed=1, epoch=1)
    p = make_combined_plan([10, 10], **kw)
    st_ = ResumeState.from_dict(p.state(3))
    assert st_.batches_consumed == 3 and st_.fingerprint == make_combined_plan([10, 10], **kw).fingerprint
    assert st_.fingerprint != make_combined_plan([10, 11], **kw).fingerprint
    assert st_.fingerprint != make_combined_plan([10, 10], **{**kw, "seed": 2}).fingerprint
    with pytest.raises(StateDictError):
        p.state(p.num_batches + 1)
    with pytest.raises(PlanError, match="batching_method"):
        make_combined_plan([10], batching_method="zigzag", **kw)
    with pytest.raises(PlanError, match="2 weights for 1"):
        make_combined_plan([10], weights=[1, 2], **kw)
    with pytest.raises(PlanError, match="at least one"):
        make_combined_plan([], **kw)
    assert list(p.batches_for_worker(1, 2, start_batch=1)) == list(range(2, p.num_batches, 2))
    assert np.array_equal(p.batch_arrays(0)[0], np.array([d for d, _ in p.batch(0)]))
