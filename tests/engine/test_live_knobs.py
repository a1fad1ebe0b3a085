"""Live knobs reach running DataLoader workers: the main process moves prefetch depth, download concurrency and
the cache budget mid-epoch on the dataset's knob board, and every sample read after the change was read with the
new values (fork and spawn, persistent workers and not), while every sample is still read once, in order."""

from __future__ import annotations

import os
import time
from typing import Any

import pytest

from streamscope._core import config
from streamscope.engine.dataloader import StreamingDataLoader, join_worker_shutdowns
from tests.engine._data import write_dataset
from tests.engine._knob_probe import ProbeDataset

N = 96  # samples, 4 per chunk: each worker reads 12 chunks per epoch
BIG = 10**12


@pytest.fixture(autouse=True)
def _one_batch_per_message(monkeypatch: pytest.MonkeyPatch) -> Any:
    # a worker sends each batch as it is built (arenas of small batches would hold a whole epoch), so the loop
    # receives batches while the workers still read; set in the environment so spawned workers see it too
    monkeypatch.setenv("STREAMSCOPE_LOADER_GROUP_BYTES", "0")
    for name in config.live_names():
        for var in config.KNOBS[name].env:
            monkeypatch.delenv(var, raising=False)
    config.reset()
    yield
    config.reset()


def _cached_chunks(cache_root: str) -> list[str]:
    return [f for _, _, fs in os.walk(cache_root) for f in fs if f.endswith(".bin")]


def _epoch(loader: StreamingDataLoader, change: dict[str, Any], after_batch: int = 2) -> tuple[list[dict], int, int]:
    """One epoch; after ``after_batch`` batches the loop proposes ``change`` as the tuner would. Returns the
    samples and the monotonic times just before and just after the change."""
    samples: list[dict[str, Any]] = []
    t0 = t1 = 0
    for j, batch in enumerate(loader):
        samples.extend({k: int(v[i]) for k, v in batch.items()} for i in range(len(batch["index"])))
        if j == after_batch:
            t0 = time.monotonic_ns()
            for name, value in change.items():
                assert loader.knobs.propose(name, value, "test") is True
            t1 = time.monotonic_ns()
    return samples, t0, t1


def _check(samples: list[dict], t0: int, t1: int, before: dict[str, Any], after: dict[str, Any]) -> None:
    assert [s["index"] for s in samples] == list(range(N))  # once each, in order
    early = [s for s in samples if s["t"] < t0]
    late = [s for s in samples if s["t0"] > t1]
    assert early and late, "the change did not fall inside the epoch"
    for s in early:
        assert {k: s[k] for k in before} == before, s
    for s in late:
        assert {k: s[k] for k in after} == after, s  # every sample read after the change used the new values
    assert len({s["pid"] for s in late}) == 2  # both workers


@pytest.mark.parametrize("persistent", [False, True], ids=["one-epoch", "persistent"])
@pytest.mark.parametrize("method", ["fork", pytest.param("spawn", marks=pytest.mark.slow)])
def test_the_main_process_moves_knobs_inside_running_workers(tmp_path, method, persistent):
    d = write_dataset(str(tmp_path / "ds"), N, chunk_size=4, compression="zstd")  # read through the cache
    cache_root = str(tmp_path / "cache")
    ds = ProbeDataset(d, cache_dir=cache_root)
    ds.knobs.propose("prefetch_depth", 1)
    ds.knobs.propose("download_concurrency", 1)
    ds.knobs.propose("max_cache_size", BIG)
    ds.knobs.set("prefetch_head_first", True)  # the user's: pinned
    loader = StreamingDataLoader(
        ds, batch_size=4, num_workers=2, multiprocessing_context=method, persistent_workers=persistent
    )
    first = {"prefetch_depth": 6, "download_concurrency": 3, "max_cache_size": 0}
    samples, t0, t1 = _epoch(loader, first)
    assert loader.knobs.propose("prefetch_head_first", False) is False  # never moves what the user set
    _check(
        samples,
        t0,
        t1,
        {"depth": 1, "concurrency": 1, "budget": BIG, "head_first": 1},
        {"depth": 6, "concurrency": 3, "budget": 0, "head_first": 1},
    )
    # what the workers did with the values: one chunk ahead before, deeper after (on more fetch threads)
    assert max(s["ahead"] for s in samples if s["t"] < t0) <= 1
    assert max(s["ahead"] for s in samples if s["t0"] > t1) > 1
    assert max(s["threads"] for s in samples if s["t0"] > t1) == 3
    # and the workers evicted under the new budget: nothing stays cached once their leases are dropped
    deadline = time.monotonic() + 20
    while _cached_chunks(cache_root) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _cached_chunks(cache_root) == []

    # the next epoch (the same workers, or new ones) starts from the board and follows a second change
    samples, t0, t1 = _epoch(loader, {"prefetch_depth": 2, "download_concurrency": 2}, after_batch=3)
    _check(samples, t0, t1, {"depth": 6, "concurrency": 3}, {"depth": 2, "concurrency": 2})
    del loader
    join_worker_shutdowns()


def test_config_set_value_in_the_main_process_reaches_the_workers_and_pins(tmp_path):
    d = write_dataset(str(tmp_path / "ds"), N, chunk_size=4, compression="zstd")
    ds = ProbeDataset(d, cache_dir=str(tmp_path / "cache"), max_pre_download=3)  # given: pinned
    loader = StreamingDataLoader(ds, batch_size=4, num_workers=2)
    assert loader.knobs.pinned("prefetch_depth") and loader.knobs.propose("prefetch_depth", 9) is False
    samples: list[dict[str, Any]] = []
    t0 = t1 = 0
    for j, batch in enumerate(loader):
        samples.extend({k: int(v[i]) for k, v in batch.items()} for i in range(len(batch["index"])))
        if j == 2:
            t0 = time.monotonic_ns()
            config.set_value("download_concurrency", 2)  # the user's, in code: every board of this process
            t1 = time.monotonic_ns()
    _check(samples, t0, t1, {"depth": 3, "concurrency": 4}, {"depth": 3, "concurrency": 2})
    assert loader.knobs.pinned("download_concurrency")
    assert loader.knobs.propose("download_concurrency", 8) is False


def test_a_combination_moves_the_knobs_of_every_member_in_the_workers(tmp_path):
    from streamscope.engine.combined import CombinedStreamingDataset

    dirs = [
        write_dataset(
            str(tmp_path / f"ds{m}"), 48, lambda i, m=m: {"index": 1000 * m + i}, chunk_size=4, compression="zstd"
        )
        for m in range(2)
    ]

    def loader(tag: str) -> StreamingDataLoader:
        members = [ProbeDataset(d, cache_dir=str(tmp_path / f"cache-{tag}")) for d in dirs]
        combo = CombinedStreamingDataset(members, seed=3)
        combo.knobs.propose("prefetch_depth", 1)
        return StreamingDataLoader(combo, batch_size=4, num_workers=2)

    reference = [s["index"] for s in _epoch(loader("ref"), {})[0]]
    moved = loader("moved")
    samples, t0, t1 = _epoch(moved, {"prefetch_depth": 5})
    assert [s["index"] for s in samples] == reference and sorted(reference) == sorted(
        [i for i in range(48)] + [1000 + i for i in range(48)]
    )
    assert all(s["depth"] == 1 for s in samples if s["t"] < t0)
    late = [s for s in samples if s["t0"] > t1]
    assert late and all(s["depth"] == 5 for s in late)
    assert {s["index"] // 1000 for s in late} == {0, 1}  # both members' readers
    assert [b.value("prefetch_depth") for b in moved.knobs.boards] == [5, 5]
