"""StreamingDataLoader usage (batches, workers, drop_last, len, state_dict/resume), run with both engines."""

from __future__ import annotations

import warnings
from typing import Any

import pytest

from tests.compat.conftest import both, engine

pytestmark = pytest.mark.interop


def _batches(loader: Any) -> list[list[int]]:
    return [b["index"].tolist() for b in loader]


def test_batches_collate_like_litdata(data_dir: str) -> None:
    def scenario(ld: Any) -> Any:
        loader = ld.StreamingDataLoader(ld.StreamingDataset(data_dir), batch_size=4)
        first = next(iter(loader))
        return len(loader), _batches(loader), first  # first: tensor image/index/class, list of names

    a, b = both(scenario)
    assert a == b
    assert a[0] == 13


def test_drop_last(data_dir: str) -> None:
    def scenario(ld: Any) -> Any:
        loader = ld.StreamingDataLoader(ld.StreamingDataset(data_dir), batch_size=4, drop_last=True)
        return len(loader), _batches(loader)

    a, b = both(scenario)
    assert a == b
    assert a[0] == 12


def test_two_workers_same_batches_as_a_multiset(data_dir: str) -> None:
    # Allowed difference: with workers, LitData interleaves each worker's contiguous share batch by batch
    # (0-3, 26-29, 4-7, ...) while streamscope yields batches in global order; neither is documented. What
    # users rely on: the number of batches, their sizes and every sample exactly once.
    def scenario(ld: Any) -> Any:
        loader = ld.StreamingDataLoader(ld.StreamingDataset(data_dir), batch_size=4, num_workers=2)
        batches = _batches(loader)
        return len(loader), sorted(len(b) for b in batches), sorted(i for b in batches for i in b)

    a, b = both(scenario)
    assert a == b
    assert a[2] == list(range(50))


def test_epochs_reshuffle_and_cover_everything(data_dir: str) -> None:
    def scenario(ld: Any) -> Any:
        loader = ld.StreamingDataLoader(ld.StreamingDataset(data_dir, shuffle=True), batch_size=10)
        e1, e2 = _batches(loader), _batches(loader)
        flat1, flat2 = sorted(sum(e1, [])), sorted(sum(e2, []))
        return e1 != e2, flat1 == flat2 == list(range(50)), loader.state_dict()["current_epoch"]

    a, b = both(scenario)
    assert a == b == (True, True, 2)


def test_state_dict_shape_and_resume(data_dir: str) -> None:
    def scenario(ld: Any) -> Any:
        loader = ld.StreamingDataLoader(ld.StreamingDataset(data_dir), batch_size=4)
        it = iter(loader)
        seen = [next(it)["index"].tolist() for _ in range(3)]
        state = loader.state_dict()
        resumed = ld.StreamingDataLoader(ld.StreamingDataset(data_dir), batch_size=4)
        resumed.load_state_dict(state)
        top = {k: state[k] for k in ("current_epoch", "num_samples_yielded", "latest_worker_idx")}
        ds_keys = {"num_samples_yielded", "batch_size", "current_epoch", "shuffle", "seed"}
        ds_state = {k: state["dataset"][k] for k in ds_keys}
        return seen, top, ds_state, _batches(resumed)

    a, b = both(scenario)
    assert a == b
    assert a[3][0] == [12, 13, 14, 15]


def test_state_dict_dataset_keys_superset_of_litdata(data_dir: str) -> None:
    # code that inspects a checkpoint reads LitData's keys; extra streamscope keys are allowed
    def keys(ld: Any) -> tuple[set[str], set[str]]:
        loader = ld.StreamingDataLoader(ld.StreamingDataset(data_dir), batch_size=4)
        next(iter(loader))
        state = loader.state_dict()
        return set(state), set(state["dataset"])

    (ld_top, ld_ds), (ss_top, ss_ds) = keys(engine("litdata")), keys(engine("streamscope"))
    assert ld_top <= ss_top
    # the two subsample keys are the gap xfailed in test_state_dict_has_litdata_subsample_keys
    assert ld_ds - {"subsampled_files", "region_of_interest"} <= ss_ds


def test_state_dict_num_workers_zero_recorded_as_one(data_dir: str) -> None:
    def scenario(ld: Any) -> Any:
        loader = ld.StreamingDataLoader(ld.StreamingDataset(data_dir), batch_size=4)
        next(iter(loader))
        return loader.state_dict()["dataset"]["num_workers"]

    a, b = both(scenario)
    assert a == b == 1


