"""Chunk cache: atomic publish, leases across processes, eviction under a budget, live prefetch depth."""

from __future__ import annotations

import functools
import http.server
import multiprocessing as mp
import os
import threading
import time

import pytest

from streamscope._core import config
from streamscope._core.errors import ChunkDownloadError
from streamscope.cache.chunk_cache import ChunkCache, dataset_cache_dir, decompressed_name
from streamscope.cache.leases import LeaseTable, lease_path, live_lease_owners, process_leases
from streamscope.cache.prefetch import Prefetcher, live_depth
from streamscope.engine.dataloader import StreamingDataLoader
from streamscope.engine.dataset import StreamingDataset
from streamscope.format.index import load_index
from streamscope.storage import open_store
from tests.engine._data import write_dataset
from tests.support.tracing import clean_tracer  # noqa: F401
from tests.support.wait import until


def make_cache(src: str, cache_dir: str, budget: int | None, compression: str | None = None) -> ChunkCache:
    index = load_index(os.path.join(src, "index.json"))
    return ChunkCache(open_store(src), cache_dir, index["chunks"], compression, budget, LeaseTable())


@pytest.fixture
def src(tmp_path):
    return write_dataset(str(tmp_path / "src"), 60, chunk_size=10)


def test_names():
    assert decompressed_name("chunk-0-3.zstd.bin", "zstd") == "chunk-0-3.bin"
    assert decompressed_name("chunk-0-3.zstd:10.bin", "zstd:10") == "chunk-0-3.bin"
    assert decompressed_name("chunk-0-3.bin", None) == "chunk-0-3.bin"
    a = dataset_cache_dir("/c", "s3://b/x", "1.5")
    assert a != dataset_cache_dir("/c", "s3://b/x", "2.5") and a.startswith("/c/")


def test_acquire_publishes_complete_file_and_evicts_lru(src, tmp_path):
    size = sum(os.path.getsize(os.path.join(src, f"chunk-0-{i}.bin")) for i in (4, 5))
    cache = make_cache(src, str(tmp_path / "cache"), budget=size)
    paths = []
    for i in range(6):
        p = cache.acquire(i)
        assert os.path.getsize(p) == os.path.getsize(os.path.join(src, f"chunk-0-{i}.bin"))
        paths.append(p)
        time.sleep(0.01)
        cache.release(i)
    left = sorted(os.path.basename(p) for p, _, _ in cache.cached_files())
    assert left == ["chunk-0-4.bin", "chunk-0-5.bin"]  # least recently released went first
    assert not [f for f in os.listdir(cache.cache_dir) if ".tmp" in f or f.endswith(".lock")]


def test_leased_chunk_is_never_evicted(src, tmp_path):
    cache = make_cache(src, str(tmp_path / "cache"), budget=1)
    held = cache.acquire(0)
    for i in range(1, 4):
        cache.acquire(i)
        cache.release(i)
    assert os.path.exists(held)  # over budget, but leased
    assert [os.path.basename(p) for p, _, _ in cache.cached_files()] == ["chunk-0-0.bin"]
    cache.release(0)
    assert cache.cached_files() == []


def _hold_lease(path: str, ready, stop) -> None:
    t = LeaseTable()
    t.acquire(path)
    ready.set()
    stop.wait(30)
    t.release(path)


def test_lease_of_another_live_process_protects_and_dead_one_does_not(src, tmp_path):
    cache = make_cache(src, str(tmp_path / "cache"), budget=1)
    path = cache.acquire(0)
    cache.leases.release(path)  # this process no longer holds it
    ctx = mp.get_context("fork")
    ready, stop = ctx.Event(), ctx.Event()
    p = ctx.Process(target=_hold_lease, args=(path, ready, stop))
    p.start()
    try:
        assert ready.wait(10)
        assert live_lease_owners(path) == [p.pid]
        cache.evict()
        assert os.path.exists(path)  # the other process's lease protects it
    finally:
        stop.set()
        p.join(10)
    # a lease left by a process that died without releasing is stale: removed, chunk evicted
    with open(lease_path(path, p.pid), "wb"):
        pass
    assert live_lease_owners(path) == []
    cache.evict()
    assert not os.path.exists(path)


def test_missing_chunk_is_a_clear_error(src, tmp_path):
    os.remove(os.path.join(src, "chunk-0-2.bin"))
    cache = make_cache(src, str(tmp_path / "cache"), budget=10**9)
    with pytest.raises(ChunkDownloadError, match="chunk 2.*chunk-0-2.bin"):
        cache.acquire(2)
    assert cache.leases.held() == []
    with pytest.raises(FileNotFoundError, match="chunk 2.*chunk-0-2.bin"):  # a missing object stays one
        cache.acquire(2)


