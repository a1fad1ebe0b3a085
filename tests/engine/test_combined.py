"""CombinedStreamingDataset over real datasets: exactly-once mixing, weights, per_stream purity, exact resume."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")
from torch.utils.data import DataLoader  # noqa: E402

from streamscope._core.errors import DatasetError, StateDictError  # noqa: E402
from streamscope.engine import dataloader as dataloader_module  # noqa: E402
from streamscope.engine.combined import CombinedStreamingDataset  # noqa: E402
from streamscope.engine.dataloader import StreamingDataLoader  # noqa: E402
from streamscope.engine.dataset import StreamingDataset  # noqa: E402
from tests.engine._data import write_dataset  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")


@pytest.fixture
def two_dirs(tmp_path):
    a = write_dataset(str(tmp_path / "a"), 37, lambda i: {"index": i}, chunk_size=8)
    b = write_dataset(str(tmp_path / "b"), 15, lambda i: {"index": 1000 + i}, chunk_size=4)
    return a, b


def _combined(dirs, **kw):
    shuffle = kw.pop("shuffle", True)
    return CombinedStreamingDataset(
        [StreamingDataset(d, shuffle=shuffle, seed=7 + i) for i, d in enumerate(dirs)], seed=kw.pop("seed", 3), **kw
    )


def _ids(batch):
    return [int(x) for x in batch["index"]]


@pytest.fixture
def loader_accepts_combined(monkeypatch):
    """StreamingDataLoader's type gate admits StreamingDataset only; widen it to the combined dataset.

    CombinedStreamingDataset implements the loader's dataset protocol (plan, iter_batches in batch mode,
    state_dict, resume_position); the loader itself is used unchanged.
    """
    monkeypatch.setattr(dataloader_module, "StreamingDataset", (StreamingDataset, CombinedStreamingDataset))


@pytest.mark.parametrize("num_workers", [0, 2])
def test_plain_dataloader_every_sample_once(two_dirs, num_workers):
    ds = _combined(two_dirs)
    got = [int(x) for b in DataLoader(ds, batch_size=5, num_workers=num_workers) for x in b["index"]]
    assert sorted(got) == list(range(37)) + list(range(1000, 1015))
    assert len(ds) == 52


def test_plain_passes_move_to_the_next_epoch(two_dirs):
    """Iterated directly, a complete pass moves to the next epoch (reshuffled), as StreamingDataset does."""
    ds = _combined(two_dirs)
    first = [int(x["index"]) for x in ds]
    assert ds.current_epoch == 2
    second = [int(x["index"]) for x in ds]
    assert sorted(first) == sorted(second) == list(range(37)) + list(range(1000, 1015))
    assert first != second
    fresh = _combined(two_dirs)
    fresh.set_epoch(2)
    assert [int(x["index"]) for x in fresh] == second  # the second pass is epoch 2's order


def test_weights_and_stop_at_first(two_dirs):
    ds = _combined(two_dirs, weights=[0.1, 0.9], iterate_over_all=False)
    n = len(ds)  # this epoch's length (a complete pass moves to the next epoch, whose draws differ)
    got = [int(x["index"]) for x in ds]
    from_b = sum(1 for x in got if x >= 1000)
    assert from_b == 15  # b is drawn most and runs out first: the epoch stops there
    assert len(got) - from_b < 15
    assert len(got) == len(set(got)) == n


def test_loader_order_and_resume_with_other_workers(two_dirs, loader_accepts_combined):
    ref = [_ids(b) for b in StreamingDataLoader(_combined(two_dirs), batch_size=4)]
    assert sorted(x for b in ref for x in b) == list(range(37)) + list(range(1000, 1015))
    dl = StreamingDataLoader(_combined(two_dirs), batch_size=4, num_workers=2)
    seen = []
    for b in dl:
        seen.append(_ids(b))
        if len(seen) == 5:
            state = dl.state_dict()
            break
    assert seen == ref[:5]
    again = StreamingDataLoader(_combined(two_dirs), batch_size=4, num_workers=0)
    again.load_state_dict(state)
    rest = [_ids(b) for b in again]
    assert seen + rest == ref  # exactly the batches not yet seen, in order
    # the next epoch is a new mix
    nxt = [_ids(b) for b in again]
    assert nxt != ref and sorted(x for b in nxt for x in b) == sorted(x for b in ref for x in b)


def test_per_stream_batches_come_from_one_dataset(two_dirs, loader_accepts_combined):
    dl = StreamingDataLoader(_combined(two_dirs, batching_method="per_stream"), batch_size=4, num_workers=2)
    batches = [_ids(b) for b in dl]
    assert all(len({x >= 1000 for x in b}) == 1 for b in batches)
    assert sorted(x for b in batches for x in b) == list(range(37)) + list(range(1000, 1015))


def test_state_mismatch_is_named(two_dirs):
    ds = _combined(two_dirs)
    state = ds.state_dict(num_samples_yielded=8, batch_size=4)
    with pytest.raises(StateDictError, match="seed: saved 3, now 4"):
        _combined(two_dirs, seed=4).load_state_dict(state)
    with pytest.raises(StateDictError, match="dataset 1 shuffle"):
        CombinedStreamingDataset(
            [StreamingDataset(two_dirs[0], shuffle=True, seed=7), StreamingDataset(two_dirs[1], seed=8)], seed=3
        ).load_state_dict(state)
    forced = _combined(two_dirs, seed=4, force_override_state_dict=True)
    forced.load_state_dict(state)
    assert forced._pending == (1, 0)
    ok = _combined(two_dirs)
    ok.load_state_dict(state)
    assert ok._pending == (1, 2)


def test_bad_arguments(two_dirs):
    a = StreamingDataset(two_dirs[0])
    with pytest.raises(DatasetError, match="non-empty list"):
        CombinedStreamingDataset([])
    with pytest.raises(DatasetError, match="not a StreamingDataset"):
        CombinedStreamingDataset([a, [1, 2]])
    with pytest.raises(DatasetError, match="2 weights for 1"):
        CombinedStreamingDataset([a], weights=[1, 2])
    with pytest.raises(DatasetError, match="batching_method"):
        CombinedStreamingDataset([a], batching_method="round_robin")


@pytest.mark.parametrize("method", ["stratified", "per_stream"])
@pytest.mark.parametrize("drop_last", [False, True])
def test_two_ranks_step_together(two_dirs, monkeypatch, method, drop_last):
    monkeypatch.setenv("WORLD_SIZE", "2")
    per_rank = []
    for rank in range(2):
        monkeypatch.setenv("RANK", str(rank))
        ds = CombinedStreamingDataset(
            [StreamingDataset(d, shuffle=True, seed=5, drop_last=drop_last) for d in two_dirs],
            batching_method=method,
        )
        ds.set_batch_size(4)
        plan = ds.plan(1, 4)
        per_rank.append((plan.num_batches, [int(x["index"]) for x in ds]))
    assert per_rank[0][0] == per_rank[1][0]  # same number of batches: no rank waits at the epoch end
    ids = per_rank[0][1] + per_rank[1][1]
    assert len(ids) == len(set(ids))
    if not drop_last:
        assert sorted(ids) == list(range(37)) + list(range(1000, 1015))
    else:
        assert len(per_rank[0][1]) == len(per_rank[1][1]) == 4 * per_rank[0][0]


@pytest.mark.slow
def test_spawned_workers_and_pickling(two_dirs, loader_accepts_combined):
    import pickle

    ds = _combined(two_dirs)
    ds.plan(1, 4)
    clone = pickle.loads(pickle.dumps(ds))
    assert clone._plans == {} and clone.plan(1, 4).fingerprint == ds.plan(1, 4).fingerprint
    ref = [_ids(b) for b in StreamingDataLoader(_combined(two_dirs), batch_size=4)]
    spawned = StreamingDataLoader(_combined(two_dirs), batch_size=4, num_workers=2, multiprocessing_context="spawn")
    assert [_ids(b) for b in spawned] == ref


@pytest.mark.interop
def test_same_samples_and_length_as_litdata(two_dirs):
    """Against the real LitData: same length and the same multiset of samples for one rank (orders differ)."""
    litdata = pytest.importorskip("litdata")
    theirs = litdata.CombinedStreamingDataset(
        [litdata.StreamingDataset(d, shuffle=True, seed=7 + i) for i, d in enumerate(two_dirs)], seed=3
    )
    ours = _combined(two_dirs)
    assert len(ours) == len(theirs) == 52
    got_theirs = sorted(int(x["index"]) for x in theirs)
    got_ours = sorted(int(x["index"]) for x in ours)
    assert got_ours == got_theirs == list(range(37)) + list(range(1000, 1015))