@pytest.mark.parametrize("subsample", [1.0, 0.7, 1.5])
@pytest.mark.parametrize("shuffle", [False, True])
def test_state_dict_has_litdata_subsample_keys(data_dir: str, subsample: float, shuffle: bool) -> None:
    def scenario(ld: Any) -> Any:
        ds = ld.StreamingDataset(data_dir, subsample=subsample, shuffle=shuffle, seed=7)
        loader = ld.StreamingDataLoader(ds, batch_size=4)
        next(iter(loader))
        state = loader.state_dict()["dataset"]
        return state["subsampled_files"], [tuple(int(x) for x in r) for r in state["region_of_interest"]]

    # values compared as ints: LitData leaves a numpy int64 in the last region of a subsample (streamscope keeps
    # plain ints, so the state stays JSON-serialisable)
    a, b = both(scenario)
    assert a == b
    assert len(a[0]) == len(a[1]) > 0


def test_train_test_split_state_has_litdata_regions(data_dir: str) -> None:
    def scenario(ld: Any) -> Any:
        parts = ld.train_test_split(ld.StreamingDataset(data_dir), splits=[0.7, 0.3])
        out = []
        for p in parts:
            loader = ld.StreamingDataLoader(p, batch_size=4)
            next(iter(loader))
            state = loader.state_dict()["dataset"]
            out.append((state["subsampled_files"], [tuple(int(x) for x in r) for r in state["region_of_interest"]]))
        return out

    a, b = both(scenario)
    assert a == b


def test_litdata_checkpoint_resumes_in_streamscope(data_dir: str) -> None:
    """A user switching engines mid-training loads a state_dict that LitData produced."""
    ld, ss = engine("litdata"), engine("streamscope")
    loader = ld.StreamingDataLoader(ld.StreamingDataset(data_dir), batch_size=4)
    it = iter(loader)
    for _ in range(3):
        next(it)
    state = loader.state_dict()
    resumed = ss.StreamingDataLoader(ss.StreamingDataset(data_dir), batch_size=4)
    resumed.load_state_dict(state)
    assert _batches(resumed)[0] == [12, 13, 14, 15]


def test_tokens_loader_batches_and_resume(tokens_dir: str) -> None:
    def scenario(ld: Any) -> Any:
        from importlib import import_module

        TokensLoader = import_module(f"{ld.__name__}.streaming.item_loader").TokensLoader

        def make() -> Any:
            ds = ld.StreamingDataset(tokens_dir, item_loader=TokensLoader(block_size=10), shuffle=True, seed=5)
            return ld.StreamingDataLoader(ds, batch_size=8)

        loader = make()
        seen = []
        for i, batch in enumerate(loader):
            seen += [tuple(row) for row in batch.tolist()]
            if i == 2:
                break
        resumed = make()
        resumed.load_state_dict(loader.state_dict())
        rest = [tuple(row) for batch in resumed for row in batch.tolist()]
        every = sorted(tuple(row) for batch in make() for row in batch.tolist())
        return len(make()), len(seen), len(rest), sorted(seen + rest) == every, tuple(next(iter(make())).shape)

    a, b = both(scenario)
    assert a == b
    assert a[3] is True


def test_two_workers_resume_covers_everything_once(data_dir: str) -> None:
    def scenario(ld: Any) -> Any:
        def make() -> Any:
            return ld.StreamingDataLoader(ld.StreamingDataset(data_dir, shuffle=True), batch_size=4, num_workers=2)

        loader = make()
        seen = []
        for i, batch in enumerate(loader):
            seen += batch["index"].tolist()
            if i == 4:
                break
        resumed = make()
        resumed.load_state_dict(loader.state_dict())
        rest = [i for batch in resumed for i in batch["index"].tolist()]
        return len(seen), len(rest), sorted(seen + rest) == list(range(50))

    a, b = both(scenario)
    assert a == b == (20, 30, True)


def test_state_dict_survives_torch_save_and_json(data_dir: str, tmp_path: Any) -> None:
    """LitData docs: ``torch.save(loader.state_dict(), path)`` then ``load_state_dict(torch.load(path))``.
    torch.load defaults to weights_only=True, which only unpickles plain containers and numbers."""
    import json

    import torch

    def scenario(ld: Any) -> Any:
        loader = ld.StreamingDataLoader(ld.StreamingDataset(data_dir, shuffle=True), batch_size=4, num_workers=2)
        it = iter(loader)
        for _ in range(3):
            next(it)
        state = loader.state_dict()
        path = str(tmp_path / f"{ld.__name__}.pt")
        torch.save(state, path)
        loaded = torch.load(path)
        json.dumps(state)  # checkpoints are also stored as JSON by some trainers
        resumed = ld.StreamingDataLoader(ld.StreamingDataset(data_dir, shuffle=True), batch_size=4, num_workers=2)
        resumed.load_state_dict(loaded)
        return len([i for b in resumed for i in b["index"].tolist()])

    a, b = both(scenario)
    assert a == b == 38