def test_prefetch_depth_is_live(src, tmp_path):
    cache = make_cache(src, str(tmp_path / "cache"), budget=10**9)
    config.set_value("prefetch_depth", 1)
    pf = Prefetcher(cache, list(range(6)), lambda: live_depth(2))  # the knob wins over the default 2
    try:
        pf.get(0)
        assert until(lambda: pf._next >= 2)
        time.sleep(0.3)  # time to go further, which it must not
        assert pf._next == 2  # the current chunk plus one ahead
        config.set_value("prefetch_depth", 4)
        assert until(lambda: pf._next >= 5)
        assert pf._next == 5
    finally:
        config.reset("prefetch_depth")
        pf.close()
    assert cache.leases.held() == []


@pytest.mark.parametrize("workers", [0, 2])
def test_compressed_dataset_small_budget_reads_everything(tmp_path, workers):
    d = write_dataset(str(tmp_path / "z"), 80, chunk_size=10, compression="zstd")
    chunk = os.path.getsize(os.path.join(d, "chunk-0-0.zstd.bin")) * 4
    ds = StreamingDataset(d, cache_dir=str(tmp_path / "cache"), shuffle=True, max_cache_size=chunk, max_pre_download=2)
    got = [i for b in StreamingDataLoader(ds, batch_size=6, num_workers=workers) for i in b["index"].tolist()]
    assert sorted(got) == list(range(80))
    cdir = dataset_cache_dir(str(tmp_path / "cache"), os.path.abspath(d), ds.updated_at)
    left = [f for f in os.listdir(cdir) if f.startswith("chunk-")]
    assert not [f for f in left if ".lease." in f]  # every lease released
    assert sum(os.path.getsize(os.path.join(cdir, f)) for f in left) <= max(ds.max_cache_size, 0) + 10 * 400


def test_a_leased_chunk_evicted_before_it_is_opened_is_fetched_again(tmp_path, monkeypatch):
    """Eviction checks the leases, then deletes: another process's eviction can delete a chunk this process
    leased in between. Simulated here: the first open of each cached chunk finds its file deleted."""
    from streamscope.engine.reader import ChunkReader

    d = write_dataset(str(tmp_path / "z"), 40, chunk_size=10, compression="zstd")
    ds = StreamingDataset(d, cache_dir=str(tmp_path / "cache"))
    opened = ChunkReader._open_file
    gone: list[str] = []

    def evicted_once(self, chunk, path, num_items):
        if path not in gone:
            gone.append(path)
            os.remove(path)  # the other process's delete, after this process's lease
        return opened(self, chunk, path, num_items)

    monkeypatch.setattr(ChunkReader, "_open_file", evicted_once)
    got = [i for b in StreamingDataLoader(ds, batch_size=4) for i in b["index"].tolist()]
    assert sorted(got) == list(range(40)) and len(gone) == 4
    assert all(os.path.exists(p) for p in gone)  # fetched again


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):  # noqa: D102
        pass


class _SlowQuiet(_Quiet):
    def do_GET(self):  # noqa: D102
        if "chunk-" in self.path:
            time.sleep(0.05)
        super().do_GET()


@pytest.fixture
def http_root(tmp_path):
    root = tmp_path / "www"
    root.mkdir()
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_SlowQuiet, directory=str(root)))
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield str(root), f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()


@pytest.mark.parametrize("workers", [0, 2])
def test_remote_dataset_over_http_with_eviction(http_root, tmp_path, workers):
    root, url = http_root
    write_dataset(os.path.join(root, "ds"), 70, chunk_size=10)
    size = os.path.getsize(os.path.join(root, "ds", "chunk-0-0.bin"))
    ds = StreamingDataset(f"{url}/ds", cache_dir=str(tmp_path / "cache"), shuffle=True, max_cache_size=3 * size)
    assert ds[33]["index"] == 33
    got = [i for b in StreamingDataLoader(ds, batch_size=5, num_workers=workers) for i in b["index"].tolist()]
    assert sorted(got) == list(range(70))
    cdir = dataset_cache_dir(str(tmp_path / "cache"), f"{url}/ds", ds.updated_at)
    chunks = [f for f in os.listdir(cdir) if f.startswith("chunk-") and f.endswith(".bin")]
    assert len(chunks) <= 3 + 1  # the budget, plus the chunk random access still holds


def _slow_on_worker_1(sample):
    from torch.utils.data import get_worker_info

    info = get_worker_info()
    if info is not None and info.id == 1:
        time.sleep(0.003)
    return sample


