"""StreamingDataLoader: batches, workers (fork and spawn), exact resume, tracing of batch and stall."""

from __future__ import annotations

import pytest
import torch

from streamscope import events as ev
from streamscope._core.errors import DatasetError, StateDictError
from streamscope.stream.dataloader import StreamingDataLoader
from streamscope.stream.dataset import StreamingDataset
from tests.stream._data import write_dataset

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


def test_batch_and_stall_spans(ds_dir):
    ev.drain()
    ev.ACTIVE.update({"batch", "stall"})
    try:
        for _ in StreamingDataLoader(StreamingDataset(ds_dir), batch_size=50):
            pass
    finally:
        ev.ACTIVE.difference_update({"batch", "stall"})
    events = ev.drain()
    batch_b = [e for e in events if e[1] == "batch" and e[0] == "B"]
    stall_b = [e for e in events if e[1] == "stall" and e[0] == "B"]
    assert [e[6]["batch"] for e in batch_b] == [0, 1, 2]
    assert len(stall_b) == 4  # one wait per batch plus the wait that ended the epoch
