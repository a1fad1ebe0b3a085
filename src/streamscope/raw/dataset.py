"""StreamingRawDataset: a map-style torch Dataset over existing files, with batched concurrent fetching.

``dataset[i]`` returns the bytes of file ``i`` (or ``list[bytes]`` for a group made by ``setup``), after
``transform``. Used with a plain ``torch.utils.data.DataLoader``, torch calls :meth:`__getitems__` with a
whole batch of indices, and every file of the batch is fetched concurrently. After each batch, the files
this worker will most likely be asked for next are fetched ahead (see :class:`~.planning.LookAhead`).

Live knobs (read at every batch from :attr:`StreamingRawDataset.knobs`, the dataset's knob board, which the
DataLoader workers share with the process that built it): ``raw_concurrency`` (starts at the
``max_concurrent_downloads`` argument; 0 = the adaptive, latency-driven limit of each process), ``raw_prefetch``
(starts at the ``max_prefetch`` argument) and ``raw_lookahead_when_left``. An argument given pins its knob.

With a ``StreamingDataLoader`` (``engine/mapped.py``) the loader plans the epoch (``shuffle``, exact resume,
``autotune``) and tells each worker's dataset the indices it will ask for next (:meth:`expect`), which the
look-ahead then fetches instead of guessing.

Runtime state (threads, store clients, futures) is per process: a forked DataLoader worker starts fresh and
pickling (spawn) drops it. One process should call ``__getitems__`` from one thread at a time (as torch's
DataLoader does); the fetches themselves run concurrently.
"""

from __future__ import annotations

import hashlib
import logging
import multiprocessing
import os
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_EXCEPTION, Future, wait
from typing import Any, Literal

from torch.utils.data import Dataset, get_worker_info

from streamscope import events as ev
from streamscope._core import config, hooks
from streamscope._core.board import KnobBoard
from streamscope._core.errors import ConfigError, RawDownloadTimeoutError, RawSetupError
from streamscope.cache.knobs import new_board
from streamscope.events import kinds
from streamscope.raw.fetch import Fetcher, Hedge, sweep_orphans
from streamscope.raw.indexer import BaseIndexer, FileIndexer, FileMetadata
from streamscope.raw.planning import (
    ConcurrencyGovernor,
    LookAhead,
    adaptive_concurrency,
    batch_budget,
    effective_prefetch,
    median_size,
)
from streamscope.raw.runtime import IORuntime, countdown, gather, runtime, then
from streamscope.raw.source import Source

__all__ = ["StreamingRawDataset"]


logger = logging.getLogger(__name__)

_TINY_MEDIAN_BYTES = 100_000
_RUNTIME_FIELDS = ("_ahead", "_lookahead", "_pid", "_batches", "_governor", "_expected")


def _num_workers() -> int:
    info = get_worker_info()
    return info.num_workers if info is not None else 1