@pytest.mark.slow
def test_tiny_budget_slow_worker_never_loses_a_chunk(http_root, tmp_path):
    root, url = http_root
    write_dataset(os.path.join(root, "ds"), 120, chunk_size=10)
    # budget of 1 byte: every chunk not leased by someone is evicted at once
    ds = StreamingDataset(
        f"{url}/ds", cache_dir=str(tmp_path / "c"), shuffle=True, max_cache_size=1, transform=_slow_on_worker_1
    )
    for _ in range(2):  # two epochs: the second re-downloads what was evicted
        got = [i for b in StreamingDataLoader(ds, batch_size=5, num_workers=2) for i in b["index"].tolist()]
        assert sorted(got) == list(range(120))


@pytest.mark.usefixtures("clean_tracer")
def test_download_delete_read_are_traced(http_root, tmp_path):
    """(clean_tracer: a flusher left running by an earlier test in this process would take the events.)"""
    from streamscope import events as ev

    root, url = http_root
    write_dataset(os.path.join(root, "ds"), 40, chunk_size=10)
    cats = {"download", "delete", "read", "cache", "prefetch"}
    ev.drain()
    ev.ACTIVE.update(cats)
    try:
        ds = StreamingDataset(f"{url}/ds", cache_dir=str(tmp_path / "c"), max_cache_size=1)
        list(StreamingDataLoader(ds, batch_size=10))
    finally:
        ev.ACTIVE.difference_update(cats)
    events = ev.drain()
    downloads = [e for e in events if e[1] == "download" and e[0] == "E" and "chunk" in e[6]]  # chunk-level spans
    assert sorted(e[6]["chunk"] for e in downloads) == [0, 1, 2, 3]
    assert all(e[6]["bytes"] > 0 and e[6]["url"].startswith("http://127.0.0.1") for e in downloads)
    assert len([e for e in events if e[1] == "delete" and e[0] == "B"]) >= 3
    assert any(e[2] == "read" for e in events)
    assert [e for e in events if e[0] == "C" and e[1] == "cache_bytes"]


@pytest.mark.parametrize("workers", [0, 2])
def test_remote_missing_chunk_fails_fast_with_its_name(http_root, tmp_path, workers):
    root, url = http_root
    write_dataset(os.path.join(root, "ds"), 40, chunk_size=10)
    os.remove(os.path.join(root, "ds", "chunk-0-2.bin"))
    ds = StreamingDataset(f"{url}/ds", cache_dir=str(tmp_path / "c"))
    t0 = time.monotonic()
    with pytest.raises(Exception, match=r"chunk-0-2\.bin") as info:
        list(StreamingDataLoader(ds, batch_size=10, num_workers=workers))
    assert time.monotonic() - t0 < 20  # an error, not a wait for the 120 s chunk timeout
    assert "404" in str(info.value) or "not" in str(info.value).lower()


class _CountingStore:
    """A local store whose ``streaming_store()`` twin counts its downloads (what the prefetcher must use)."""

    def __init__(self, inner, name: str) -> None:
        self._inner, self.name, self.downloads = inner, name, 0
        self.url = inner.url
        self.twin: _CountingStore | None = None

    def local_path(self, key: str):
        return None  # behave like a network store: every chunk is downloaded

    def download_file(self, key: str, dest: str) -> int:
        self.downloads += 1
        return self._inner.download_file(key, dest)

    def streaming_store(self):
        if self.twin is None:
            self.twin = _CountingStore(self._inner, "streaming")
        return self.twin


def test_prefetcher_downloads_through_the_streaming_store_random_access_does_not(src, tmp_path):
    index = load_index(os.path.join(src, "index.json"))
    store = _CountingStore(open_store(src), "plain")
    cache = ChunkCache(store, str(tmp_path / "cache"), index["chunks"], None, 1 << 30, LeaseTable())
    cache.acquire(0)  # random access (ds[i]): the dataset's own store
    cache.release(0)
    assert store.downloads == 1 and store.twin is None
    pf = Prefetcher(cache, [1, 2, 3], lambda: 2)
    try:
        for pos in range(3):
            assert os.path.getsize(pf.get(pos)) == os.path.getsize(os.path.join(src, f"chunk-0-{pos + 1}.bin"))
            pf.release(pos)
    finally:
        pf.close()
    assert store.downloads == 1 and store.twin is not None and store.twin.downloads == 3


class _SlowCache:
    """A ChunkCache stand-in recording the order in which fetches start and end: chunk 0 takes ``slow`` seconds,
    or less when chunks 1 and 2 have both started meanwhile (so that an overlap is shown by order, not by time)."""

    def __init__(self, slow: float) -> None:
        self.slow, self.log, self.lock = slow, [], threading.Lock()
        self.both_started = threading.Event()

    def path(self, index: int) -> str:
        return f"/nowhere/{index}"

    def acquire(self, index: int, streaming: bool = False) -> str:
        with self.lock:
            self.log.append(("start", index))
            if {("start", 1), ("start", 2)} <= set(self.log):
                self.both_started.set()
        if index == 0:
            self.both_started.wait(self.slow)
        with self.lock:
            self.log.append(("done", index))
        return self.path(index)

    def release(self, index: int) -> None:
        pass


