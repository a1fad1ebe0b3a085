"""LitData parity of the epoch plan: empty selections (a 0.0 train_test_split part) and the uneven
``batch_size=1, drop_last=False`` rank split of a DDP job iterating a dataset directly."""

from __future__ import annotations

import warnings

import pytest

from streamscope._core.errors import PlanError
from streamscope.engine import plan_layout
from streamscope.engine.dataloader import StreamingDataLoader
from streamscope.engine.dataset import StreamingDataset
from streamscope.engine.plan import make_plan
from streamscope.engine.resume import resume_plan
from streamscope.engine.split import train_test_split
from tests.engine._data import plan_samples, small_plan, write_dataset


def _plan(sizes, **kw):
    return small_plan(sizes, **{"batch_size": 1, **kw})


_samples = plan_samples


@pytest.fixture
def fresh_uneven_warning(monkeypatch):
    """Forget which uneven splits were already warned about in this process."""
    monkeypatch.setattr(plan_layout, "WARNED_UNEVEN", set())


def _set_rank(monkeypatch, ws: int, rank: int) -> None:
    monkeypatch.setenv("WORLD_SIZE", str(ws))
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.setenv("GLOBAL_RANK", str(rank))
    monkeypatch.setenv("NNODES", "1")


# -- 1. empty selections ------------------------------------------------------------------------------


@pytest.mark.parametrize("regions", [[], [(0, 3, 3)], [(0, 0, 0), (1, 2, 2)]])
@pytest.mark.parametrize("ws", [1, 2, 3])
@pytest.mark.parametrize("b", [1, 4])
@pytest.mark.parametrize("drop_last", [False, True])
@pytest.mark.parametrize("shuffle,window", [(False, 0), (True, 0), (True, 5)])
def test_empty_regions_give_an_empty_plan(regions, ws, b, drop_last, shuffle, window):
    for rank in range(ws):
        kw = dict(world_size=ws, rank=rank, batch_size=b, drop_last=drop_last, shuffle=shuffle, shuffle_buffer=window)
        p = _plan([5, 3], regions=regions, **kw)
        assert (p.total_samples, p.num_samples, p.num_batches) == (0, 0, 0)
        assert list(p.batches_for_worker(0, 2)) == list(p.batches_for_worker(1, 2)) == []
        assert p.num_samples_for_worker(0, 1) == 0
        assert p.chunk_order() == [] and p.chunk_schedule_for_worker(0, 1) == []
        assert p.mixing()["batches_sampled"] == 0
        c, i = p.sample_range(0, 0)
        assert len(c) == len(i) == 0
        with pytest.raises(IndexError):
            p.batch(0)
        # a resume state of the empty epoch continues with (the empty) next epoch
        state = p.state(0)
        nxt, start = resume_plan(state, [5, 3], seed=42, regions=regions, **kw)
        assert (nxt.epoch, start, nxt.num_batches) == (2, 0, 0)


def test_datasets_without_samples_still_fail():
    with pytest.raises(PlanError, match="no chunks"):
        _plan([])
    with pytest.raises(PlanError, match="chunks are all empty"):
        _plan([0, 0])
    # a non-empty selection that cannot feed every rank keeps its error
    with pytest.raises(PlanError, match="cannot feed world_size=4"):
        _plan([5, 3], regions=[(0, 0, 2)], world_size=4)
    with pytest.raises(PlanError, match="no batch"):
        _plan([5, 3], regions=[(0, 0, 5)], world_size=2, batch_size=4, drop_last=True)


@pytest.fixture
def ds_dir(tmp_path):
    return write_dataset(str(tmp_path / "ds"), 100, chunk_size=10)


def _split_empty(ds_dir, **kw):
    with pytest.warns(UserWarning, match="split 1 .*selects no sample"):
        parts = train_test_split(StreamingDataset(ds_dir, **kw), [0.7, 0.0, 0.3])
    return parts