def test_resume_in_second_epoch(data_dir: str) -> None:
    def scenario(ld: Any) -> Any:
        loader = ld.StreamingDataLoader(ld.StreamingDataset(data_dir, shuffle=True), batch_size=4)
        first_epoch = _batches(loader)
        it = iter(loader)
        seen = [next(it)["index"].tolist() for _ in range(3)]
        state = loader.state_dict()
        resumed = ld.StreamingDataLoader(ld.StreamingDataset(data_dir, shuffle=True), batch_size=4)
        resumed.load_state_dict(state)
        rest = _batches(resumed)
        flat = sorted(i for b in seen + rest for i in b)
        return state["current_epoch"], len(rest), flat == list(range(50)), seen + rest != first_epoch

    a, b = both(scenario)
    assert a == b == (2, 10, True, True)


def test_torch_dataloader_kwargs_pass_through(data_dir: str) -> None:
    """Trainer code passes torch's own DataLoader options through StreamingDataLoader's **kwargs."""

    def scenario(ld: Any) -> Any:
        loader = ld.StreamingDataLoader(
            ld.StreamingDataset(data_dir),
            batch_size=8,
            num_workers=2,
            persistent_workers=True,
            pin_memory=False,
            prefetch_factor=3,
            timeout=60,
        )
        e1 = sorted(i for b in loader for i in b["index"].tolist())
        e2 = sorted(i for b in loader for i in b["index"].tolist())
        return len(loader), e1 == e2 == list(range(50)), loader.prefetch_factor, loader.persistent_workers

    a, b = both(scenario)
    assert a == b == (7, True, 3, True)


def test_litdata_checkpoint_with_shuffle_resumes_rest_of_our_epoch(data_dir: str) -> None:
    """With shuffle the engines order an epoch differently: streamscope continues with the samples not yet
    reached in its own order of the saved epoch (documented in streamscope.engine.resume)."""
    ld, ss = engine("litdata"), engine("streamscope")
    loader = ld.StreamingDataLoader(ld.StreamingDataset(data_dir, shuffle=True, seed=3), batch_size=4)
    it = iter(loader)
    for _ in range(3):
        next(it)
    state = loader.state_dict()
    resumed = ss.StreamingDataLoader(ss.StreamingDataset(data_dir, shuffle=True, seed=3), batch_size=4)
    resumed.load_state_dict(state)
    rest = _batches(resumed)
    ours = _batches(ss.StreamingDataLoader(ss.StreamingDataset(data_dir, shuffle=True, seed=3), batch_size=4))
    assert rest == ours[3:]
    assert resumed.state_dict()["current_epoch"] == 1


def test_litdata_checkpoint_after_full_epoch_starts_next_epoch(data_dir: str) -> None:
    ld, ss = engine("litdata"), engine("streamscope")
    loader = ld.StreamingDataLoader(ld.StreamingDataset(data_dir), batch_size=4)
    _batches(loader)
    state = loader.state_dict()  # LitData: 13 batches counted as 52 samples
    resumed = ss.StreamingDataLoader(ss.StreamingDataset(data_dir), batch_size=4)
    resumed.load_state_dict(state)
    assert sorted(i for b in _batches(resumed) for i in b) == list(range(50))
    assert resumed.state_dict()["current_epoch"] == 2


@pytest.mark.parametrize("change", ["seed", "shuffle", "input_dir", "batch_size", "subsample"])
def test_litdata_checkpoint_from_other_configuration_is_refused(data_dir: str, change: str) -> None:
    from streamscope._core.errors import StateDictError

    ld, ss = engine("litdata"), engine("streamscope")
    loader = ld.StreamingDataLoader(ld.StreamingDataset(data_dir, seed=1), batch_size=4)
    it = iter(loader)
    next(it)
    state = loader.state_dict()
    kwargs: dict[str, Any] = {"seed": 1}
    batch_size = 4
    if change == "seed":
        kwargs["seed"] = 2
    elif change == "shuffle":
        kwargs["shuffle"] = True
    elif change == "batch_size":
        batch_size = 5
    elif change == "subsample":
        kwargs["subsample"] = 0.5
    resumed = ss.StreamingDataLoader(ss.StreamingDataset(data_dir, **kwargs), batch_size=batch_size)
    if change == "input_dir":
        state["dataset"]["input_dir_path"] = data_dir + "-elsewhere"
    with pytest.raises(StateDictError):
        resumed.load_state_dict(state)