@pytest.mark.parametrize("head_first", [True, False])
def test_head_first_keeps_later_chunks_from_starting_while_the_reader_waits(head_first):
    config.set_value("prefetch_head_first", head_first)
    # head first: chunk 0 alone for its 0.4 s; not: chunk 0 holds until 1 and 2 start (20 s: only a hang reaches it)
    cache = _SlowCache(slow=0.4 if head_first else 20.0)
    pf = Prefetcher(cache, [0, 1, 2, 3], lambda: 2)  # type: ignore[arg-type]
    try:
        assert pf.get(0) == "/nowhere/0"
        for pos in (1, 2, 3):
            assert pf.get(pos) == f"/nowhere/{pos}"
    finally:
        pf.close()
        config.reset("prefetch_head_first")
    at = {e: i for i, e in enumerate(cache.log)}
    later = [at["start", c] for c in (1, 2)]
    if head_first:  # chunks 1 and 2 started only once chunk 0 was local
        assert min(later) > at["done", 0], cache.log
    else:  # they overlapped chunk 0 (depth 2, concurrency 4)
        assert max(later) < at["done", 0], cache.log


class _WatchingStore(_CountingStore):
    """Records the bytes of published chunks in the cache at the start of each download."""

    def __init__(self, inner, cache_dir: str) -> None:
        super().__init__(inner, "watching")
        self.cache_dir, self.seen = cache_dir, []

    def download_file(self, key: str, dest: str) -> int:
        names = [f for f in os.listdir(self.cache_dir) if f.endswith(".bin")]
        self.seen.append(sum(os.path.getsize(os.path.join(self.cache_dir, f)) for f in names))
        return super().download_file(key, dest)


def test_a_download_makes_room_before_it_starts(src, tmp_path):
    """The directory holds its budget while a chunk arrives: the published chunks plus the one under way never
    exceed max_cache_size (eviction first, then the download)."""
    index = load_index(os.path.join(src, "index.json"))
    sizes = [int(c["chunk_bytes"]) for c in index["chunks"]]
    budget = 2 * max(sizes)
    cdir = str(tmp_path / "cache")
    store = _WatchingStore(open_store(src), cdir)
    cache = ChunkCache(store, cdir, index["chunks"], None, budget, LeaseTable())
    for i in range(len(sizes)):
        cache.acquire(i)
        time.sleep(0.01)
        cache.release(i)
    assert len(store.seen) == len(sizes)
    assert all(seen + sizes[i] <= budget for i, seen in enumerate(store.seen)), (store.seen, budget)
    assert sum(size for _, size, _ in cache.cached_files()) <= budget


def test_no_budget_keeps_every_chunk(src, tmp_path):
    cache = make_cache(src, str(tmp_path / "cache"), budget=None)
    for i in range(6):
        cache.acquire(i)
        cache.release(i)
    assert len(cache.cached_files()) == 6 and cache.evict() == 0


def test_as_stored_keeps_the_download_beside_its_inflated_copy_and_evicts_both(tmp_path):
    pytest.importorskip("zstandard")
    src = write_dataset(str(tmp_path / "src"), 30, chunk_size=10, compression="zstd")
    index = load_index(os.path.join(src, "index.json"))
    names = [c["filename"] for c in index["chunks"]]
    assert all(n.endswith(".zstd.bin") for n in names)
    cdir = str(tmp_path / "cache")
    cache = ChunkCache(open_store("local:" + src), cdir, index["chunks"], "zstd", 1, LeaseTable(), as_stored=True)
    path = cache.acquire(0)
    assert sorted(os.listdir(cdir)) == sorted(
        [names[0], decompressed_name(names[0], "zstd"), os.path.basename(lease_path(path))]
    )
    stored_size = os.path.getsize(os.path.join(cdir, names[0]))
    assert cache.cached_files()[0][1] == os.path.getsize(path) + stored_size  # both count against the budget
    cache.release(0)
    assert os.listdir(cdir) == []  # over budget: the download and its inflated copy go together
    # the cache is the dataset's own folder: the stored file is used in place, nothing evicted without a budget
    inplace = ChunkCache(open_store(src), src, index["chunks"], "zstd", None, LeaseTable(), as_stored=True)
    before = set(os.listdir(src))
    path = inplace.acquire(1)
    inplace.release(1)
    assert set(os.listdir(src)) == before | {os.path.basename(path)}


def test_one_lease_table_per_process():
    table = process_leases()
    assert process_leases() is table
    ctx = mp.get_context("fork")
    q = ctx.SimpleQueue()
    p = ctx.Process(target=lambda: q.put(process_leases() is table))
    p.start()
    p.join(10)
    assert q.get() is False  # leases are per pid: a forked child builds its own