def test_zero_split_is_an_empty_dataset(ds_dir):
    train, empty, test = _split_empty(ds_dir)
    assert (len(train), len(empty), len(test)) == (70, 0, 30)
    assert list(empty) == [] and list(empty) == []  # twice: a second epoch is empty too
    assert sorted(s["index"] for s in list(train) + list(test)) == list(range(100))
    state = empty.state_dict(0, 0, 1)
    again = _split_empty(ds_dir)[1]
    again.load_state_dict(state)
    assert len(again) == 0 and list(again) == []


@pytest.mark.parametrize("shuffle", [False, True])
def test_zero_split_with_torch_loader_style_iteration(ds_dir, shuffle):
    empty = _split_empty(ds_dir, shuffle=shuffle)[1]
    assert len(empty) == 0
    assert [s for s in empty] == []


@pytest.mark.parametrize("num_workers", [0, 2])
def test_zero_split_through_the_loader(ds_dir, num_workers):
    empty = _split_empty(ds_dir)[1]
    dl = StreamingDataLoader(empty, batch_size=4, num_workers=num_workers)
    assert len(dl) == 0
    assert list(dl) == []
    state = dl.state_dict()
    dl2 = StreamingDataLoader(_split_empty(ds_dir)[1], batch_size=4, num_workers=num_workers)
    dl2.load_state_dict(state)
    assert list(dl2) == []
    assert list(dl) == []  # another epoch


@pytest.mark.parametrize("rank", [0, 1])
def test_zero_split_on_two_ranks(ds_dir, monkeypatch, rank):
    _set_rank(monkeypatch, 2, rank)
    for drop_last in (None, False):
        kw = {} if drop_last is None else {"drop_last": drop_last}
        empty = _split_empty(ds_dir, **kw)[1]
        assert len(empty) == 0 and list(empty) == []
        assert list(StreamingDataLoader(empty, batch_size=2, num_workers=0)) == []


# -- 2. batch_size=1, drop_last=False, N not a multiple of world_size ---------------------------------