def test_on_demand_bytes_and_reset(data_dir: str) -> None:
    def scenario(ld: Any) -> Any:
        ds = ld.StreamingDataset(data_dir)
        default = ds.on_demand_bytes
        try:
            ds.on_demand_bytes = "yes"
            bad = "accepted"
        except ValueError:
            bad = "ValueError"
        first = [s["index"] for s in ds][:3]
        ds.reset()
        again = sorted(s["index"] for s in ds)
        return default, bad, first, again == list(range(50)), ds.current_epoch

    a, b = both(scenario)
    assert a == b
    assert a[:2] == (True, "ValueError")


@pytest.mark.parametrize("shuffle", [False, True])
def test_litdata_checkpoint_with_workers_resumes_the_same_count(data_dir: str, shuffle: bool) -> None:
    """With workers LitData interleaves per-worker shares, so its remaining samples differ from streamscope's
    (documented in streamscope.engine.resume): the resumed epoch has the count LitData's own resume yields."""
    ld, ss = engine("litdata"), engine("streamscope")

    def make(eng: Any) -> Any:
        return eng.StreamingDataLoader(eng.StreamingDataset(data_dir, shuffle=shuffle), batch_size=4, num_workers=2)

    loader = make(ld)
    it = iter(loader)
    for _ in range(5):
        next(it)
    state = loader.state_dict()
    theirs = make(ld)
    theirs.load_state_dict(state)
    ours = make(ss)
    ours.load_state_dict(state)
    rest_ld, rest_ss = _batches(theirs), _batches(ours)
    assert sum(map(len, rest_ss)) == sum(map(len, rest_ld)) == 30
    assert len(set(i for b in rest_ss for i in b)) == 30


@pytest.mark.parametrize("num_workers", [0, 2])
def test_litdata_combined_checkpoint_resumes_the_same_count(data_dir: str, tmp_path: Any, num_workers: int) -> None:
    """A LitData checkpoint of a CombinedStreamingDataset (one state per dataset under "0", "1") loads here: the
    epoch continues after as many samples as LitData yielded, in streamscope's order (found running LitData's
    own tests: it used to raise StateDictError)."""
    from streamscope import optimize
    from streamscope._core.errors import StateDictError
    from tests.compat import _fns

    other = str(tmp_path / "other")
    optimize(fn=_fns.sample, inputs=list(range(100, 130)), output_dir=other, chunk_size=8, num_workers=1, verbose=False)
    ld, ss = engine("litdata"), engine("streamscope")

    def make(eng: Any, dirs: tuple[str, str] = (data_dir, other)) -> Any:
        combined = eng.CombinedStreamingDataset([eng.StreamingDataset(d) for d in dirs])
        # a worker that stops answering fails in a minute instead of at the test's timeout
        extra = {"timeout": 60} if num_workers else {}
        return eng.StreamingDataLoader(combined, batch_size=4, num_workers=num_workers, **extra)

    def first_batches() -> tuple[Any, list[int]]:
        loader = make(ld)
        it = iter(loader)
        return loader, [i for _ in range(5) for i in next(it)["index"].tolist()]

    try:
        loader, seen = first_batches()
    except RuntimeError as exc:
        # LitData 0.2.68's own loader once hung here in CI with its workers alive (not reproduced in 18 runs
        # under load): a second, fresh loader shows whether the hang was LitData's or the checkpoint's
        if "timed out" not in str(exc):
            raise
        warnings.warn(f"LitData's loader timed out, retried once: {exc}", stacklevel=1)
        loader, seen = first_batches()
    state = loader.state_dict()
    assert set(state["dataset"]) == {"0", "1"}  # LitData's layout
    theirs = make(ld)
    theirs.load_state_dict(state)
    ours = make(ss)
    ours.load_state_dict(state)
    rest_ld, rest_ss = _batches(theirs), _batches(ours)
    assert sum(map(len, rest_ss)) == sum(map(len, rest_ld)) == 80 - len(seen)
    assert len(set(i for b in rest_ss for i in b)) == 80 - len(seen)  # no sample twice within the resumed epoch
    with pytest.raises(StateDictError, match="dataset 1: input_dir_path"):
        make(ss, (data_dir, data_dir)).load_state_dict(state)
