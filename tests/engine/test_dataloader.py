"""StreamingDataLoader: batches, workers (fork and spawn), exact resume, tracing of batch and stall."""

from __future__ import annotations

import pytest
import torch

from streamscope import events as ev
from streamscope._core.errors import DatasetError, StateDictError
from streamscope.engine.dataloader import StreamingDataLoader, _tell_workers_to_stop
from streamscope.engine.dataset import StreamingDataset
from tests.engine._data import write_dataset
from tests.support.tracing import clean_tracer  # noqa: F401

N = 103


@pytest.fixture(scope="module")
def ds_dir(tmp_path_factory):
    return write_dataset(str(tmp_path_factory.mktemp("dl") / "ds"), N, chunk_size=10)


def ids(batch) -> list[int]:
    return batch["index"].tolist()


def test_batches_no_workers(ds_dir):
    dl = StreamingDataLoader(StreamingDataset(ds_dir), batch_size=8)
    batches = list(dl)
    assert len(batches) == len(dl) == 13
    assert [i for b in batches for i in ids(b)] == list(range(N))
    b0 = batches[0]
    assert b0["index"].dtype == torch.int64 and b0["name"][:2] == ["s0", "s1"]


@pytest.mark.parametrize("ctx", ["fork", pytest.param("spawn", marks=pytest.mark.slow)])
def test_workers_every_sample_once_in_order(ds_dir, ctx):
    ds = StreamingDataset(ds_dir, shuffle=True, seed=3)
    dl = StreamingDataLoader(ds, batch_size=8, num_workers=2, multiprocessing_context=ctx)
    got = [ids(b) for b in dl]
    ref = StreamingDataLoader(StreamingDataset(ds_dir, shuffle=True, seed=3), batch_size=8)
    assert got == [ids(b) for b in ref]  # same batches, same order as in-process
    assert sorted(i for b in got for i in b) == list(range(N))


def test_epochs_advance_and_differ(ds_dir):
    dl = StreamingDataLoader(StreamingDataset(ds_dir, shuffle=True), batch_size=10)
    e1 = [i for b in dl for i in ids(b)]
    e2 = [i for b in dl for i in ids(b)]
    assert dl.current_epoch == 2
    assert sorted(e1) == sorted(e2) == list(range(N)) and e1 != e2


def run_resume(ds_dir, w_before, w_after, stop_after, epochs_before=0, shuffle=True, ctx="fork"):
    ds = StreamingDataset(ds_dir, shuffle=shuffle, seed=11)
    dl = StreamingDataLoader(ds, batch_size=7, num_workers=w_before, multiprocessing_context=ctx if w_before else None)
    for _ in range(epochs_before):
        for _ in dl:
            pass
    seen = []
    for k, b in enumerate(dl):
        seen.extend(ids(b))
        if k + 1 == stop_after:
            break
    state = dl.state_dict()
    ds2 = StreamingDataset(ds_dir, shuffle=shuffle, seed=11)
    dl2 = StreamingDataLoader(ds2, batch_size=7, num_workers=w_after, multiprocessing_context=ctx if w_after else None)
    dl2.load_state_dict(state)
    rest = [i for b in dl2 for i in ids(b)]
    # reference: the whole epoch in one go
    ref = StreamingDataLoader(StreamingDataset(ds_dir, shuffle=shuffle, seed=11), batch_size=7)
    for _ in range(epochs_before):
        for _ in ref:
            pass
    full = [i for b in ref for i in ids(b)]
    return seen, rest, full, dl2


@pytest.mark.parametrize(("w_before", "w_after"), [(0, 0), (2, 2), (2, 0), (0, 2), (2, 3)])
def test_resume_mid_epoch(ds_dir, w_before, w_after):
    seen, rest, full, _ = run_resume(ds_dir, w_before, w_after, stop_after=5)
    assert seen + rest == full
    assert len(set(seen + rest)) == N


def test_resume_across_epoch_boundary(ds_dir):
    seen, rest, full, dl2 = run_resume(ds_dir, 2, 2, stop_after=4, epochs_before=1)
    assert seen + rest == full and dl2.current_epoch == 2
    # state saved at the very end of an epoch resumes at the start of the next one
    ds = StreamingDataset(ds_dir, shuffle=True, seed=11)
    dl = StreamingDataLoader(ds, batch_size=7)
    e1 = [i for b in dl for i in ids(b)]
    st = dl.state_dict()
    dl3 = StreamingDataLoader(StreamingDataset(ds_dir, shuffle=True, seed=11), batch_size=7)
    dl3.load_state_dict(st)
    e2 = [i for b in dl3 for i in ids(b)]
    assert dl3.current_epoch == 2 and sorted(e2) == list(range(N)) and e2 != e1


@pytest.mark.slow
def test_resume_spawn(ds_dir):
    seen, rest, full, _ = run_resume(ds_dir, 2, 2, stop_after=3, ctx="spawn")
    assert seen + rest == full


