"""ParallelStreamingDataset over real datasets: alignment, cycling, transforms with rngs, exact resume."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("torch")
import torch  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from torch.utils.data import DataLoader  # noqa: E402

from streamscope._core.errors import DatasetError, NotAStreamingDatasetError, StateDictError  # noqa: E402
from streamscope.engine.dataloader import StreamingDataLoader  # noqa: E402
from streamscope.engine.dataset import StreamingDataset  # noqa: E402
from streamscope.engine.parallel import ParallelStreamingDataset  # noqa: E402
from tests.engine._data import write_dataset  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")


@pytest.fixture(scope="module")
def two_dirs(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    root = tmp_path_factory.mktemp("parallel")
    a = write_dataset(str(root / "a"), 37, lambda i: {"index": i}, chunk_size=8)
    b = write_dataset(str(root / "b"), 15, lambda i: {"index": 1000 + i}, chunk_size=4)
    return a, b


def _par(dirs: tuple[str, str], shuffle: bool = True, **kw: Any) -> ParallelStreamingDataset:
    return ParallelStreamingDataset(
        [StreamingDataset(d, shuffle=shuffle, seed=7 + i) for i, d in enumerate(dirs)], **kw
    )


def _pairs(batches: list[Any]) -> list[tuple[int, int]]:
    return [(int(a), int(b)) for x, y in batches for a, b in zip(x["index"], y["index"])]


def _own_order(d: str, seed: int, epoch: int, shuffle: bool = True) -> list[int]:
    ds = StreamingDataset(d, shuffle=shuffle, seed=seed)
    ds.set_epoch(epoch)
    return [int(s["index"]) for s in ds]


def test_length_none_stops_with_the_shortest(two_dirs: tuple[str, str]) -> None:
    par = _par(two_dirs)
    items = list(par)
    assert len(par) == len(items) == 15
    assert all(isinstance(t, tuple) and len(t) == 2 for t in items)
    # each side is its own dataset's epoch-1 order (its own shuffle and seed)
    assert [int(a["index"]) for a, _ in items] == _own_order(two_dirs[0], 7, 1)[:15]
    assert [int(b["index"]) for _, b in items] == _own_order(two_dirs[1], 8, 1)


def test_int_length_cycles_each_dataset_in_its_next_epoch(two_dirs: tuple[str, str]) -> None:
    par = _par(two_dirs, length=40)
    items = list(par)
    assert len(par) == len(items) == 40
    b_side = [int(b["index"]) for _, b in items]
    assert (
        b_side == (_own_order(two_dirs[1], 8, 1) + _own_order(two_dirs[1], 8, 2) + _own_order(two_dirs[1], 8, 3))[:40]
    )
    a_side = [int(a["index"]) for a, _ in items]
    assert a_side == (_own_order(two_dirs[0], 7, 1) + _own_order(two_dirs[0], 7, 2))[:40]


@pytest.mark.parametrize("resume", [True, False])
def test_epochs_continue_the_stream_or_repeat(two_dirs: tuple[str, str], resume: bool) -> None:
    loader = StreamingDataLoader(_par(two_dirs, length=20, resume=resume), batch_size=6)
    e1, e2 = _pairs(list(loader)), _pairs(list(loader))
    assert len(e1) == len(e2) == 20
    if resume:
        whole = _pairs(list(StreamingDataLoader(_par(two_dirs, length=40), batch_size=4)))
        assert e1 + e2 == whole
    else:
        assert e1 == e2


@pytest.mark.parametrize("resume", [True, False])
def test_passes_outside_a_loader_start_the_stream_again(two_dirs: tuple[str, str], resume: bool) -> None:
    """``resume`` acts through the loader's epochs: iterating the dataset itself twice yields the same samples
    (LitData's own test_parallel_dataset_complete_iteration_resume_without_dataloader)."""
    par = _par(two_dirs, shuffle=False, length=20, resume=resume)
    first = [(int(a["index"]), int(b["index"])) for a, b in par]
    second = [(int(a["index"]), int(b["index"])) for a, b in par]
    assert len(first) == 20 and first == second
    assert [a for a, _ in first] == list(range(20)) and [b for _, b in first] == [1000 + i % 15 for i in range(20)]
    loader = StreamingDataLoader(par, batch_size=5)  # the loader's epochs still continue the stream (or repeat it)
    e1, e2 = _pairs(list(loader)), _pairs(list(loader))
    assert e1 == first and (e2 != e1) == resume
    assert not resume or [a for a, _ in e2] == [20 + i for i in range(17)] + [0, 1, 2]


def test_infinite_length(two_dirs: tuple[str, str]) -> None:
    par = _par(two_dirs, length=float("inf"))
    assert par.is_infinite() and par.get_len(0, 1) is None
    with pytest.raises(TypeError):
        len(par)
    loader = StreamingDataLoader(par, batch_size=5)
    got = []
    for i, batch in enumerate(loader):
        got += _pairs([batch])
        if i == 9:
            break
    assert len(got) == 50
    assert [b for _, b in got] == (
        _own_order(two_dirs[1], 8, 1)
        + _own_order(two_dirs[1], 8, 2)
        + _own_order(two_dirs[1], 8, 3)
        + _own_order(two_dirs[1], 8, 4)
    )[:50]


@pytest.mark.parametrize("num_workers", [0, 2])
def test_loader_batches_are_per_dataset_lists(two_dirs: tuple[str, str], num_workers: int) -> None:
    loader = StreamingDataLoader(_par(two_dirs, length=30), batch_size=4, num_workers=num_workers)
    batches = list(loader)
    assert len(loader) == len(batches) == 8
    assert all(isinstance(b, list) and len(b) == 2 for b in batches)
    assert all(isinstance(b[0]["index"], torch.Tensor) for b in batches)
    ref = list(_par(two_dirs, length=30))
    assert _pairs(batches) == [(int(a["index"]), int(b["index"])) for a, b in ref]


def test_plain_torch_dataloader_with_workers(two_dirs: tuple[str, str]) -> None:
    par = _par(two_dirs, length=30)
    got = [(int(a["index"]), int(b["index"])) for a, b in DataLoader(par, batch_size=None, num_workers=2)]
    ref = [(int(a["index"]), int(b["index"])) for a, b in _par(two_dirs, length=30)]
    assert sorted(got) == sorted(ref) and len(got) == 30


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(stop=st.integers(1, 9), workers=st.sampled_from([(0, 2), (2, 0), (2, 1)]), length=st.sampled_from([None, 45]))
def test_resume_is_exact_with_any_worker_count(
    two_dirs: tuple[str, str], stop: int, workers: tuple[int, int], length: int | None
) -> None:
    w_before, w_after = workers

    def make(w: int) -> StreamingDataLoader:
        return StreamingDataLoader(_par(two_dirs, length=length), batch_size=3, num_workers=w)

    full = _pairs(list(make(0)))
    loader = make(w_before)
    seen: list[Any] = []
    for i, batch in enumerate(loader):
        seen.append(batch)
        if i + 1 == min(stop, len(loader) - 1):
            break
    state = loader.state_dict()
    resumed = make(w_after)
    resumed.load_state_dict(state)
    assert _pairs(seen) + _pairs(list(resumed)) == full


def _noisy_sum(samples: tuple[Any, ...], rngs: dict[str, Any]) -> dict[str, Any]:
    """A two-argument transform (module level: spawned workers must unpickle it)."""
    a, b = samples
    assert set(rngs) == {"random", "numpy", "torch"}
    noise = rngs["random"].random() + float(rngs["numpy"].random()) + float(torch.rand(1, generator=rngs["torch"]))
    return {"sum": int(a["index"]) + int(b["index"]), "noise": noise}


def test_transform_with_rngs_is_resumable_and_worker_independent(two_dirs: tuple[str, str]) -> None:
    transform = _noisy_sum

    def make(w: int, **kw: Any) -> StreamingDataLoader:
        return StreamingDataLoader(_par(two_dirs, length=24, transform=transform, **kw), batch_size=4, num_workers=w)

    def flat(batches: list[Any]) -> list[tuple[int, float]]:
        return [(int(s), float(n)) for b in batches for s, n in zip(b["sum"], b["noise"])]

    ref = flat(list(make(0)))
    assert flat(list(make(2))) == ref
    loader = make(0)
    it = iter(loader)
    head = [next(it), next(it)]
    resumed = make(2)
    resumed.load_state_dict(loader.state_dict())
    assert flat(head) + flat(list(resumed)) == ref
    # with resume=True a new epoch draws new numbers; reset_rngs=True draws the same in each epoch
    loader = make(0, resume=False)
    e1, e2 = flat(list(loader)), flat(list(loader))
    assert [s for s, _ in e1] == [s for s, _ in e2] and e1 != e2
    loader = make(0, resume=False, reset_rngs=True)
    assert flat(list(loader)) == flat(list(loader))


def test_one_argument_transform(two_dirs: tuple[str, str]) -> None:
    par = _par(two_dirs, shuffle=False, transform=lambda s: int(s[0]["index"]) * 10000 + int(s[1]["index"]))
    assert list(par)[:3] == [1000, 11001, 21002]


def test_state_mismatch_is_refused_unless_overridden(two_dirs: tuple[str, str]) -> None:
    loader = StreamingDataLoader(_par(two_dirs, length=30), batch_size=4)
    it = iter(loader)
    next(it)
    state = loader.state_dict()
    assert state["dataset"]["plan_state"]["batches_consumed"] == 1
    assert {"0", "1"} <= set(state["dataset"])  # LitData's per-dataset entries
    other = StreamingDataLoader(_par(two_dirs, length=31), batch_size=4)
    with pytest.raises(StateDictError, match="length"):
        other.load_state_dict(state)
    reseeded = StreamingDataLoader(
        ParallelStreamingDataset(
            [StreamingDataset(two_dirs[0], shuffle=True, seed=99), StreamingDataset(two_dirs[1], shuffle=True, seed=8)],
            length=30,
        ),
        batch_size=4,
    )
    with pytest.raises(StateDictError, match="seed"):
        reseeded.load_state_dict(state)
    forced = StreamingDataLoader(_par(two_dirs, length=31, force_override_state_dict=True), batch_size=4)
    forced.load_state_dict(state)
    assert len(_pairs(list(forced))) == 31  # restarts the saved epoch


def test_persistent_workers_follow_epochs(two_dirs: tuple[str, str]) -> None:
    loader = StreamingDataLoader(_par(two_dirs, length=20), batch_size=4, num_workers=2, persistent_workers=True)
    e1, e2 = _pairs(list(loader)), _pairs(list(loader))
    whole = _pairs(list(StreamingDataLoader(_par(two_dirs, length=40), batch_size=4)))
    assert e1 + e2 == whole


def test_bad_arguments(two_dirs: tuple[str, str]) -> None:
    ds = StreamingDataset(two_dirs[0])
    with pytest.raises(NotAStreamingDatasetError):
        ParallelStreamingDataset([ds, [1, 2, 3]])  # type: ignore[list-item]
    with pytest.raises(RuntimeError):  # LitData raises RuntimeError here too
        ParallelStreamingDataset([])
    for bad in (1.5, -1, "10", True):
        with pytest.raises(ValueError):
            ParallelStreamingDataset([ds], length=bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="1 or 2"):
        ParallelStreamingDataset([ds], transform=lambda a, b, c: a)
    with pytest.raises(DatasetError):
        StreamingDataLoader(ParallelStreamingDataset([ds], length=3), batch_size=4, drop_last=True)


def test_cached_dataset_prefetch_schedule_with_cycling(two_dirs: tuple[str, str], tmp_path: Any) -> None:
    """A compressed dataset reads through the chunk cache (prefetch schedule, leases released after last use)."""
    z = write_dataset(str(tmp_path / "z"), 15, lambda i: {"index": 1000 + i}, chunk_size=4, compression="zstd")

    def make(d: str, w: int) -> StreamingDataLoader:
        parts = [StreamingDataset(two_dirs[0], shuffle=True, seed=7), StreamingDataset(d, shuffle=True, seed=8)]
        for p in parts:
            p._cache_root = str(tmp_path / "cache")
        return StreamingDataLoader(ParallelStreamingDataset(parts, length=40), batch_size=4, num_workers=w)

    ref = _pairs(list(make(two_dirs[1], 0)))
    assert _pairs(list(make(z, 0))) == ref
    assert _pairs(list(make(z, 2))) == ref
