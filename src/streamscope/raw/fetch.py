"""Getting one raw file's bytes (or a local path to it): retries, size check, hedging, ranged GETs, cache.

Everything here is started through the per-process :mod:`~streamscope.raw.runtime` and returns futures, so a
batch's files are in flight together. The pieces:

* :meth:`Fetcher.start` — one file → ``Future[bytes]`` (or ``Future[str]`` for ``item_type="path"``).
* A plain GET runs in one pool task (:meth:`Fetcher._get_checked`); retries are the storage layer's
  (``streamscope.storage.retry``, ``storage_*`` knobs), each attempt traced there as a ``download`` span.
* Objects at or above ``range_parallel_threshold`` (remote only) are fetched as parallel ``get_range`` parts
  of ``range_chunk_size`` bytes, each its own task with its own retries, joined in order.
* Hedging (remote, ``hedge_delay > 0``, size below ``raw_hedge_max_bytes``): :class:`Hedge` holds the
  primary GET; whoever waits on the batch calls :meth:`Hedge.maybe_fire` once the delay has passed, which
  starts one duplicate GET. The first success wins; the loser's bytes are dropped.
* ``cache_files=True``: a file already under the cache folder with its indexed size is read from there;
  otherwise it is fetched and published there atomically (unique tmp name, then rename), so concurrent
  processes never see a half-written file.
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections import deque
from concurrent.futures import Future
from typing import Any

from streamscope import events as ev
from streamscope._core import config
from streamscope._core.errors import (
    InvalidRangeError,
    ObjectNotFoundError,
    RawDownloadError,
    RawFileSizeError,
    RawSourceNotFoundError,
    StorageError,
)
from streamscope._core.procs import pid_alive
from streamscope.events import kinds
from streamscope.raw.runtime import IORuntime, gather, settle, then
from streamscope.raw.source import Source

__all__ = ["Fetcher", "Hedge", "sweep_orphans"]


class Fetcher:
    """Fetches the files of one dataset. Picklable; holds no runtime state."""

    def __init__(
        self,
        source: Source,
        cache_dir: str,
        cache_files: bool,
        item_type: str,
        hedge_delay: float,
        range_parallel_threshold: int,
        range_chunk_size: int,
    ) -> None:
        self.source = source
        self.cache_dir = cache_dir
        self.cache_files = cache_files
        self.item_type = item_type
        self.hedge_delay = hedge_delay
        self.range_parallel_threshold = range_parallel_threshold
        self.range_chunk_size = max(1, range_chunk_size)
        self.hedges_fired = 0
        self.hedges_won = 0
        self.local_read_s = 0.0  # median of recent local reads (decides inline vs pooled reads)
        self._read_times: deque[float] = deque(maxlen=31)
        self.latencies: deque[float] = deque(maxlen=4096)  # remote GET seconds, drained by the governor
        self._counter_lock = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state.pop("_counter_lock", None)
        state["_read_times"] = list(self._read_times)
        state["latencies"] = []
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        state["_read_times"] = deque(state.get("_read_times", ()), maxlen=31)
        state["latencies"] = deque(maxlen=4096)
        self.__dict__.update(state)
        self._counter_lock = threading.Lock()

    # --- public -------------------------------------------------------------------------------------

    def _note_read(self, seconds: float) -> None:
        times = self._read_times
        times.append(seconds)
        if len(times) >= 5:
            self.local_read_s = sorted(times)[len(times) // 2]  # a median: a descheduled read is not a slow disk

    def inline_ok(self) -> bool:
        """True when files are local and fast enough that threads would cost more than they save."""
        limit = float(config.get("raw_local_inline_s"))
        return not self.source.is_remote and limit > 0 and self.local_read_s < limit

    def fetch_now(self, path: str, size: int) -> Any:
        """Read a LOCAL file in the calling thread: its bytes, or (for "path" items) its size-checked path.

        Local files are read in place: ``cache_files`` does not copy them (they are on local disk already).
        """
        t0 = time.perf_counter()
        try:
            if self.item_type == "path":
                return self._checked_local_path(path, path, size)
            return self._read_local(path, size)
        finally:
            self._note_read(time.perf_counter() - t0)

    def _read_local(self, path: str, size: int) -> bytes:
        """One local file (``path`` is its index path, which for local sources is its path on disk)."""
        if "download" in ev.ACTIVE:
            with kinds.download(path=path, bytes=size, attempt=1, local=True):
                return self._read_local_untraced(path, size)
        return self._read_local_untraced(path, size)

    @staticmethod
    def _read_local_untraced(path: str, size: int) -> bytes:
        try:
            with open(path, "rb", buffering=0) as f:
                data = f.readall()
        except FileNotFoundError:
            raise RawSourceNotFoundError(f"file {path!r} does not exist (any more)") from None
        except IsADirectoryError:
            raise RawSourceNotFoundError(f"indexed file {path!r} is now a folder") from None
        if len(data) < size:
            raise RawFileSizeError(f"file {path!r} has {len(data)} bytes, fewer than the {size} in the index")
        return data

    def start(self, rt: IORuntime, path: str, size: int, ahead: bool = False) -> Future[Any]:
        """Start fetching ``path`` (an index path); the future yields bytes, or a local path for "path" items."""
        want_path = self.item_type == "path"
        if not self.source.is_remote:
            if want_path:
                return rt.submit(self._checked_local_path, path, path, size, ahead=ahead)
            return rt.submit(self._timed_local, path, size, ahead=ahead)
        key = self.source.key_of(path)
        if self.cache_files:
            cached = self.cached_path(key)
            if cached is not None and _size_or_none(cached) == size:
                if want_path:
                    done: Future[Any] = Future()
                    done.set_running_or_notify_cancel()
                    done.set_result(cached)
                    return done
                return rt.submit(self._read_cached, cached, path, size, ahead=ahead)
        if self._ranged(size):
            data = self._start_ranged(rt, key, path, size, ahead)
        elif self._hedgeable(size):
            data = Hedge(self, rt, key, path, size, ahead).result
        else:
            data = rt.submit(self._get_checked, key, path, size, ahead=ahead)
        if self.cache_files:
            published = then(data, lambda b: self._publish(key, b, path_result=want_path))
            published.hedge = getattr(data, "hedge", None)  # type: ignore[attr-defined]
            return published
        return data

    def cached_path(self, key: str) -> str | None:
        """Where ``key`` is kept under the cache folder (None when caching is off)."""
        if not self.cache_files:
            return None
        return os.path.join(self.cache_dir, *key.split("/"))

    # --- pieces -------------------------------------------------------------------------------------

    def _ranged(self, size: int) -> bool:
        t = self.range_parallel_threshold
        return self.source.is_remote and t > 0 and size >= t and size > self.range_chunk_size

    def _hedgeable(self, size: int) -> bool:
        return self.source.is_remote and self.hedge_delay > 0 and size < int(config.get("raw_hedge_max_bytes"))

    def hedge_delay_for(self, size: int) -> float:
        """Seconds to wait before a duplicate GET of a ``size``-byte object."""
        return max(self.hedge_delay, 3.0 * size / float(config.get("raw_min_throughput")))

    def _checked_local_path(self, local: str, path: str, size: int) -> str:
        actual = _size_or_none(local)
        if actual is None:
            raise RawSourceNotFoundError(f"file {path!r} does not exist (any more)")
        if actual < size:
            raise RawFileSizeError(f"file {path!r} has {actual} bytes, fewer than the {size} in the index")
        return local

    def _read_cached(self, cached: str, path: str, size: int) -> bytes:
        with kinds.read(path=path, bytes=size, cached=True):
            with open(cached, "rb") as f:
                return f.read()

    def _timed_local(self, path: str, size: int) -> bytes:
        t0 = time.perf_counter()
        try:
            return self._read_local(path, size)
        finally:
            self._note_read(time.perf_counter() - t0)

    def _get_checked(self, key: str, path: str, size: int, start: int = 0, end: int | None = None) -> bytes:
        """One GET (or ranged GET) through the store, which applies the storage retry policy; size-checked."""
        want = (end - start) if end is not None else size
        try:
            store = self.source.data_store()
            t0 = time.perf_counter()
            # a download span per GET (each range of a ranged one): the download metrics (count, bytes, latency)
            # and so the tuner's model (W0, in flight) see raw files as they see chunks
            with kinds.download(path=path, bytes=want):
                data = store.get(key) if end is None else store.get_range(key, start, end)
            self.latencies.append(time.perf_counter() - t0)
        except (ObjectNotFoundError, FileNotFoundError) as exc:
            raise RawSourceNotFoundError(f"file {path!r} does not exist (any more): {exc}") from exc
        except InvalidRangeError as exc:
            raise RawFileSizeError(f"file {path!r} is shorter than the {size} bytes in the index: {exc}") from exc
        except StorageError as exc:
            raise RawDownloadError(f"could not fetch {path!r}: {exc}") from exc
        if len(data) < want:
            raise RawFileSizeError(
                f"file {path!r}: got {len(data)} bytes at offset {start}, expected {want} (index size {size})"
            )
        return data

    def _start_ranged(self, rt: IORuntime, key: str, path: str, size: int, ahead: bool) -> Future[bytes]:
        step = self.range_chunk_size
        parts = [
            rt.submit(self._get_checked, key, path, size, off, min(off + step, size), ahead=ahead)
            for off in range(0, size, step)
        ]
        return then(gather(parts), lambda chunks: b"".join(chunks))

    def _publish(self, key: str, data: bytes, path_result: bool) -> Any:
        dest = self.cached_path(key)
        assert dest is not None
        os.makedirs(os.path.dirname(dest) or ".", exist_ok=True)
        tmp = f"{dest}.tmp.{os.getpid()}.{threading.get_ident()}.{uuid.uuid4().hex[:8]}"
        try:
            with kinds.cache_write(path=dest, bytes=len(data)):
                with open(tmp, "wb") as f:
                    f.write(data)
                os.replace(tmp, dest)
        finally:
            if os.path.exists(tmp):
                os.remove(tmp)
        return dest if path_result else data

    def count_hedge(self, won: bool) -> None:
        """Count a fired hedge, or a hedge that won."""
        with self._counter_lock:
            if won:
                self.hedges_won += 1
            else:
                self.hedges_fired += 1


class Hedge:
    """A GET that may get one duplicate after a delay; ``result`` settles with the first success."""

    def __init__(self, fetcher: Fetcher, rt: IORuntime, key: str, path: str, size: int, ahead: bool) -> None:
        self.fetcher = fetcher
        self.rt = rt
        self.key = key
        self.path = path
        self.size = size
        self.result: Future[bytes] = Future()
        self.result.set_running_or_notify_cancel()
        self.result.hedge = self  # type: ignore[attr-defined]  # lets the batch waiter find it
        self.deadline = time.monotonic() + fetcher.hedge_delay_for(size)
        self.fired = False
        self._lock = threading.Lock()
        self._pending = 1
        primary = rt.submit(fetcher._get_checked, key, path, size, ahead=ahead)
        primary.add_done_callback(lambda f: self._done(f, hedge=False))

    def maybe_fire(self, now: float) -> None:
        """Start the duplicate GET if the delay has passed and the primary has not finished."""
        with self._lock:
            if self.fired or self.result.done() or now < self.deadline:
                return
            self.fired = True
            self._pending += 1
        self.fetcher.count_hedge(won=False)
        kinds.hedge(path=self.path, bytes=self.size, state="fired")
        dup = self.rt.submit(self.fetcher._get_checked, self.key, self.path, self.size)
        dup.add_done_callback(lambda f: self._done(f, hedge=True))

    def _done(self, f: Future[bytes], hedge: bool) -> None:
        with self._lock:
            self._pending -= 1
            last = self._pending == 0
        exc = f.exception() if not f.cancelled() else RuntimeError(f"GET of {self.path!r} cancelled")
        if exc is None:
            if settle(self.result, result=f.result()) and hedge:
                self.fetcher.count_hedge(won=True)
                kinds.hedge(path=self.path, bytes=self.size, state="won")
        elif last:
            settle(self.result, exc=exc)


def _size_or_none(path: str) -> int | None:
    try:
        return os.stat(path).st_size
    except OSError:
        return None


def sweep_orphans(cache_dir: str, min_age_s: float = 60.0) -> int:
    """Remove ``*.tmp.<pid>.*`` files left in ``cache_dir`` by dead processes (older than ``min_age_s``).

    Returns how many were removed. Files of live processes, and recent ones (another host may share the
    folder), are left alone.
    """
    removed = 0
    now = time.time()
    for folder, _dirs, names in os.walk(cache_dir):
        for name in names:
            if ".tmp." not in name:
                continue
            tail = name.rsplit(".tmp.", 1)[1]
            try:
                pid = int(tail.split(".", 1)[0])
            except ValueError:
                continue
            path = os.path.join(folder, name)
            try:
                if now - os.stat(path).st_mtime < min_age_s or pid_alive(pid):
                    continue
                os.remove(path)
                removed += 1
            except OSError:
                continue
    if removed:
        kinds.sweep(path=cache_dir, files=removed)
    return removed
