"""The local chunk cache: fetch, decompress and publish chunk files atomically; evict by bytes.

Layout: chunks of one dataset version live in ``cache_dir`` (the caller derives it from the URL and the
index's ``updated_at``, see :func:`dataset_cache_dir`). A published chunk is always complete: downloads and
decompression write a temporary file and ``os.replace`` it into place. A per-chunk file lock
(``<chunk>.lock``, blocking with a deadline, never "try once and return") makes concurrent readers of the same
chunk wait for one download instead of racing.

References are leases (:mod:`streamscope.cache.leases`): acquire before looking at the file, release when done.
Eviction removes the least recently released chunks while the directory holds more than ``max_cache_size``
bytes, and never a chunk with a live lease. Downloads under way count at their chunk's full size (this process's
from before they start, other processes' by their partial files), and a fetch makes room before it starts: the
directory stays within the budget while chunks arrive, as long as unleased chunks are left to evict. It checks the leases, then deletes: a lease taken by another process
between the two steps does not stop that delete, so a reader that finds its leased chunk gone fetches it again
(:meth:`ChunkCache.refetch`); from then on its lease keeps it.

``as_stored=True`` keeps LitData's reader layout (``litdata.streaming.reader.BinaryReader``): each chunk is
downloaded under its own file name and kept; a whole-file compressed chunk (``chunk-0-1.zstd.bin``) is inflated
beside it under its decompressed name, the two files counted and evicted together; a chunk whose name carries no
compression suffix (LitData 0.2.76's framed and per-sample zstd) is published as stored, for a reader that
inflates it frame by frame.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from filelock import FileLock
from filelock import Timeout as FileLockTimeout

from streamscope import events as ev
from streamscope._core import config
from streamscope._core.errors import ChunkDownloadError, ChunkNotFoundError, ChunkWaitTimeoutError, FormatError
from streamscope._core.protocols import ObjectStore
from streamscope.cache.leases import LEASE_MARK, LeaseTable, live_lease_owners
from streamscope.events import kinds, stages
from streamscope.events.instruments import add as add_value
from streamscope.events.registry import M
from streamscope.storage import redact_url

__all__ = ["ChunkCache", "dataset_cache_dir", "decompressed_name"]


def dataset_cache_dir(root: str, url: str, updated_at: str | None) -> str:
    """Cache directory of one dataset version: ``root/<sha256(url)[:16]>/<updated_at or 'unversioned'>``."""
    digest = hashlib.sha256(url.encode("utf-8")).hexdigest()[:16]
    version = (updated_at or "unversioned").replace(os.sep, "_")
    return os.path.join(root, digest, version)


def decompressed_name(filename: str, compression: str | None) -> str:
    """``chunk-0-1.zstd.bin`` → ``chunk-0-1.bin`` (LitData's naming of decompressed chunks)."""
    if compression and filename.endswith(f".{compression}.bin"):
        return filename[: -len(f".{compression}.bin")] + ".bin"
    return filename


class ChunkCache:
    """Chunks of one dataset held in a local directory for readers.

    Args:
        store: where the chunks come from (``download_file``/``local_path``).
        cache_dir: the dataset version's cache directory.
        chunks: the index's chunk entries (``filename``, ``chunk_bytes``, ...).
        compression: the index's compression name, or None.
        max_cache_size: byte budget of ``cache_dir``, or a function returning it now (a knob board's
            ``max_cache_size`` reader: eviction follows a budget the main process or the tuner moves); None: no
            budget, nothing is evicted.
        leases: this process's lease table (one per process; shared by all caches of the process).
        config: the index ``config`` (its ``compression_level`` tells LitData 0.2.76's per-sample zstd apart).
        as_stored: LitData's reader layout (see the module's doc): the stored file is downloaded under its name
            and kept; only whole-file compressed chunks are inflated, beside it.
    """

    def __init__(
        self,
        store: ObjectStore,
        cache_dir: str,
        chunks: Sequence[dict[str, Any]],
        compression: str | None,
        max_cache_size: int | Callable[[], int] | None,
        leases: LeaseTable | None = None,
        config: dict[str, Any] | None = None,
        *,
        as_stored: bool = False,
    ) -> None:
        self.store = store
        self.cache_dir = cache_dir
        self.chunks = list(chunks)
        self.compression = compression
        self._unlimited = max_cache_size is None
        if max_cache_size is None:
            self._budget: Callable[[], int] = lambda: sys.maxsize
        elif callable(max_cache_size):
            self._budget = max_cache_size
        else:
            fixed = int(max_cache_size)
            self._budget = lambda: fixed
        self.leases = leases if leases is not None else LeaseTable()
        self.config = {"compression": compression, **(config or {})}
        self._names = {decompressed_name(c["filename"], compression) for c in self.chunks}
        self.as_stored = as_stored
        # as_stored: the stored file kept beside its inflated copy, by the published name
        self._stored = {
            decompressed_name(c["filename"], compression): c["filename"]
            for c in self.chunks
            if as_stored and decompressed_name(c["filename"], compression) != c["filename"]
        }
        self._sizes = {
            decompressed_name(c["filename"], compression): int(c.get("chunk_bytes") or 0) for c in self.chunks
        }
        self._pending = 0  # bytes of this process's fetches under way (counted before their files exist)
        self._pending_lock = threading.Lock()
        self._stream_store: tuple[int, ObjectStore] | None = None
        os.makedirs(cache_dir, exist_ok=True)

    @property
    def max_cache_size(self) -> int:
        """The byte budget now."""
        return int(self._budget())

    # --- paths -------------------------------------------------------------------------------------

    def path(self, index: int) -> str:
        """Where chunk ``index`` lives (decompressed) in the cache."""
        return os.path.join(self.cache_dir, decompressed_name(self.chunks[index]["filename"], self.compression))

    # --- references --------------------------------------------------------------------------------

    def acquire(self, index: int, streaming: bool = False) -> str:
        """Lease chunk ``index``, fetch it if missing, and return its local path (complete, decompressed).

        ``streaming=True`` (the prefetcher of an iteration) downloads through the store's
        ``streaming_store()`` when it has one (see the ``storage_s3_streaming_backend`` knob).
        """
        path = self.path(index)
        self.leases.acquire(path)
        try:
            self._ensure(index, path, self._streaming_store() if streaming else self.store)
        except BaseException:
            self.leases.release(path)
            raise
        return path

    def refetch(self, index: int) -> str:
        """Fetch chunk ``index`` again when its file is gone, for a caller that holds a lease on it.

        Eviction checks the leases, then deletes: another process's eviction can delete a chunk that this process
        leased between the two steps, after finding it present. The lease keeps it from any later eviction.
        """
        path = self.path(index)
        self._ensure(index, path)
        return path

    def release(self, index: int) -> None:
        """Drop one lease on chunk ``index``; the chunk becomes evictable when no process holds it."""
        path = self.path(index)
        if self.leases.release(path):
            with contextlib.suppress(FileNotFoundError):
                os.utime(path)  # mtime = last release: eviction order is least recently released first
            self.evict()

    # --- fetch -------------------------------------------------------------------------------------

    def _streaming_store(self) -> ObjectStore:
        """The store an iteration's downloads go through (built once per process)."""
        pid = os.getpid()
        if self._stream_store is None or self._stream_store[0] != pid:
            make = getattr(self.store, "streaming_store", None)
            self._stream_store = (pid, make() if callable(make) else self.store)
        return self._stream_store[1]

    def _ensure(self, index: int, path: str, store: ObjectStore | None = None) -> None:
        if os.path.exists(path):
            add_value(M.CACHE_HITS)
            return
        timeout = float(config.get("chunk_wait_timeout"))
        lock = FileLock(path + ".lock")
        start = time.monotonic()
        try:
            with ev.stage(stages.DOWNLOAD):  # another process may be downloading it: this waits
                lock.acquire(timeout=timeout)
        except FileLockTimeout:
            raise ChunkWaitTimeoutError(path, time.monotonic() - start) from None
        try:
            if os.path.exists(path):
                add_value(M.CACHE_HITS)  # fetched by another process while this one waited
                return
            add_value(M.CACHE_MISSES)
            size = self._sizes.get(os.path.basename(path), 0)
            with self._pending_lock:
                self._pending += size
            try:
                self.evict()  # room first: the directory holds its budget while the chunk arrives
                self._fetch(index, path, store or self.store)
            finally:
                with self._pending_lock:
                    self._pending -= size
        finally:
            lock.release()
            with contextlib.suppress(FileNotFoundError):
                os.remove(path + ".lock")
        self.evict()

    def _fetch(self, index: int, path: str, store: ObjectStore) -> None:
        entry = self.chunks[index]
        key = entry["filename"]
        url = redact_url(f"{store.url.rstrip('/')}/{key}")
        try:
            if self.as_stored:
                stored = os.path.join(self.cache_dir, key)
                if not os.path.exists(stored):  # in place when the cache is the dataset's folder
                    with kinds.download(chunk=index, url=url) as f:
                        f["bytes"] = store.download_file(key, stored)
                if stored != path:  # whole-file compressed: inflated beside the download (`decompress` span)
                    from streamscope.format.chunk import decompress_file

                    decompress_file(stored, path, self.compression or "zstd", config=self.config)
            elif self.compression:
                # zstd of any layout (whole-file, or LitData 0.2.76's framed / per-sample) becomes a classic chunk
                # once, here: readers then map it in place like any other chunk
                from streamscope.format.v076 import prepare_chunk_file

                src = store.local_path(key)
                downloaded = None
                if src is None:
                    # a framed chunk keeps its name when inflated: download under a private name
                    downloaded = f"{path}.download.{os.getpid()}"
                    with kinds.download(chunk=index, url=url) as f:
                        f["bytes"] = store.download_file(key, downloaded)
                    src = downloaded
                try:
                    prepare_chunk_file(src, path, self.config, move=downloaded is not None)  # `decompress` span
                finally:
                    if downloaded is not None:
                        with contextlib.suppress(FileNotFoundError):
                            os.remove(downloaded)
            else:
                with kinds.download(chunk=index, url=url) as f:
                    f["bytes"] = store.download_file(key, path)
        except (ChunkDownloadError, ChunkWaitTimeoutError):
            raise
        except FormatError as exc:  # a damaged chunk: the format layer's message names the file and the offset
            kinds.crash(exc, chunk=index, url=url)
            if url in str(exc):
                raise
            try:  # a downloaded copy was read: name where it came from
                named = type(exc)(f"{exc} (chunk {index} of {url})")
            except Exception:  # noqa: BLE001 (an error class with other arguments goes through as it is)
                raise exc from None
            raise named from exc
        except Exception as exc:
            kinds.crash(exc, chunk=index, url=url)
            kind = ChunkNotFoundError if isinstance(exc, FileNotFoundError) else ChunkDownloadError
            raise kind(f"could not fetch chunk {index} from {url} into {path}: {exc}") from exc

    # --- eviction ----------------------------------------------------------------------------------

    def cached_files(self) -> list[tuple[str, int, float]]:
        """(path, bytes, mtime) of every published chunk of this dataset in the cache directory (``as_stored``: its
        bytes include the stored file kept beside it)."""
        out: list[tuple[str, int, float]] = []
        try:
            entries = list(os.scandir(self.cache_dir))
        except FileNotFoundError:
            return out
        for entry in entries:
            if entry.name not in self._names or LEASE_MARK in entry.name:
                continue
            with contextlib.suppress(FileNotFoundError):
                st = entry.stat()
                size = st.st_size
                stored = self._stored.get(entry.name)
                if stored is not None:
                    with contextlib.suppress(FileNotFoundError):
                        size += os.stat(os.path.join(self.cache_dir, stored)).st_size
                out.append((entry.path, size, st.st_mtime))
        return out

    def _others_partial_bytes(self) -> int:
        """Full sizes of the chunks other processes are downloading here (their partial files; this process's own
        downloads are counted by :attr:`_pending`)."""
        mine = re.compile(rf"[.-]{os.getpid()}([.-]|$)")
        total = 0
        try:
            entries = list(os.scandir(self.cache_dir))
        except FileNotFoundError:
            return 0
        for entry in entries:
            name = entry.name
            if name in self._names or ".bin." not in name or LEASE_MARK in name or name.endswith(".lock"):
                continue
            stem, _, rest = name.partition(".bin.")
            size = self._sizes.get(stem + ".bin")
            if size and not mine.search("." + rest):
                total += size
        return total

    def evict(self) -> int:
        """Delete least recently released, unleased chunks while the published chunks and the downloads under way
        are over budget; return bytes freed."""
        if self._unlimited:
            return 0
        files = self.cached_files()
        total = sum(size for _, size, _ in files)
        freed = 0
        budget = self.max_cache_size
        coming = self._pending + (self._others_partial_bytes() if self._pending or total > budget // 2 else 0)
        if total + coming > budget:
            for path, size, _ in sorted(files, key=lambda t: t[2]):
                if total + coming <= budget:
                    break
                if self.leases.count(path) > 0 or live_lease_owners(path):
                    continue
                with kinds.delete(path=os.path.basename(path), bytes=size):
                    try:
                        os.remove(path)
                    except FileNotFoundError:
                        continue
                    stored = self._stored.get(os.path.basename(path))
                    if stored is not None:
                        with contextlib.suppress(FileNotFoundError):
                            os.remove(os.path.join(self.cache_dir, stored))
                total -= size
                freed += size
        kinds.cache_bytes(total)
        return freed