class StreamingRawDataset(Dataset):
    """Stream files from a local folder or object-store prefix with no optimize step.

    Args:
        input_dir: Local folder or URL (``s3://``, ``gs://``, ``azure://``, ``r2://``).
        cache_dir: Root of the local cache (default: the ``cache_dir`` knob). This dataset uses
            ``{cache_dir}/{md5(source)}/`` for its index and, with ``cache_files``, the files.
        indexer: How files are found (default :class:`FileIndexer`).
        storage_options: Passed to the object store.
        cache_files: Keep fetched remote files under the cache folder and read them from there next time.
        recompute_index: Rebuild the index from a fresh listing.
        transform: Called on each item (bytes, or a list for grouped items; paths when ``item_type="path"``).
        max_concurrent_downloads: Exact in-flight GETs per process; None picks one from the median file size.
        max_prefetch: Items fetched ahead per worker after each batch (0 = off).
        prefetch_cache_size: Most items held ahead at once (default ``2 * max_prefetch``).
        item_type: ``"bytes"`` or ``"path"`` (local paths; needs ``cache_files=True``. Files of a LOCAL source
            are returned in place, size-checked, not copied).
        hedge_delay: Seconds before a duplicate GET of a slow remote object (0 = off).
        download_timeout: Floor, in seconds, of one batch's time budget (0 = no limit).
        range_parallel_threshold: Remote objects at least this big are fetched as parallel ranged GETs (0 = off).
        range_chunk_size: Bytes per ranged GET.

    Raises:
        RawSourceNotFoundError: ``input_dir`` does not exist. EmptyRawSourceError: it holds no files.
        RawSchemeError: unsupported URL scheme. RawSetupError: ``setup`` returned the wrong shape.
    """

    def __init__(
        self,
        input_dir: str,
        cache_dir: str | None = None,
        indexer: BaseIndexer | None = None,
        storage_options: dict[str, Any] | None = None,
        cache_files: bool = False,
        recompute_index: bool = False,
        transform: Callable[[Any], Any] | None = None,
        max_concurrent_downloads: int | None = None,
        max_prefetch: int = config.default_arg(16),
        prefetch_cache_size: int | None = None,
        item_type: Literal["bytes", "path"] = "bytes",
        hedge_delay: float = 0.0,
        download_timeout: float = 120.0,
        range_parallel_threshold: int = 0,
        range_chunk_size: int = 8 * 1024 * 1024,
    ) -> None:
        ev.configure_from_env()  # an entry point: tracing switched on by the environment starts here (once)
        hooks.first_use()  # what the environment switches on with no call (STREAMSCOPE_PROMETHEUS_PORT), once
        if item_type not in ("bytes", "path"):
            raise ConfigError(f"item_type must be 'bytes' or 'path', got {item_type!r}")
        if item_type == "path" and not cache_files:
            raise ConfigError("item_type='path' requires cache_files=True")
        self.source = Source(input_dir, storage_options)
        self.input_dir = self.source.input_dir
        self.storage_options = dict(storage_options or {})
        root = cache_dir if cache_dir is not None else config.get("cache_dir")
        self.cache_dir = os.path.join(os.fspath(root), hashlib.md5(self.source.root.encode()).hexdigest())
        os.makedirs(self.cache_dir, exist_ok=True)
        self.cache_files = cache_files
        self.item_type = item_type
        self.transform = transform
        self.max_concurrent_downloads = max_concurrent_downloads
        self.max_prefetch = max(0, int(max_prefetch))
        # the live knobs, shared with the DataLoader workers (a knob set by config.set_value or its environment
        # variable wins over the argument)
        self._knobs = new_board(
            {
                "raw_concurrency": (
                    0 if max_concurrent_downloads is None else int(max_concurrent_downloads),
                    max_concurrent_downloads is not None,
                    "max_concurrent_downloads",
                ),
                "raw_prefetch": (self.max_prefetch, config.given(max_prefetch), "max_prefetch"),
            }
        )
        # not given: twice the live look-ahead (the tuner may deepen it), else this many items at most
        self._cache_size_follows = prefetch_cache_size is None
        if prefetch_cache_size is None:
            prefetch_cache_size = 2 * self.max_prefetch
        self.prefetch_cache_size = max(0, int(prefetch_cache_size))
        self.hedge_delay = max(0.0, float(hedge_delay))
        self.download_timeout = max(0.0, float(download_timeout))
        self.indexer = indexer if indexer is not None else FileIndexer()
        self.fetcher = Fetcher(
            self.source,
            self.cache_dir,
            cache_files,
            item_type,
            self.hedge_delay,
            int(range_parallel_threshold),
            int(range_chunk_size),
        )

        self.files: list[FileMetadata] = self.indexer.build_or_load_index(
            self.source.root, self.cache_dir, self.storage_options, recompute_index
        )
        for f in self.files:
            self.source.key_of(f.path)  # every indexed path must lie under input_dir (names the first that does not)
        self.median_file_bytes = median_size([f.size for f in self.files])
        if len(self.files) >= 8 and self.median_file_bytes < _TINY_MEDIAN_BYTES:
            logger.info(
                "median file size is %d bytes: tiny files are bound by request overhead; optimize() may serve "
                "them faster",
                self.median_file_bytes,
            )
        self.items: list[FileMetadata] | list[list[FileMetadata]] = self._checked_items(self.setup(self.files))
        if cache_files:
            sweep_orphans(self.cache_dir)
        self.prefetch_hits = 0
        self.prefetch_misses = 0
        self._reset_runtime_state()

    # --- user hooks ----------------------------------------------------------------------------------

    def setup(self, files: list[FileMetadata]) -> list[FileMetadata] | list[list[FileMetadata]]:
        """Turn the indexed files into items. Override to filter, or to group files into one item.

        Returns:
            ``list[FileMetadata]`` (one file per item) or ``list[list[FileMetadata]]`` (a group per item,
            fetched together; the item is ``list[bytes]`` in the group's order).
        """
        return files

    def _checked_items(self, items: Any) -> list[Any]:
        where = f"{type(self).__name__}.setup"
        if not isinstance(items, list):
            raise RawSetupError(f"{where} must return a list, got {type(items).__name__}")
        for i, item in enumerate(items):
            if isinstance(item, FileMetadata):
                continue
            if isinstance(item, list) and item and all(isinstance(m, FileMetadata) for m in item):
                continue
            raise RawSetupError(
                f"{where} returned an item {i} of the wrong shape ({type(item).__name__}: {item!r:.80}); "
                "each item must be a FileMetadata or a non-empty list of FileMetadata"
            )
        return items

    # --- runtime state -------------------------------------------------------------------------------

    def _reset_runtime_state(self) -> None:
        self._ahead: OrderedDict[int, Future[Any]] = OrderedDict()
        self._lookahead = LookAhead()
        self._pid = os.getpid()
        self._batches = 0
        self._governor: ConcurrencyGovernor | None = None
        self._expected: list[int] | None = None

    def _runtime(self) -> IORuntime:
        if self._pid != os.getpid():
            self._reset_runtime_state()
        return runtime()

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        for name in _RUNTIME_FIELDS:
            state.pop(name, None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        ev.configure_from_env()  # a spawned worker's bootstrap: trace as the parent does (once per process)
        self.__dict__.update(state)
        self._reset_runtime_state()

    @property
    def knobs(self) -> KnobBoard:
        """This dataset's live knobs, shared with its DataLoader workers (docs/knobs.md)."""
        return self._knobs

    def concurrency(self) -> int:
        """In-flight GETs this process allows now.

        The board's ``raw_concurrency`` when > 0 (``max_concurrent_downloads``, a knob set by the user, or the
        tuner); else, for remote sources, a latency-driven limit (:class:`~.planning.ConcurrencyGovernor`)
        under the size-based default; local sources use the size-based default.
        """
        live = int(self._knobs.value("raw_concurrency"))
        if live > 0:
            return live
        if self.max_concurrent_downloads is not None:
            return max(1, int(self.max_concurrent_downloads))
        cap = adaptive_concurrency(self.median_file_bytes, _num_workers())
        if not self.source.is_remote or not config.get("raw_adaptive_concurrency"):
            return cap
        if self._governor is None:
            self._governor = ConcurrencyGovernor(cap)
        samples = []
        lat = self.fetcher.latencies
        while lat:
            samples.append(lat.popleft())
        before = int(self._governor.limit)
        limit = self._governor.update(samples, cap)
        if limit != before and "tune" in ev.ACTIVE:
            # this worker's own limit (the board's raw_concurrency is 0): told apart from board changes by its source
            kinds.knob(
                "raw_concurrency",
                old=before,
                new=limit,
                source="governor",
                samples=len(samples),
            )
        return limit

    def governed(self) -> bool:
        """True while the latency-driven governor owns each process's GET limit (remote source, no
        ``max_concurrent_downloads``, board ``raw_concurrency`` 0, ``raw_adaptive_concurrency`` on)."""
        return (
            self.source.is_remote
            and self.max_concurrent_downloads is None
            and int(self._knobs.value("raw_concurrency")) <= 0
            and bool(config.get("raw_adaptive_concurrency"))
        )

    def tune_info(self, num_workers: int = 0) -> dict[str, Any]:
        """What the auto-tuner needs to know of this dataset (``tune.TargetInfo`` fields): the knobs it may move
        are ``raw_prefetch`` (from the argument) and ``raw_concurrency`` (from the size-based default of a
        process), the latter only while the governor does not own it."""
        return {
            "kind": "raw",
            "raw_governed": self.governed(),
            "raw_prefetch": self.max_prefetch,
            "raw_concurrency": int(self.max_concurrent_downloads or 0)
            or adaptive_concurrency(self.median_file_bytes, max(1, int(num_workers))),
            "uses_cache": False,
        }

    def expect(self, indices: Sequence[int]) -> None:
        """The indices this process will ask for next, in order (a loader that knows its plan tells it before
        each batch): the look-ahead fetches those instead of guessing from the batches seen. Empty: no more."""
        if self._pid != os.getpid():
            self._reset_runtime_state()
        self._expected = list(indices)

    def prefetch_depth(self) -> int:
        """Items this worker fetches ahead now: the argument, capped so all workers together hold about 64 items;
        a different value on the board (the tuner's, or one set through it) is this worker's depth as it is (the
        tuner's moves must change something; its RAM budget bounds what it holds)."""
        live = int(self._knobs.value("raw_prefetch"))
        if live < 0 or live == self.max_prefetch:
            return effective_prefetch(self.max_prefetch, _num_workers())
        return live

    # --- access --------------------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: int) -> Any:
        return self.__getitems__([index])[0]

    def __getitems__(self, indices: list[int]) -> list[Any]:
        """Fetch the items at ``indices`` concurrently (torch's DataLoader calls this with a whole batch)."""
        self._batches += 1
        # fast local files are read inline; on the pooled path, one batch in 32 is read inline to re-measure
        if self.fetcher.inline_ok() or (self._probe_inline() and self._batches % 32 == 0):
            return self._get_inline(indices)
        rt = self._runtime()
        rt.set_limit(self.concurrency())
        if not self.source.prefer_obstore and self.source.can_prefer_obstore():
            self._maybe_prefer_obstore(len(indices))
        n = len(self.items)
        indices = [self._normalize(i, n) for i in indices]
        futures: dict[int, Future[Any]] = {}
        missed: list[int] = []
        seen: set[int] = set()
        for i in indices:
            if i in seen:
                continue
            seen.add(i)
            fut = self._ahead.pop(i, None)
            if fut is not None and not (fut.done() and (fut.cancelled() or fut.exception() is not None)):
                futures[i] = fut
            else:
                missed.append(i)
        hits = len(futures)
        # biggest first, so the longest transfer does not start last
        with rt.batch():
            for i in sorted(missed, key=lambda j: -sum(m.size for m in self._files_of(j))):
                futures[i] = self._start_item(rt, i, ahead=False)
        misses = len(missed)
        self.prefetch_hits += hits
        self.prefetch_misses += misses
        if "prefetch" in ev.ACTIVE:
            kinds.prefetch_hits(hits=hits, misses=misses, items=len(futures))
        # The look-ahead starts once at most `left` of this batch's files are still in flight: requests are
        # served about in the order they arrive, so look-ahead sent with the batch is served within the
        # batch and the server sits idle for one round trip when the next batch's misses go out; sent near
        # the batch's end it is served across that gap (and nothing it fetches is held longer than needed).
        left = int(self._knobs.value("raw_lookahead_when_left"))
        if left < 0:
            left = self.prefetch_depth()
        with kinds.read(items=len(indices)):
            results = self._wait(futures, lambda: self._schedule_ahead(rt, indices), left)
        return [results[i] for i in indices]

    def _maybe_prefer_obstore(self, batch_len: int) -> None:
        """Switch main-process S3 reads to obstore once the main process is clearly streaming batches.

        A batch of several indices (a ``num_workers=0`` DataLoader) or ``raw_main_obstore_after`` calls do
        it; a peek such as ``ds[0]`` before building a multi-worker DataLoader does not, so workers forked
        later keep obstore.
        """
        after = int(config.get("raw_main_obstore_after"))
        if after <= 0 or (self._batches < after and batch_len < 2):
            return
        if multiprocessing.parent_process() is None:
            self.source.prefer_obstore = True
            kinds.backend(backend="obstore", reason=f"{self._batches} batches in the main process")
            logger.info("raw: %d batches streamed in the main process; S3 reads switch to obstore", self._batches)

    def _probe_inline(self) -> bool:
        return not self.source.is_remote and float(config.get("raw_local_inline_s")) > 0

    def _get_inline(self, indices: list[int]) -> list[Any]:
        """Fast local files: read in this thread, in order (threads and look-ahead would only add overhead)."""
        if self._pid != os.getpid():
            self._reset_runtime_state()
        n = len(self.items)
        out: list[Any] = []
        with kinds.read(items=len(indices), inline=True):
            for i in indices:
                idx = self._normalize(i, n)
                ahead = self._ahead.pop(idx, None)  # fetched ahead while on the pooled path
                if ahead is not None:
                    try:
                        out.append(ahead.result())
                        self.prefetch_hits += 1
                        continue
                    except Exception:  # noqa: BLE001 - read it again below; a real error will repeat
                        pass
                item = self.items[idx]
                if isinstance(item, list):
                    value: Any = [self.fetcher.fetch_now(m.path, m.size) for m in item]
                else:
                    value = self.fetcher.fetch_now(item.path, item.size)
                out.append(self.transform(value) if self.transform is not None else value)
                self.prefetch_misses += 1
        return out

    def _normalize(self, i: int, n: int) -> int:
        idx = int(i)
        if idx < 0:
            idx += n
        if not 0 <= idx < n:
            raise IndexError(f"index {i} out of range for a raw dataset of {n} items")
        return idx

    def _files_of(self, index: int) -> list[FileMetadata]:
        item = self.items[index]
        return item if isinstance(item, list) else [item]

    def _start_item(self, rt: IORuntime, index: int, ahead: bool) -> Future[Any]:
        item = self.items[index]
        if isinstance(item, list):
            parts = [self.fetcher.start(rt, m.path, m.size, ahead=ahead) for m in item]
            fut: Future[Any] = gather(parts)
            fut.parts = parts  # type: ignore[attr-defined]
        else:
            fut = self.fetcher.start(rt, item.path, item.size, ahead=ahead)
        if self.transform is not None:
            inner = fut
            fut = then(inner, self.transform)
            fut.parts = getattr(inner, "parts", [inner])  # type: ignore[attr-defined]
        return fut

    def _schedule_ahead(self, rt: IORuntime, indices: list[int]) -> None:
        depth = self.prefetch_depth()
        if self._expected is not None:
            wanted = self._expected[:depth]
        else:
            wanted = self._lookahead.observe(indices, _num_workers(), len(self.items), depth)
        cap = max(self.prefetch_cache_size, 2 * depth) if self._cache_size_follows else self.prefetch_cache_size
        cap = cap or depth
        scheduled = 0
        with rt.batch():
            for i in wanted:
                if i in self._ahead:
                    continue
                while len(self._ahead) >= cap:
                    _, old = self._ahead.popitem(last=False)
                    old.cancel()
                self._ahead[i] = self._start_item(rt, i, ahead=True)
                scheduled += 1
        if scheduled and "prefetch" in ev.ACTIVE:
            kinds.prefetch_scheduled(items=scheduled, first=wanted[0])

    def _wait(
        self, futures: dict[int, Future[Any]], near_end: Callable[[], None] | None = None, left: int = 0
    ) -> dict[int, Any]:
        """Wait for a batch's items; ``near_end()`` runs once at most ``left`` of them are unfinished."""
        sizes = [m.size for i in futures for m in self._files_of(i)]
        budget = batch_budget(sizes, self.download_timeout, float(config.get("raw_min_throughput")))
        deadline = None if budget is None else time.monotonic() + budget
        hedges = self._hedges(futures.values())
        pending = set(futures.values())
        near = None if near_end is None else countdown(list(pending), left)
        fired = False

        def once() -> None:
            nonlocal fired
            if near_end is not None and not fired:
                fired = True
                near_end()

        try:
            self._wait_pending(futures, pending, hedges, deadline, budget, near, once)
        finally:
            once()  # a failed or timed-out batch still plans ahead, as a fine one does
        return {i: f.result() for i, f in futures.items()}

    def _wait_pending(
        self,
        futures: dict[int, Future[Any]],
        pending: set[Future[Any]],
        hedges: list[Hedge],
        deadline: float | None,
        budget: float | None,
        near: Future[None] | None,
        near_end: Callable[[], None],
    ) -> None:
        while pending:
            if near is not None and near.done():
                near = None
                near_end()
            now = time.monotonic()
            timeout = None if deadline is None else max(0.0, deadline - now)
            live_hedges = [h for h in hedges if not h.fired and not h.result.done()]
            if live_hedges:
                next_fire = min(h.deadline for h in live_hedges)
                timeout = max(0.0, next_fire - now) if timeout is None else min(timeout, max(0.0, next_fire - now))
            # wake only for a failure, the look-ahead point, all done, the next hedge due, or the deadline
            # (not per completion)
            if near is not None and not near.done():
                wait((near,), timeout=timeout)
                done = {f for f in pending if f.done()}
                pending -= done
            else:
                done, pending = wait(pending, timeout=timeout, return_when=FIRST_EXCEPTION)
            for f in done:
                if not f.cancelled() and f.exception() is not None:
                    raise f.exception()  # type: ignore[misc]  # the first failure ends the batch (the rest finish unseen)
            now = time.monotonic()
            for h in live_hedges:
                h.maybe_fire(now)
            if pending and deadline is not None and now >= deadline:
                late = [m.path for i, f in futures.items() if f in pending for m in self._files_of(i)]
                for f in pending:
                    f.cancel()
                    for p in getattr(f, "parts", ()):
                        p.cancel()
                raise RawDownloadTimeoutError(
                    f"{len(late)} file(s) did not arrive within the batch budget of {budget:.1f} s, e.g. {late[:3]}"
                )

    @staticmethod
    def _hedges(futures: Any) -> list[Hedge]:
        out: list[Hedge] = []
        for f in futures:
            for p in getattr(f, "parts", [f]):
                h = getattr(p, "hedge", None)
                if h is not None:
                    out.append(h)
        return out

    # --- stats ---------------------------------------------------------------------------------------

    def stats(self) -> dict[str, int]:
        """Counters of this process: prefetch hits/misses, hedges fired/won (retries are traced by storage)."""
        return {
            "prefetch_hits": self.prefetch_hits,
            "prefetch_misses": self.prefetch_misses,
            "hedges_fired": self.fetcher.hedges_fired,
            "hedges_won": self.fetcher.hedges_won,
        }