@pytest.mark.parametrize(
    "n,ws,counts",
    [
        (1097, 2, [548, 549]),  # LitData: rank 0 548, rank 1 549
        (1097, 3, [365, 365, 367]),  # LitData: the last rank takes the whole remainder
        (1099, 4, [274, 274, 274, 277]),
        (1103, 4, [275, 275, 275, 278]),
        (7, 5, [1, 1, 1, 1, 3]),
    ],
)
@pytest.mark.parametrize("shuffle,window", [(False, 0), (True, 0), (True, 9)])
def test_uneven_ranks_follow_litdata(n, ws, counts, shuffle, window):
    sizes = [10] * (n // 10) + ([n % 10] if n % 10 else [])
    kw = dict(batch_size=1, drop_last=False, shuffle=shuffle, seed=7, epoch=2, shuffle_buffer=window)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        plans = [make_plan(sizes, world_size=ws, rank=r, **kw) for r in range(ws)]
        glob = _samples(make_plan(sizes, world_size=1, rank=0, **kw))
    assert [p.num_samples for p in plans] == counts
    assert [p.num_batches for p in plans] == counts
    assert all(p.batch_len(j) == 1 for p in plans for j in range(p.num_batches))
    joined = [s for p in plans for s in _samples(p)]
    assert joined == glob  # contiguous slices of the global order: every sample exactly once
    assert sorted(joined) == [(c, i) for c, s in enumerate(sizes) for i in range(s)]


def test_uneven_ranks_warn_once(fresh_uneven_warning):
    kw = dict(world_size=2, batch_size=1, drop_last=False, shuffle=False, seed=1, epoch=1)
    with pytest.warns(UserWarning, match=r"different numbers of samples.*548.*549.*drop_last=True") as rec:
        make_plan([10] * 109 + [7], rank=0, **kw)
        make_plan([10] * 109 + [7], rank=1, **kw)
        make_plan([10] * 109 + [7], rank=0, **{**kw, "epoch": 2})
    assert len([w for w in rec if "different numbers of samples" in str(w.message)]) == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # even splits and the other layouts do not warn
        make_plan([10] * 110, rank=0, **kw)
        make_plan([10] * 109 + [7], rank=0, **{**kw, "batch_size": 2})
        make_plan([10] * 109 + [7], rank=0, **{**kw, "drop_last": True})
        make_plan([10] * 109 + [7], rank=0, **{**kw, "equal_batches": False})


def test_other_layouts_unchanged():
    sizes = [10] * 109 + [7]  # 1097 samples
    kw = dict(world_size=2, shuffle=False, seed=1, epoch=1)
    # drop_last=True: both ranks 548 samples
    assert [make_plan(sizes, rank=r, batch_size=1, drop_last=True, **kw).num_samples for r in (0, 1)] == [548, 548]
    # batch_size >= 2: equal batch counts (548 and 549 samples in 275 batches each)
    plans = [make_plan(sizes, rank=r, batch_size=2, drop_last=False, **kw) for r in (0, 1)]
    assert [p.num_batches for p in plans] == [275, 275]
    assert [p.num_samples for p in plans] == [548, 549]
    # equal_batches=False keeps the r*N//ws slices
    plans = [make_plan(sizes, rank=r, batch_size=1, drop_last=False, equal_batches=False, **kw) for r in (0, 1)]
    assert [p.num_samples for p in plans] == [548, 549]
    kw3 = {**kw, "world_size": 3}
    plans = [make_plan(sizes, rank=r, batch_size=1, drop_last=False, equal_batches=False, **kw3) for r in range(3)]
    assert [p.num_samples for p in plans] == [365, 366, 366]


@pytest.mark.parametrize("shuffle", [False, True])
def test_two_ranks_iterate_the_dataset_directly(tmp_path, monkeypatch, fresh_uneven_warning, shuffle):
    """The repro: WORLD_SIZE=2, drop_last=False, 97 samples, iterating the dataset (batch size 1)."""
    d = write_dataset(str(tmp_path / "ds"), 97, chunk_size=10)
    got = []
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        for rank in (0, 1):
            _set_rank(monkeypatch, 2, rank)
            ds = StreamingDataset(d, shuffle=shuffle, drop_last=False, seed=3)
            assert (ds.world_size, ds.rank) == (2, rank)
            items = [s["index"] for s in ds]
            assert len(ds) == len(items) == [48, 49][rank]
            got.append(items)
    # one warning in this process (each DDP rank, a process of its own, warns once)
    assert len([w for w in rec if "different numbers of samples" in str(w.message)]) == 1
    assert sorted(got[0] + got[1]) == list(range(97))  # every sample exactly once over the ranks
    if not shuffle:
        assert got == [list(range(48)), list(range(48, 97))]


@pytest.mark.parametrize("num_workers", [0, 2])
def test_two_ranks_loader_batch_size_1(tmp_path, monkeypatch, num_workers):
    d = write_dataset(str(tmp_path / "ds"), 37, chunk_size=10)
    got = []
    for rank in (0, 1):
        _set_rank(monkeypatch, 2, rank)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ds = StreamingDataset(d, shuffle=True, drop_last=False, seed=3)
            dl = StreamingDataLoader(ds, batch_size=1, num_workers=num_workers)
            batches = [b["index"].tolist() for b in dl]
            assert len(dl) == len(batches) == [18, 19][rank]
        got.extend(i for b in batches for i in b)
    assert sorted(got) == list(range(37))


def test_uneven_elastic_resume_covers_the_rest():
    sizes = [10] * 10 + [3]  # 103 samples
    kw = dict(drop_last=False, shuffle=True, seed=2, shuffle_buffer=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        plans = [make_plan(sizes, world_size=2, rank=r, batch_size=1, epoch=1, **kw) for r in (0, 1)]
        assert [p.num_batches for p in plans] == [51, 52]
        seen = [s for p in plans for j in range(20) for s in p.batch(j)]
        state = plans[0].state(20)
        # continue with 3 ranks and batch size 1: the 63 samples left, 21 per rank
        rest = [resume_plan(state, sizes, world_size=3, rank=r, batch_size=1, **kw) for r in range(3)]
    assert [start for _, start in rest] == [0, 0, 0]
    assert [p.num_samples for p, _ in rest] == [21, 21, 21]
    after = [s for p, _ in rest for s in _samples(p)]
    assert sorted(seen + after) == [(c, i) for c, s in enumerate(sizes) for i in range(s)]
