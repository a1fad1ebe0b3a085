"""engine/observer.py: the loader calls its observer at four points and records nothing itself."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from streamscope.engine import observer
from streamscope.engine.dataloader import StreamingDataLoader
from streamscope.engine.dataset import StreamingDataset
from tests.engine._data import write_dataset

N = 53  # 7 batches of 8 (the last of 5)


@pytest.fixture(scope="module")
def ds_dir(tmp_path_factory):
    return write_dataset(str(tmp_path_factory.mktemp("obs") / "ds"), N, chunk_size=10)


def _ids(batches: list[Any]) -> list[list[int]]:
    return [b["index"].tolist() for b in batches]


class _Logged:
    """An observer that records nothing but the calls the loader makes (the protocol's order)."""

    def __init__(self, log: list[Any]) -> None:
        self.log = log
        self.ticket = None
        self.count_bytes = False

    # LoaderObserver
    def begin(self, workers: int, persistent: bool, reuse: bool, context: Any, tuned: bool) -> _Logged:
        self.log.append(("begin", workers, persistent, reuse))
        return self

    # Iteration
    def start_workers(self, start: Callable[[], Iterator[Any]]) -> Iterator[Any]:
        self.log.append("start_workers")
        return start()

    def epoch(self, it: Iterator[Any], reorder: Any, epoch: int, rank: int, batches: int, workers: int) -> _Logged:
        self.log.append(("epoch", epoch, batches, workers))
        return self

    def __enter__(self) -> _Logged:
        self.log.append("enter")
        return self

    def __exit__(self, *exc: Any) -> None:
        self.log.append(("exit", exc[0].__name__ if exc[0] is not None else None))

    @property
    def delivered(self) -> Callable[[int], None]:
        return lambda j: self.log.append(("delivered", j))

    def fetch(self, it: Iterator[Any]) -> Any:
        self.log.append("fetch")
        return next(it)

    def take(self, parcel: Any) -> None:
        self.log.append("take")

    def settled(self) -> bool:
        return True

    def end(self, done: bool) -> Callable[[list[int | None]], None]:
        self.log.append(("end", done))
        return lambda pids: self.log.append(("settle", len(pids)))


def test_the_loader_calls_its_observer_in_the_protocols_order(ds_dir, monkeypatch):
    log: list[Any] = []
    monkeypatch.setattr(observer, "_factory", lambda loader: _Logged(log))
    dl = StreamingDataLoader(StreamingDataset(ds_dir), batch_size=8)
    assert len(list(dl)) == 7
    assert log[:5] == [("begin", 0, False, False), "start_workers", ("epoch", 1, 7, 0), "enter", "fetch"]
    assert [e[1] for e in log if e[0] == "delivered"] == list(range(7))
    assert log.count("fetch") == 8  # one per batch, then the end of the iterator
    assert log[-2:] == [("exit", None), ("end", False)]  # without workers the loop runs to the iterator's end
    log.clear()
    it = iter(dl)
    next(it)
    it.close()  # the loop leaves during batch 0: delivered(0) all the same, then the end
    assert ("delivered", 0) in log and log[-2:] == [("exit", "GeneratorExit"), ("end", False)]


def test_a_loader_with_workers_ends_done_and_settles_once_they_exited(ds_dir, monkeypatch):
    log: list[Any] = []
    monkeypatch.setattr(observer, "_factory", lambda loader: _Logged(log))
    dl = StreamingDataLoader(StreamingDataset(ds_dir), batch_size=8, num_workers=2)
    assert len(list(dl)) == 7
    assert log[0] == ("begin", 2, False, False) and ("end", True) in log
    from streamscope.engine.dataloader import join_worker_shutdowns

    assert join_worker_shutdowns(60)
    assert log[-1] == ("settle", 2)  # after the workers' join, with their pids


@pytest.mark.parametrize("workers", [0, 2])
def test_a_loader_nobody_observes_reads_and_resumes_as_an_observed_one(ds_dir, monkeypatch, workers):
    ref = _ids(list(StreamingDataLoader(StreamingDataset(ds_dir, shuffle=True, seed=5), batch_size=8)))
    monkeypatch.setattr(observer, "_factory", lambda loader: observer.NOOP)
    dl = StreamingDataLoader(StreamingDataset(ds_dir, shuffle=True, seed=5), batch_size=8, num_workers=workers)
    assert dl._observer is observer.NOOP
    it = iter(dl)
    first = _ids([next(it), next(it)])
    state = dl.state_dict()
    it.close()
    again = StreamingDataLoader(StreamingDataset(ds_dir, shuffle=True, seed=5), batch_size=8, num_workers=workers)
    again.load_state_dict(state)
    assert first + _ids(list(again)) == ref


def test_the_engine_imports_no_runtime():
    code = (
        "import sys, streamscope.engine.dataloader, streamscope.engine.observer; "
        "print(sorted(m for m in sys.modules if m.startswith('streamscope.recording')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True)
    assert out.stdout.strip() == "[]", out.stdout
