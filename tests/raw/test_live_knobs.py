"""Live knobs of raw-file streaming reach running DataLoader workers: the main process moves the GET limit, the
look-ahead depth and the look-ahead point mid-epoch on the dataset's knob board, and every batch fetched after
the change used the new values (fork and spawn, persistent workers and not); every file still arrives once, in
order."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from torch.utils.data import DataLoader

from streamscope._core import config
from tests.raw._knob_probe import ProbeRaw, as_list
from tests.raw.conftest import file_id, make_folder

N = 64


@pytest.fixture(autouse=True)
def _pooled_path_in_every_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    # local files take the pooled path (the one the knobs drive) in spawned workers too
    monkeypatch.setenv("STREAMSCOPE_RAW_LOCAL_INLINE_S", "0")
    for name in config.live_names():
        for var in config.KNOBS[name].env:
            monkeypatch.delenv(var, raising=False)


def _epoch(loader: DataLoader, change: dict[str, Any]) -> tuple[list[tuple[int, dict]], int, int]:
    got: list[tuple[int, dict[str, Any]]] = []
    t0 = t1 = 0
    for j, batch in enumerate(loader):
        got.extend((file_id(item), probe) for item, probe in batch)
        if j == 1:
            t0 = time.monotonic_ns()
            for name, value in change.items():
                assert loader.dataset.knobs.propose(name, value, "test") is True
            t1 = time.monotonic_ns()
    return got, t0, t1


def _check(got: list[tuple[int, dict]], t0: int, t1: int, before: dict[str, Any], after: dict[str, Any]) -> None:
    assert [i for i, _ in got] == list(range(N))  # once each, in order
    early = [p for _, p in got if p["t"] < t0]
    late = [p for _, p in got if p["t0"] > t1]  # batches begun after the change
    assert early and late, "the change did not fall inside the epoch"
    for p in early:
        assert {k: p[k] for k in before} == before, p
    for p in late:
        assert {k: p[k] for k in after} == after, p
    assert len({p["pid"] for p in late}) == 2  # both workers


@pytest.mark.parametrize("persistent", [False, True], ids=["one-epoch", "persistent"])
@pytest.mark.parametrize("method", ["fork", pytest.param("spawn", marks=pytest.mark.slow)])
def test_the_main_process_moves_raw_knobs_inside_running_workers(tmp_path: Path, method, persistent):
    ds = ProbeRaw(str(make_folder(tmp_path, N)), cache_dir=str(tmp_path / "cache"))
    assert not ds.knobs.pinned("raw_concurrency") and not ds.knobs.pinned("raw_prefetch")
    ds.knobs.propose("raw_concurrency", 3)
    ds.knobs.propose("raw_prefetch", 2)
    loader = DataLoader(
        ds,
        batch_size=4,
        num_workers=2,
        collate_fn=as_list,
        multiprocessing_context=method,
        persistent_workers=persistent,
    )
    change = {"raw_concurrency": 5, "raw_prefetch": 6, "raw_lookahead_when_left": 1}
    got, t0, t1 = _epoch(loader, change)
    _check(
        got,
        t0,
        t1,
        {"concurrency": 3, "limit": 3, "prefetch": 2, "when_left": -1},
        {"concurrency": 5, "limit": 5, "prefetch": 6, "when_left": 1},
    )
    # raw_concurrency back to 0: each worker's own latency-driven limit again (local files: the size-based one)
    got, t0, t1 = _epoch(loader, {"raw_concurrency": 0, "raw_prefetch": 1})
    _check(got, t0, t1, {"concurrency": 5, "prefetch": 6}, {"prefetch": 1})
    assert all(p["concurrency"] not in (0, 5) for _, p in got if p["t0"] > t1)


def test_a_raw_argument_pins_its_knob(tmp_path: Path):
    ds = ProbeRaw(str(make_folder(tmp_path, 8)), cache_dir=str(tmp_path / "cache"), max_concurrent_downloads=3)
    assert ds.knobs.pinned("raw_concurrency") and ds.knobs.propose("raw_concurrency", 9) is False
    assert ds.concurrency() == 3
    ds2 = ProbeRaw(str(make_folder(tmp_path / "b", 8)), cache_dir=str(tmp_path / "cache"), max_prefetch=4)
    assert ds2.knobs.pinned("raw_prefetch") and ds2.knobs.propose("raw_prefetch", 9) is False
    assert not ds2.knobs.pinned("raw_concurrency") and ds2.knobs.propose("raw_concurrency", 9) is True