def test_state_from_other_seed_or_dataset_is_refused(ds_dir, tmp_path):
    dl = StreamingDataLoader(StreamingDataset(ds_dir, shuffle=True, seed=1), batch_size=7)
    it = iter(dl)
    next(it)
    state = dl.state_dict()
    other_seed = StreamingDataLoader(StreamingDataset(ds_dir, shuffle=True, seed=2), batch_size=7)
    with pytest.raises(StateDictError, match="seed"):
        other_seed.load_state_dict(state)
    other_dir = write_dataset(str(tmp_path / "other"), 50, chunk_size=10)
    other_ds = StreamingDataLoader(StreamingDataset(other_dir, shuffle=True, seed=1), batch_size=7)
    with pytest.raises(StateDictError, match="input_dir"):
        other_ds.load_state_dict(state)
    with pytest.raises(StateDictError, match="batch_size"):
        StreamingDataLoader(StreamingDataset(ds_dir, shuffle=True, seed=1), batch_size=5).load_state_dict(state)
    with pytest.raises(StateDictError):
        other_seed.load_state_dict({"nonsense": 1})


def test_user_collate_fn_gets_samples(ds_dir):
    dl = StreamingDataLoader(StreamingDataset(ds_dir), batch_size=4, collate_fn=lambda s: [x["index"] for x in s])
    assert next(iter(dl)) == [0, 1, 2, 3]


def test_not_a_streaming_dataset():
    with pytest.raises(DatasetError, match="StreamingDataset"):
        StreamingDataLoader([1, 2, 3], batch_size=2)


@pytest.mark.usefixtures("clean_tracer")  # no flusher of an earlier test takes these events before drain()
@pytest.mark.parametrize("compact", [True, False])
def test_batch_and_stall_spans(ds_dir, compact):
    ev.drain()
    saved = set(ev.COMPACT)
    ev.COMPACT.clear()
    if compact:  # the default: one complete event per batch, recorded in bulk
        ev.COMPACT.update({"batch", "stall"})
    ev.ACTIVE.update({"batch", "stall"})
    try:
        for _ in StreamingDataLoader(StreamingDataset(ds_dir), batch_size=50):
            pass
        for k, _ in enumerate(StreamingDataLoader(StreamingDataset(ds_dir), batch_size=50)):
            if k == 1:
                break  # the batch the loop left is recorded too
    finally:
        ev.ACTIVE.difference_update({"batch", "stall"})
        ev.COMPACT.clear()
        ev.COMPACT.update(saved)
    events = ev.drain()
    assert bool([e for e in events if e[0] == ev.BULK]) == compact
    events = ev.expand(events)
    start = "X" if compact else "B"
    batch_b = [e for e in events if e[1] == "batch" and e[0] == start]
    stall_b = [e for e in events if e[1] == "stall" and e[0] == start]
    assert [e[6]["batch"] for e in batch_b] == [0, 1, 2, 0, 1]
    assert len(stall_b) == 4 + 2  # one wait per batch plus the wait that ended the epoch; 2 in the left epoch
    if compact:
        assert all(e[6]["dur"] >= 0 and e[6]["epoch"] >= 1 for e in batch_b + stall_b)
    else:
        ends = [e for e in events if e[1] == "batch" and e[0] == "E"]
        assert [e[6]["batch"] for e in ends] == [0, 1, 2, 0, 1] and all(e[3] >= b[3] for b, e in zip(batch_b, ends))


def test_worker_batches_equal_default_collate(tmp_path):
    from torch.utils.data import default_collate

    from tests.engine._data import image_sample

    d = write_dataset(str(tmp_path / "img"), 50, image_sample, chunk_size=8)
    ds = StreamingDataset(d, shuffle=True)
    got = list(StreamingDataLoader(ds, batch_size=7, num_workers=2))
    plan = StreamingDataset(d, shuffle=True).plan(1, 7)
    ref_ds = StreamingDataset(d)
    for j, batch in enumerate(got):
        expected = default_collate([ref_ds[ref_ds_index(ref_ds, c, i)] for c, i in plan.batch(j)])
        assert torch.equal(batch["image"], expected["image"]) and batch["image"].dtype == torch.uint8
        assert torch.equal(batch["label"], expected["label"]) and batch["name"] == expected["name"]


def ref_ds_index(ds: StreamingDataset, chunk: int, item: int) -> int:
    return sum(ds.chunk_sizes[:chunk]) + item


@pytest.mark.parametrize("ctx", ["fork", pytest.param("spawn", marks=pytest.mark.slow)])
def test_persistent_workers_follow_epochs_and_resume(ds_dir, ctx):
    def make():
        ds = StreamingDataset(ds_dir, shuffle=True, seed=4)
        return StreamingDataLoader(
            ds, batch_size=8, num_workers=2, persistent_workers=True, multiprocessing_context=ctx
        )

    ref = StreamingDataLoader(StreamingDataset(ds_dir, shuffle=True, seed=4), batch_size=8)
    ref_epochs = [[ids(b) for b in ref] for _ in range(3)]
    dl = make()
    assert [[ids(b) for b in dl] for _ in range(2)] == ref_epochs[:2]
    # break early in epoch 3, save, resume in a new persistent loader
    seen = []
    for k, b in enumerate(dl):
        seen.append(ids(b))
        if k == 2:
            break
    state = dl.state_dict()
    dl2 = make()
    dl2.load_state_dict(state)
    assert seen + [ids(b) for b in dl2] == ref_epochs[2]


