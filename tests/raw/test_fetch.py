"""Hedged and ranged GETs, retries: a local folder served through a store that behaves like a remote one.

The store below is the storage layer's real LocalStore with injected latency and failures (the S3 tests in
test_s3.py use the real server and fault proxy once the storage fixtures are available).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from streamscope import events as ev
from streamscope._core.errors import RawDownloadError, RawDownloadTimeoutError, RawFileSizeError, StorageError
from streamscope.raw import StreamingRawDataset
from streamscope.storage import LocalStore
from tests.raw.conftest import content, file_id, make_folder


class FlakyStore(LocalStore):
    """Slow first GET per key (``slow_s``), or held until ``hold`` is set (at most a minute); the first
    ``fail_first`` GETs of each key fail, short reads."""

    def __init__(
        self,
        root: str,
        slow_s: float = 0.0,
        fail_first: int = 0,
        short_keys: frozenset[str] = frozenset(),
        hold: threading.Event | None = None,
    ):
        super().__init__(root)
        self.slow_s = slow_s
        self.hold = hold
        self.held = 0  # first GETs waiting for ``hold`` now
        self.fail_first = fail_first
        self.short_keys = short_keys
        self.calls: list[tuple[str, int, int | None]] = []
        self._seen: dict[str, int] = {}
        self._lock = threading.Lock()

    def _hit(self, key: str, start: int, end: int | None) -> None:
        with self._lock:
            self.calls.append((key, start, end))
            n = self._seen[key] = self._seen.get(key, 0) + 1
            first = n == 1
        if n <= self.fail_first:
            raise StorageError(f"injected failure on {key}")
        if first and self.slow_s:
            time.sleep(self.slow_s)
        if first and self.hold is not None:
            with self._lock:
                self.held += 1
            self.hold.wait(60)
            with self._lock:
                self.held -= 1

    def get(self, key: str) -> bytes:
        self._hit(key, 0, None)
        data = super().get(key)
        return data[: len(data) // 2] if key in self.short_keys else data

    def get_range(self, key: str, start: int, end: int) -> bytes:
        self._hit(key, start, end)
        return super().get_range(key, start, end)


def as_remote(ds: StreamingRawDataset, store: FlakyStore) -> FlakyStore:
    """Serve ``ds`` through ``store`` and treat it as remote (hedging and ranges apply only to remote objects)."""
    for src in (ds.source, ds.fetcher.source):
        src.is_remote = True
        src._store = store
        src._store_pid = os.getpid()
    return store


def test_hedge_fires_and_wins(tmp_path: Path):
    """The duplicates answer while the first GETs are provably stuck (held until the end), not after them."""
    data = make_folder(tmp_path, 4, size=100)
    ds = StreamingRawDataset(str(data), cache_dir=str(tmp_path / "c"), hedge_delay=0.05, max_prefetch=0)
    hold = threading.Event()
    store = as_remote(ds, FlakyStore(str(data.resolve()), hold=hold))
    ev.ACTIVE.add("download")
    try:
        assert [file_id(b) for b in ds.__getitems__([0, 1])] == [0, 1]
        assert store.held == 2 and not hold.is_set()  # both first GETs still waiting: the duplicates answered
        events = ev.drain()
    finally:
        ev.ACTIVE.discard("download")
        hold.set()
    assert ds.stats()["hedges_fired"] == 2 and ds.stats()["hedges_won"] == 2
    assert len(store.calls) == 4
    states = sorted(e[6]["state"] for e in events if e[1] == "hedge")
    assert states == ["fired", "fired", "won", "won"]


def test_no_hedge_when_fast_or_disabled(tmp_path: Path):
    data = make_folder(tmp_path, 4, size=100)
    # a hedge delay no local GET takes, however busy the machine: "fast" is a fact here, not a race
    ds = StreamingRawDataset(str(data), cache_dir=str(tmp_path / "c"), hedge_delay=30.0, max_prefetch=0)
    store = as_remote(ds, FlakyStore(str(data.resolve())))
    ds.__getitems__([0, 1, 2])
    assert ds.stats()["hedges_fired"] == 0 and len(store.calls) == 3
    ds2 = StreamingRawDataset(str(data), cache_dir=str(tmp_path / "c"), max_prefetch=0)
    store2 = as_remote(ds2, FlakyStore(str(data.resolve()), slow_s=0.2))
    ds2.__getitems__([0])
    assert ds2.stats()["hedges_fired"] == 0 and len(store2.calls) == 1


def test_ranged_parallel_gets(tmp_path: Path):
    data = make_folder(tmp_path, 3, size=10_000)
    ds = StreamingRawDataset(
        str(data), cache_dir=str(tmp_path / "c"), range_parallel_threshold=5000, range_chunk_size=3000, max_prefetch=0
    )
    store = as_remote(ds, FlakyStore(str(data.resolve())))
    assert ds[1] == content(1, 10_000)
    assert sorted((s, e) for _, s, e in store.calls) == [(0, 3000), (3000, 6000), (6000, 9000), (9000, 10_000)]


def test_store_error_names_file(tmp_path: Path):
    data = make_folder(tmp_path, 2, size=50)
    ds = StreamingRawDataset(str(data), cache_dir=str(tmp_path / "c"), max_prefetch=0)
    as_remote(ds, FlakyStore(str(data.resolve()), fail_first=99))
    with pytest.raises(RawDownloadError, match=r"f00001\.bin.*injected failure"):
        ds[1]


def test_short_remote_read_is_an_error(tmp_path: Path):
    data = make_folder(tmp_path, 2, size=50)
    ds = StreamingRawDataset(str(data), cache_dir=str(tmp_path / "c"), max_prefetch=0)
    as_remote(ds, FlakyStore(str(data.resolve()), short_keys=frozenset({"f00000.bin"})))
    with pytest.raises(RawFileSizeError, match="f00000.bin"):
        ds[0]


def test_batch_timeout(tmp_path: Path):
    data = make_folder(tmp_path, 2, size=50)
    ds = StreamingRawDataset(str(data), cache_dir=str(tmp_path / "c"), max_prefetch=0, download_timeout=0.2)
    hold = threading.Event()  # the GETs answer only after the timeout has been raised, however busy the machine
    as_remote(ds, FlakyStore(str(data.resolve()), hold=hold))
    try:
        with pytest.raises(RawDownloadTimeoutError, match="f0000"):
            ds.__getitems__([0, 1])
    finally:
        hold.set()


def test_cache_files_publish_and_reuse(tmp_path: Path):
    data = make_folder(tmp_path, 5, size=70)
    cache = str(tmp_path / "c")
    ds = StreamingRawDataset(str(data), cache_dir=cache, cache_files=True, max_prefetch=0)
    store = as_remote(ds, FlakyStore(str(data.resolve())))
    assert ds[2] == content(2, 70)
    cached = ds.fetcher.cached_path("f00002.bin")
    assert cached is not None and Path(cached).read_bytes() == content(2, 70)
    assert not [n for n in os.listdir(os.path.dirname(cached)) if ".tmp." in n]
    assert ds[2] == content(2, 70)
    assert len(store.calls) == 1  # the second read came from the cache
    pds = StreamingRawDataset(str(data), cache_dir=cache, cache_files=True, item_type="path", max_prefetch=0)
    store2 = as_remote(pds, FlakyStore(str(data.resolve())))
    assert pds[2] == cached and len(store2.calls) == 0
    p3 = pds[3]
    assert p3.startswith(ds.cache_dir) and Path(p3).read_bytes() == content(3, 70) and len(store2.calls) == 1
    Path(cached).write_bytes(b"trunc")  # a short cached copy is fetched again, not served
    assert ds[2] == content(2, 70)


def test_sweep_orphans_of_dead_processes(tmp_path: Path):
    import subprocess
    import sys

    from streamscope.raw.fetch import sweep_orphans

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead_pid = int(dead.stdout)
    (tmp_path / "sub").mkdir()
    orphan = tmp_path / "sub" / f"a.bin.tmp.{dead_pid}.1.abcd"
    mine = tmp_path / f"b.bin.tmp.{os.getpid()}.1.abcd"
    fresh = tmp_path / f"c.bin.tmp.{dead_pid}.1.abcd"
    for p in (orphan, mine, fresh):
        p.write_bytes(b"partial")
    old = time.time() - 3600
    os.utime(orphan, (old, old))
    os.utime(mine, (old, old))
    assert sweep_orphans(str(tmp_path)) == 1
    assert not orphan.exists() and mine.exists() and fresh.exists()


class GatedStore(FlakyStore):
    """GETs of the keys in ``gates`` wait until their event is set."""

    def __init__(self, root: str, gates: dict[str, threading.Event]) -> None:
        super().__init__(root)
        self.gates = gates
        self.answered: set[str] = set()

    def get(self, key: str) -> bytes:
        self._hit(key, 0, None)
        gate = self.gates.get(key)
        if gate is not None:
            assert gate.wait(60), f"gate of {key} never opened"
        data = LocalStore.get(self, key)
        with self._lock:
            self.answered.add(key)
        return data


def _until(what: Callable[[], bool], seconds: float = 20.0) -> bool:
    """Poll ``what`` until it holds or ``seconds`` pass (a deadline for a busy machine, not a speed limit)."""
    deadline = time.monotonic() + seconds
    while not what():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def _requested(store: FlakyStore) -> set[int]:
    with store._lock:
        return {int(k.rsplit("f", 1)[1].split(".")[0]) for k, _, _ in store.calls}


@pytest.mark.parametrize("when_left", [-1, 1000])
def test_lookahead_starts_near_the_end_of_the_batch(tmp_path: Path, when_left: int):
    from streamscope._core import config

    data = make_folder(tmp_path, 16, size=100)
    ds = StreamingRawDataset(str(data), cache_dir=str(tmp_path / "c"), max_prefetch=4, max_concurrent_downloads=16)
    keys = sorted(ds.source.key_of(f.path) for f in ds.files)
    gates = {k: threading.Event() for k in keys[:8]}
    store = as_remote(ds, GatedStore(str(data.resolve()), gates))
    config.set_value("raw_lookahead_when_left", when_left)
    out: list[list[bytes]] = []
    worker = threading.Thread(target=lambda: out.append(ds.__getitems__(list(range(8)))))
    try:
        worker.start()
        for k in keys[:4]:  # 8 -> 4 still in flight
            gates[k].set()
        # -1 (depth 4): the look-ahead (items 8-11) goes out once at most 4 of the batch are in flight; 1000: at once
        assert _until(lambda: {8, 9, 10, 11} <= _requested(store))
        assert worker.is_alive() and not out  # while 4 of the batch are still held
    finally:
        for g in gates.values():
            g.set()
        worker.join(10)
        config.reset("raw_lookahead_when_left")
    assert [file_id(b) for b in out[0]] == list(range(8))
    assert sorted(ds._ahead) == [8, 9, 10, 11]


def test_lookahead_waits_while_most_of_the_batch_is_in_flight(tmp_path: Path):
    data = make_folder(tmp_path, 16, size=100)
    ds = StreamingRawDataset(str(data), cache_dir=str(tmp_path / "c"), max_prefetch=4, max_concurrent_downloads=16)
    keys = sorted(ds.source.key_of(f.path) for f in ds.files)
    gates = {k: threading.Event() for k in keys[:8]}
    store = as_remote(ds, GatedStore(str(data.resolve()), gates))
    out: list[list[bytes]] = []
    worker = threading.Thread(target=lambda: out.append(ds.__getitems__(list(range(8)))))
    try:
        worker.start()
        for k in keys[:3]:  # 5 of 8 still in flight: more than the depth of 4
            gates[k].set()
        assert _until(lambda: set(keys[:3]) <= store.answered and set(range(8)) <= _requested(store))
        time.sleep(0.3)  # time for a look-ahead that should not start, once the three have answered
        assert _requested(store) == set(range(8))  # the batch only, no look-ahead yet
        gates[keys[3]].set()  # 4 left: the look-ahead starts while they are still in flight
        assert _until(lambda: {8, 9, 10, 11} <= _requested(store))
        assert worker.is_alive()
    finally:
        for g in gates.values():
            g.set()
        worker.join(10)
    assert [file_id(b) for b in out[0]] == list(range(8))


def test_countdown_settles_at_the_mark_or_on_failure():
    from concurrent.futures import Future

    from streamscope.raw.runtime import countdown

    futs: list[Future[int]] = [Future() for _ in range(5)]
    mark = countdown(futs, 2)
    futs[0].set_result(0)
    futs[1].set_result(1)
    assert not mark.done()
    futs[2].set_result(2)
    assert mark.done() and mark.result() is None
    failing: list[Future[int]] = [Future() for _ in range(5)]
    mark = countdown(failing, 0)
    failing[3].set_exception(ValueError("x"))
    assert mark.done()
    assert countdown([], 0).done()
