"""CombinedStreamingDataset against LitData 0.2.68: per-dataset batch sizes with ``per_stream`` batching,
``weights`` with ``iterate_over_all=True`` (a ValueError), and batch mode read when ``iter()`` is called.

LitData facts checked by hand (and, where both engines run, by the ``interop`` tests below):

- ``set_batch_size([b_0, b_1])`` stores the list, passes ``b_d`` to dataset ``d`` and, with ``per_stream``,
  makes dataset ``d`` emit runs of at most ``b_d`` samples (the next run comes from another dataset while there
  is one); a list whose length is not the number of datasets raises ``ValueError``. LitData does not check the
  sizes (0 fails later with ZeroDivisionError, a negative size silently cuts the epoch short) and ignores a
  list with ``stratified`` batching; streamscope rejects both when the sizes are set.
- ``StreamingDataLoader(combined, batch_size=[2, 3])`` raises ``ValueError`` in LitData (torch's batch_size
  check); streamscope yields one batch per run (an extension: each batch from one dataset, of its size).
- ``CombinedStreamingDataset(..., weights=w)`` with ``iterate_over_all=True`` (the default) raises ValueError.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

pytest.importorskip("torch")

from streamscope._core.errors import DatasetError, PlanError, StateDictError, StreamscopeError  # noqa: E402
from streamscope.engine.batch_mode import BatchMode
from streamscope.engine.combined import CombinedStreamingDataset  # noqa: E402
from streamscope.engine.combined_plan import make_combined_plan  # noqa: E402
from streamscope.engine.dataloader import StreamingDataLoader  # noqa: E402
from streamscope.engine.dataset import StreamingDataset  # noqa: E402
from tests.engine._data import write_dataset  # noqa: E402

pytestmark = [
    pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning"),
    pytest.mark.filterwarnings("ignore:A newer version of litdata:UserWarning"),
]

N_A, N_B = 40, 30  # dataset a: ids 0..39, dataset b: ids 1000..1029


@pytest.fixture
def two_dirs(tmp_path, monkeypatch):
    monkeypatch.setenv("LITDATA_DISABLE_VERSION_CHECK", "1")
    monkeypatch.setenv("LITDATA_CACHE_DIR", str(tmp_path / "_litdata_cache"))
    a = write_dataset(str(tmp_path / "a"), N_A, lambda i: {"index": i}, chunk_size=8)
    b = write_dataset(str(tmp_path / "b"), N_B, lambda i: {"index": 1000 + i}, chunk_size=5)
    return a, b


def _engines() -> list[Any]:
    import streamscope

    litdata = pytest.importorskip("litdata")
    return [litdata, streamscope]


def _combined(dirs, ld: Any = None, **kw) -> Any:
    if ld is None:
        return CombinedStreamingDataset([StreamingDataset(d) for d in dirs], **kw)
    return ld.CombinedStreamingDataset([ld.StreamingDataset(d) for d in dirs], **kw)


def _runs(ids: list[int]) -> list[tuple[int, int]]:
    """(dataset, length) of each run of consecutive samples from one dataset."""
    out: list[list[int]] = []
    for x in ids:
        d = int(x >= 1000)
        if out and out[-1][0] == d:
            out[-1][1] += 1
        else:
            out.append([d, 1])
    return [(d, n) for d, n in out]


def _ids(batch: Any) -> list[int]:
    return [int(x) for x in batch["index"]]


# --- 1. per-dataset batch sizes (per_stream) -------------------------------------------------------------


@pytest.mark.interop
def test_per_stream_runs_follow_each_datasets_batch_size_like_litdata(two_dirs):
    """Stop at the first exhausted dataset: every run is exactly its dataset's size, in both engines."""
    out = []
    for ld in _engines():
        ds = _combined(two_dirs, ld, weights=[0.5, 0.5], iterate_over_all=False, batching_method="per_stream", seed=1)
        ds.set_batch_size([2, 3])
        assert list(ds.batch_size) == [2, 3]
        ids = [int(x["index"]) for x in ds]
        runs = _runs(ids)
        assert len(ids) == len(set(ids))
        out.append((set(runs), sum(1 for d, _ in runs if d == 1)))
    assert out[0] == out[1] == ({(0, 2), (1, 3)}, N_B // 3)  # b (30 samples) runs out after 10 runs of 3


@pytest.mark.interop
def test_per_stream_batch_sizes_iterate_over_all_like_litdata(two_dirs):
    """Iterate over all: runs of 2 and 3 alternate until b is exhausted, then a's rest; same length."""
    out = []
    for ld in _engines():
        ds = _combined(two_dirs, ld, batching_method="per_stream", seed=1)
        ds.set_batch_size((2, 3))
        ids = [int(x["index"]) for x in ds]
        runs = _runs(ids)
        out.append((sorted(ids), set(runs[:-1]), runs[-1][0], len(ds)))
    everything = list(range(N_A)) + list(range(1000, 1000 + N_B))
    assert out[0] == out[1] == (everything, {(0, 2), (1, 3)}, 0, N_A + N_B)


@pytest.mark.interop
def test_wrong_number_of_batch_sizes_is_a_value_error_in_both(two_dirs):
    for ld in _engines():
        ds = _combined(two_dirs, ld, batching_method="per_stream")
        with pytest.raises(ValueError, match="batch_size"):
            ds.set_batch_size([2, 3, 4])
        with pytest.raises(ValueError, match="batch_size"):
            ds.set_batch_size([2])


def test_bad_per_dataset_batch_sizes_fail_when_set(two_dirs):
    """Checked at once (LitData: 0 fails later with ZeroDivisionError, -1 cuts the epoch short silently)."""
    ds = _combined(two_dirs, batching_method="per_stream")
    for bad in ([0, 3], [2, -1], [2, True], [2, 2.5], [2, "3"]):
        with pytest.raises(DatasetError, match="per-dataset batch size must be an int >= 1"):
            ds.set_batch_size(bad)
    assert ds.batch_size == 1  # unchanged
    with pytest.raises(DatasetError, match="2 datasets"):
        ds.set_batch_size([])
    strat = _combined(two_dirs)  # stratified batches mix the datasets: one size only
    with pytest.raises(DatasetError, match="batching_method='per_stream'"):
        strat.set_batch_size([2, 3])
    with pytest.raises(ValueError):
        StreamingDataLoader(_combined(two_dirs), batch_size=[2, 3])
    # a list kept while the batching method is switched afterwards fails when a plan is made, not by hanging
    ds.set_batch_size([2, 3])
    ds.batching_method = "stratified"
    with pytest.raises(DatasetError, match="per_stream"):
        ds.plan()


def test_loader_batches_have_each_datasets_size_and_resume_exactly(two_dirs):
    """StreamingDataLoader(batch_size=[2, 3]): one batch per run (LitData's loader raises ValueError)."""
    ref = [_ids(b) for b in StreamingDataLoader(_combined(two_dirs, batching_method="per_stream"), batch_size=[2, 3])]
    assert all(len({x >= 1000 for x in b}) == 1 for b in ref)  # each batch from one dataset
    assert {len(b) for b in ref if b[0] < 1000} == {2} and {len(b) for b in ref if b[0] >= 1000} == {3}
    assert sorted(x for b in ref for x in b) == list(range(N_A)) + list(range(1000, 1000 + N_B))
    dl = StreamingDataLoader(_combined(two_dirs, batching_method="per_stream"), batch_size=[2, 3], num_workers=2)
    assert len(dl) == len(ref) == N_A // 2 + N_B // 3
    seen = []
    for b in dl:
        seen.append(_ids(b))
        if len(seen) == 7:
            state = json.loads(json.dumps(dl.state_dict()))
            break
    assert seen == ref[:7]
    assert state["dataset"]["batch_size"] == [2, 3]
    again = StreamingDataLoader(_combined(two_dirs, batching_method="per_stream"), batch_size=[2, 3])
    again.load_state_dict(state)
    assert seen + [_ids(b) for b in again] == ref  # exactly the batches not yet seen
    other = StreamingDataLoader(_combined(two_dirs, batching_method="per_stream"), batch_size=[3, 2])
    with pytest.raises(StateDictError):
        other.load_state_dict(state)
    as_tuple = StreamingDataLoader(_combined(two_dirs, batching_method="per_stream"), batch_size=(2, 3))
    as_tuple.load_state_dict(state)  # the same sizes given as a tuple (the state holds a list)
    assert seen + [_ids(b) for b in as_tuple] == ref


@pytest.mark.interop
def test_litdata_loader_rejects_a_list_of_batch_sizes(two_dirs):
    """The documented difference: LitData's loader fails on a list, streamscope's builds per-dataset batches."""
    litdata, streamscope = _engines()
    with pytest.raises(ValueError):
        litdata.StreamingDataLoader(_combined(two_dirs, litdata, batching_method="per_stream"), batch_size=[2, 3])
    dl = streamscope.StreamingDataLoader(
        _combined(two_dirs, streamscope, batching_method="per_stream"), batch_size=[2, 3]
    )
    assert {len(b["index"]) for b in dl} == {2, 3}


def test_plain_iteration_state_with_per_dataset_sizes(two_dirs):
    ref = _combined(two_dirs, batching_method="per_stream")
    ref.set_batch_size([2, 3])
    everything = [int(x["index"]) for x in ref]
    ds = _combined(two_dirs, batching_method="per_stream")
    ds.set_batch_size([2, 3])
    it = iter(ds)
    first = [int(next(it)["index"]) for _ in range(9)]  # 4 batches begin within 9 samples: 2+3+2+3 or 3+2+3+2
    state = json.loads(json.dumps(ds.state_dict(num_samples_yielded=9, batch_size=[2, 3])))
    assert state["batch_size"] == [2, 3] and state["plan_state"]["batches_consumed"] == 4
    resumed = _combined(two_dirs, batching_method="per_stream")
    resumed.load_state_dict(state)
    assert resumed.batch_size == [2, 3]
    assert first + [int(x["index"]) for x in resumed] == everything[:9] + everything[10:]
    stratified = _combined(two_dirs)
    with pytest.raises(StateDictError, match="per_stream"):
        stratified.load_state_dict(state)


@pytest.mark.parametrize("world_size", [1, 2, 3])
@pytest.mark.parametrize("over_all", [True, False])
@pytest.mark.parametrize("drop_last", [False, True])
def test_plan_with_per_dataset_sizes(world_size, over_all, drop_last):
    totals, sizes = [41, 29, 17], [4, 3, 5]
    kw: dict[str, Any] = dict(world_size=world_size, seed=5, epoch=2, batching_method="per_stream")
    kw.update(iterate_over_all=over_all, drop_last=drop_last, batch_size=sizes)
    plans = [make_combined_plan(totals, rank=r, **kw) for r in range(world_size)]
    assert len({p.num_batches for p in plans}) == 1  # ranks step together
    picked: list[tuple[int, int, int]] = []
    for p in plans:
        assert p.batch_size == sizes
        for j in range(p.num_batches):
            batch = p.batch(j)
            (d,) = {x for x, _ in batch}  # one dataset per batch
            assert 1 <= len(batch) <= sizes[d]
            if drop_last:
                assert len(batch) == sizes[d]
            picked += [(p.rank, x, k) for x, k in batch]
    assert len(picked) == len(set(picked))
    if over_all and not drop_last:
        assert len(picked) == sum(totals)  # every sample once
    # equal sizes as a list: the very same batches as one int
    same = [make_combined_plan(totals, rank=r, **{**kw, "batch_size": [4, 4, 4]}) for r in range(world_size)]
    one = [make_combined_plan(totals, rank=r, **{**kw, "batch_size": 4}) for r in range(world_size)]
    assert [[p.batch(j) for j in range(p.num_batches)] for p in same] == [
        [p.batch(j) for j in range(p.num_batches)] for p in one
    ]


def test_plan_rejects_bad_per_dataset_sizes():
    kw: dict[str, Any] = dict(world_size=1, rank=0, seed=1, epoch=1)
    with pytest.raises(PlanError, match="per_stream"):
        make_combined_plan([10, 10], batch_size=[2, 3], **kw)
    with pytest.raises(PlanError, match="3 per-dataset sizes for 2 datasets"):
        make_combined_plan([10, 10], batch_size=[2, 3, 4], batching_method="per_stream", **kw)
    with pytest.raises(PlanError, match="int >= 1"):
        make_combined_plan([10, 10], batch_size=[2, 0], batching_method="per_stream", **kw)
    p = make_combined_plan([10, 10], batch_size=[2, 3], batching_method="per_stream", **kw)
    assert p.batches_started(0) == 0 and p.batches_started(1) == 1 and p.batches_started(p.num_samples) == p.num_batches


# --- 2. weights with iterate_over_all=True ----------------------------------------------------------------


@pytest.mark.interop
def test_weights_with_iterate_over_all_is_a_value_error_like_litdata(two_dirs):
    for ld in _engines():
        with pytest.raises(ValueError, match="iterate_over_all"):
            _combined(two_dirs, ld, weights=[0.9, 0.1])  # iterate_over_all=True is the default
        with pytest.raises(ValueError, match="iterate_over_all"):
            _combined(two_dirs, ld, weights=[0.5, 0.5], iterate_over_all=True, batching_method="per_stream")
        # still valid: weights without iterate_over_all, and iterate_over_all without weights
        assert sum(1 for _ in _combined(two_dirs, ld, weights=[0.5, 0.5], iterate_over_all=False)) > 0
        assert len(_combined(two_dirs, ld)) == N_A + N_B
        assert len(_combined(two_dirs, ld, weights=None, iterate_over_all=True)) == N_A + N_B


def test_weights_with_iterate_over_all_raises_a_streamscope_error(two_dirs):
    with pytest.raises(DatasetError, match="iterate_over_all=False") as info:
        _combined(two_dirs, weights=[0.9, 0.1])
    assert isinstance(info.value, StreamscopeError) and isinstance(info.value, ValueError)
    with pytest.raises(DatasetError, match="2 weights for 1"):  # a malformed weights list is named first
        CombinedStreamingDataset([StreamingDataset(two_dirs[0])], weights=[1, 2])


# --- 3. batch mode is read when iter() is called ------------------------------------------------------------


def _mode(batch_size: int = 4) -> BatchMode:
    return BatchMode(epoch=1, start=0, batch_size=batch_size)


def test_iterator_keeps_the_batch_mode_of_the_iter_call(two_dirs):
    """StreamingDataLoader clears the batch mode right after ``iter(dataset)``; torch's single-process loader
    runs the iterator later: it must still yield ``(batch_number, batch)``."""
    ds = _combined(two_dirs)
    ds.set_batch_mode(_mode(4))
    it = iter(ds)
    ds.set_batch_mode(None)
    first = next(it)
    assert isinstance(first, tuple) and first[0] == 0
    assert len(first[1]["index"]) == 4
    rest = list(it)
    assert [j for j, _ in rest] == list(range(1, ds.plan(1, 4).num_batches))
    # and the other way round: taken in plain mode, it stays plain
    ds2 = _combined(two_dirs)
    it2 = iter(ds2)
    ds2.set_batch_mode(_mode(4))
    sample = next(it2)
    assert isinstance(sample, dict) and int(sample["index"]) >= 0


def test_single_process_loader_yields_batches(two_dirs):
    ds = _combined(two_dirs, batching_method="per_stream")
    batches = [_ids(b) for b in StreamingDataLoader(ds, batch_size=4, num_workers=0)]
    assert sorted(x for b in batches for x in b) == list(range(N_A)) + list(range(1000, 1000 + N_B))
    assert ds._batch_mode is None
    assert sorted(int(x["index"]) for x in ds) == list(range(N_A)) + list(range(1000, 1000 + N_B))