@pytest.mark.parametrize("compressed", [False, True])
def test_shuffle_buffer_mixes_across_chunks(tmp_path, compressed):
    d = write_dataset(str(tmp_path / "sb"), 200, chunk_size=20, compression="zstd" if compressed else None)
    ds = StreamingDataset(d, shuffle_buffer=60, cache_dir=str(tmp_path / "cache"))
    batches = [ids(b) for b in StreamingDataLoader(ds, batch_size=10, num_workers=2 if compressed else 0)]
    flat = [i for b in batches for i in b]
    assert sorted(flat) == list(range(200)) and flat != list(range(200))
    chunks_per_batch = [len({i // 20 for i in b}) for b in batches]
    assert max(chunks_per_batch) > 1  # samples of one batch come from several chunks


class _Endless(torch.utils.data.IterableDataset):
    def __iter__(self):  # type: ignore[no-untyped-def]
        while True:
            yield 0


def test_workers_told_to_stop_exit_on_their_own_and_torch_still_shuts_down():
    """A complete epoch tells its workers to stop at once (torch's own shutdown, in a background thread, may
    wait for the GIL); against torch's real iterator: they exit, and its shutdown then finds nothing to do."""
    it = iter(torch.utils.data.DataLoader(_Endless(), batch_size=None, num_workers=2))
    next(it)
    _tell_workers_to_stop(it)
    for w in it._workers:
        w.join(30)
        assert w.exitcode == 0
    it._shutdown_workers()
    assert it._shutdown


def _rank_loader(ds_dir, world, rank, workers, **kw):
    ds = StreamingDataset(ds_dir, shuffle=True, seed=11, drop_last=kw.pop("drop_last", False))
    ds.world_size, ds.rank = world, rank  # one rank of a DDP job, in this process
    return StreamingDataLoader(ds, batch_size=kw.pop("batch_size", 4), num_workers=workers, **kw)


@pytest.mark.parametrize("drop_last", [False, True])
def test_resume_in_another_world_size(ds_dir, drop_last):
    """Elastic resume: 4 ranks x 2 workers save mid-epoch, 2 ranks x 1 worker continue, save again, 3 ranks end it:
    the epoch's samples (drop_last: a subset of them) each arrive exactly once."""
    seen: list[int] = []
    old = [_rank_loader(ds_dir, 4, r, 2, drop_last=drop_last) for r in range(4)]
    for dl in old:
        for k, b in enumerate(dl):
            seen.extend(ids(b))
            if k + 1 == 3:  # every rank consumed 3 batches (the ranks step together)
                break
    state = old[0].state_dict()
    mid = [_rank_loader(ds_dir, 2, r, 1, drop_last=drop_last) for r in range(2)]
    for dl in mid:
        dl.load_state_dict(state)
        assert dl.current_epoch == 1 and len(dl) == len(mid[0])
        for k, b in enumerate(dl):
            seen.extend(ids(b))
            if k + 1 == 2:
                break
    state = mid[1].state_dict()
    assert state["dataset"]["plan_state"]["plan"]["resumed_from"] == [[4, 4, 3]]
    last = [_rank_loader(ds_dir, 3, r, 0, drop_last=drop_last) for r in range(3)]
    for dl in last:
        dl.load_state_dict(state)
        seen.extend(i for b in dl for i in ids(b))
        assert dl.current_epoch == 1
    assert len(seen) == len(set(seen))
    if drop_last:
        # 96 of 103 used by 4 ranks of 4; 48 left after 3 batches; 2 ranks x 4: 48, 16 consumed; 32 left: 3 x 4 -> 24
        assert len(seen) == 48 + 16 + 24 and set(seen) <= set(range(N))
    else:
        assert sorted(seen) == list(range(N))
    # the next epoch is a whole one again, in the new world size
    nxt = [i for dl in last for b in dl for i in ids(b)]
    assert all(dl.current_epoch == 2 for dl in last)
    assert sorted(nxt) == list(range(N)) if not drop_last else len(nxt) == 96


def test_resume_where_the_rest_cannot_feed_the_ranks(ds_dir):
    dl = _rank_loader(ds_dir, 2, 0, 0, batch_size=50)
    next(iter(dl))  # 2 ranks x 1 batch of 50 (or 51): 3 samples left
    with pytest.raises(DatasetError, match="cannot feed world_size=4"):
        _rank_loader(ds_dir, 4, 0, 0, batch_size=50).load_state_dict(dl.state_dict())
