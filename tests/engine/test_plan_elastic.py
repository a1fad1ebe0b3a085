"""Elastic resume: continue an epoch with another world size or batch size, every sample still exactly once."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streamscope._core.errors import PlanError, StateDictError
from streamscope.engine.plan import make_plan
from streamscope.engine.resume import resume_plan

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _run(plans, upto=None):
    """Samples of every rank's batches before ``upto`` (all when None)."""
    out = []
    for p in plans:
        for j in range(p.num_batches if upto is None else upto):
            out += p.batch(j)
    return out


@SETTINGS
@given(
    sizes=st.lists(st.integers(0, 30), min_size=1, max_size=10),
    ws=st.lists(st.integers(1, 5), min_size=2, max_size=3),
    bs=st.lists(st.integers(2, 9), min_size=3, max_size=3),
    drop_last=st.booleans(),
    shuffle=st.booleans(),
    window=st.sampled_from([0, 6]),
    data=st.data(),
)
def test_resume_with_other_world_sizes(sizes, ws, bs, drop_last, shuffle, window, data):
    order = dict(drop_last=drop_last, shuffle=shuffle, seed=4, shuffle_buffer=window)
    try:
        whole = make_plan(sizes, world_size=1, rank=0, batch_size=2, epoch=3, **{**order, "drop_last": False})
        plans = [make_plan(sizes, world_size=ws[0], rank=r, batch_size=bs[0], epoch=3, **order) for r in range(ws[0])]
    except PlanError:
        return
    full = Counter(_run([whole]))
    seen: list = []
    start = 0
    for w, b in zip(ws[1:], bs[1:]):
        j = data.draw(st.integers(start, plans[0].num_batches))
        seen += [s for p in plans for jj in range(start, j) for s in p.batch(jj)]
        state = plans[0].state(j)  # rank 0's checkpoint stands for all ranks (they step together)
        try:
            resumed = [resume_plan(state, sizes, world_size=w, rank=r, batch_size=b, **order) for r in range(w)]
        except PlanError:
            return  # the rest of the epoch cannot feed w ranks: refused with a clear error
        if j == plans[0].num_batches:  # the epoch was complete: next epoch from its start
            assert all(start == 0 and p.epoch == 4 for p, start in resumed)
            plans = None
            break
        plans = [p for p, _ in resumed]
        starts = {st_ for _, st_ in resumed}
        assert len(starts) == 1 and len({p.num_batches for p in plans}) == 1  # the ranks step together
        start = starts.pop()
    if plans is not None:
        seen += [s for p in plans for jj in range(start, p.num_batches) for s in p.batch(jj)]
    total = Counter(seen)
    assert max(total.values(), default=1) == 1  # nothing twice
    assert not total - full  # nothing outside the epoch
    if not drop_last:
        assert total == full  # every sample of the epoch exactly once


def test_elastic_example_and_errors():
    sizes = [10, 10, 10]
    kw = dict(drop_last=False, shuffle=True, seed=1)
    old = [make_plan(sizes, world_size=2, rank=r, batch_size=4, epoch=1, **kw) for r in range(2)]
    seen = _run(old, 2)  # both ranks consumed 2 batches of 4
    new = [resume_plan(old[0].state(2), sizes, world_size=3, rank=r, batch_size=2, **kw) for r in range(3)]
    assert {start for _, start in new} == {0}
    rest = _run([p for p, _ in new])
    assert len(seen) == 16 and len(rest) == 14
    assert sorted(seen + rest) == sorted((c, i) for c in range(3) for i in range(10))
    assert new[0][0].describe()["resumed_from"] == [[2, 4, 2]]
    # a checkpoint of the resumed run resumes again (the history travels in the state)
    again, start = resume_plan(new[1][0].state(1), sizes, world_size=3, rank=1, batch_size=2, **kw)
    assert start == 1 and again.batch(1) == new[1][0].batch(1)
    with pytest.raises(StateDictError, match="seed: saved 1, now 2"):
        resume_plan(old[0].state(2), sizes, world_size=3, rank=0, batch_size=2, **{**kw, "seed": 2})
    with pytest.raises(PlanError, match="cannot feed world_size=20"):
        resume_plan(old[0].state(3), sizes, world_size=20, rank=0, batch_size=2, **kw)


@pytest.mark.parametrize("window", [0, 5])
def test_resumed_plan_worker_schedules(window):
    sizes = [7, 9, 4, 12]
    kw = dict(drop_last=False, shuffle=True, seed=2, shuffle_buffer=window)
    old = make_plan(sizes, world_size=3, rank=0, batch_size=3, epoch=1, **kw)
    for r in range(2):
        plan, _ = resume_plan(old.state(1), sizes, world_size=2, rank=r, batch_size=4, **kw)
        for w in range(2):
            first_use: list[int] = []
            for j in plan.batches_for_worker(w, 2):
                for c, _ in plan.batch(j):
                    if c not in first_use:
                        first_use.append(c)
            assert plan.chunk_order_for_worker(w, 2) == first_use
        c, i = plan.sample_range(0, plan.num_samples)
        assert list(zip(c.tolist(), i.tolist())) == [s for j in range(plan.num_batches) for s in plan.batch(j)]
