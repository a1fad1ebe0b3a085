"""Knob boards in the cache layer: every change is a tune event; the prefetcher and the cache's eviction read
their knobs from the board."""

from __future__ import annotations

import os
import threading
import time
from typing import Any

import pytest

from streamscope import events as ev
from streamscope._core import config
from streamscope.cache.chunk_cache import ChunkCache
from streamscope.cache.knobs import new_board
from streamscope.cache.leases import LeaseTable
from streamscope.cache.prefetch import Prefetcher
from streamscope.format.index import load_index
from streamscope.storage import open_store
from tests.engine._data import write_dataset
from tests.support.tracing import clean_tracer  # noqa: F401
from tests.support.wait import until


@pytest.fixture(autouse=True)
def _clean(monkeypatch: pytest.MonkeyPatch) -> Any:
    for name in config.live_names():
        for var in config.KNOBS[name].env:
            monkeypatch.delenv(var, raising=False)
    config.reset()
    yield
    config.reset()


def _tune(events: list[Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [(e[0], e[1], e[6]) for e in events if e[2] == "tune"]


@pytest.mark.usefixtures("clean_tracer")
def test_every_value_change_is_a_tune_event():
    ev.ACTIVE.add("tune")
    try:
        board = new_board({"prefetch_depth": (2, False, "max_pre_download")})
        ev.drain()
        assert board.propose("prefetch_depth", 6, "downloads wait") is True
        board.propose("prefetch_depth", 6)  # no change: no event
        board.set("download_concurrency", 7)  # the user's (as config.set_value does it on every board)
        assert board.propose("download_concurrency", 2) is False  # refused: no event
        board.restore("download_concurrency")
        events = _tune(ev.drain())
    finally:
        ev.ACTIVE.discard("tune")
    default = config.KNOBS["download_concurrency"].value_default
    assert events == [
        (
            "I",
            "prefetch_depth",
            {"knob": "prefetch_depth", "old": 2, "new": 6, "source": "tuner", "reason": "downloads wait"},
        ),
        ("I", "download_concurrency", {"knob": "download_concurrency", "old": default, "new": 7, "source": "user"}),
        ("I", "download_concurrency", {"knob": "download_concurrency", "old": 7, "new": default, "source": "user"}),
    ]


def test_no_event_is_recorded_while_the_category_is_off():
    ev.ACTIVE.discard("tune")
    ev.drain()
    board = new_board()
    board.propose("raw_prefetch", 3)
    assert _tune(ev.drain()) == []


def _cache(tmp_path: Any, budget: Any) -> ChunkCache:
    src = write_dataset(str(tmp_path / "src"), 60, chunk_size=10)
    index = load_index(os.path.join(src, "index.json"))
    return ChunkCache(open_store(src), str(tmp_path / "cache"), index["chunks"], None, budget, LeaseTable())


def test_eviction_follows_a_live_budget(tmp_path):
    board = new_board({"max_cache_size": (10**12, False, "max_cache_size")})
    cache = _cache(tmp_path, board.reader("max_cache_size"))
    for c in range(6):
        cache.acquire(c)
        cache.release(c)
    assert len(cache.cached_files()) == 6 and cache.max_cache_size == 10**12
    one = cache.cached_files()[0][1]
    board.propose("max_cache_size", 2 * one)
    assert cache.max_cache_size == 2 * one
    cache.acquire(0)
    cache.release(0)  # the next release evicts under the new budget
    assert sum(size for _, size, _ in cache.cached_files()) <= 2 * one


class _SlowCache:
    """A cache whose chunks take a while, recording when each fetch started."""

    def __init__(self) -> None:
        self.started: dict[int, float] = {}
        self.lock = threading.Lock()

    def path(self, index: int) -> str:
        return f"/nowhere/{index}"

    def acquire(self, index: int, streaming: bool = False) -> str:
        with self.lock:
            self.started[index] = time.monotonic()
        time.sleep(0.05)
        return self.path(index)

    def release(self, index: int) -> None:
        pass


@pytest.mark.usefixtures("clean_tracer")
def test_the_prefetcher_reads_its_knobs_from_the_board_and_says_when_it_sees_a_change():
    board = new_board({"prefetch_depth": (1, False, "max_pre_download")})
    board.propose("download_concurrency", 1)
    ev.ACTIVE.add("tune")
    cache = _SlowCache()
    pf = Prefetcher(cache, list(range(12)), board.reader("prefetch_depth"), board)  # type: ignore[arg-type]
    try:
        pf.get(0)
        assert until(lambda: pf._next >= 2)
        time.sleep(0.3)  # time to go further, which it must not
        assert pf._next == 2 and len(pf._threads) == 1  # one chunk ahead, one thread
        ev.drain()
        board.propose("prefetch_depth", 8)
        board.propose("download_concurrency", 4)
        pf.get(1)  # the reader's next chunk: the fetch threads look at the board again
        assert until(lambda: pf._next >= 10)
        assert pf._next == 10 and len(pf._threads) == 4
        seen = [f for ph, name, f in _tune(ev.drain()) if name == "knobs_seen"]
    finally:
        ev.ACTIVE.discard("tune")
        pf.close()
    assert seen and seen[-1] == {"prefetch_depth": 8, "download_concurrency": 4, "prefetch_head_first": True}
