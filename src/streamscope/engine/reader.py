"""Opening the chunks of one dataset in one process: in place for local files, through the cache otherwise.

A :class:`ChunkReader` hands out :class:`OpenChunk` objects: a validated, mmapped chunk of the kind its bytes
say (:func:`~streamscope.format.chunk.open_chunk_file`: a classic :class:`~streamscope.format.chunk.ChunkFile`
with flat numpy views for the column decoder, or a LitData 0.2.76 Arrow-footer
:class:`~streamscope.format.arrowchunk.ArrowChunk`). Local uncompressed chunks are mapped where they are: no copy,
no cache, no refcount. Remote or compressed chunks go through a
:class:`~streamscope.cache.chunk_cache.ChunkCache`; while iterating, a
:class:`~streamscope.cache.prefetch.Prefetcher` fetches them ahead of use in the plan's order and holds a lease
on each until the reader has passed its last use.
"""

from __future__ import annotations

import os
import weakref
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from streamscope._core import config
from streamscope._core.board import BoardGroup, KnobBoard
from streamscope.cache.chunk_cache import ChunkCache
from streamscope.cache.prefetch import Prefetcher
from streamscope.engine.collate import chunk_view
from streamscope.format.chunk import ChunkFile, open_chunk_file

__all__ = ["ChunkReader", "OpenChunk"]


@dataclass
class OpenChunk:
    """One mapped chunk: the format's chunk object and what its kind's batch decoder reads (for a classic chunk,
    numpy views over the same mapping; for the other kinds, the chunk object itself)."""

    index: int
    file: Any
    view: Any

    @property
    def kind(self) -> str:
        """``"classic"``, ``"arrow"``, ``"parquet"``, ... (selects the batch decoder)."""
        return str(getattr(self.file, "kind", "classic"))

    def close(self) -> None:
        """Unmap (views still referenced by decoded samples keep the mapping alive)."""
        self.view = None  # type: ignore[assignment]
        self.file.close()


def _release_all(cache: ChunkCache, leased: set[int]) -> None:
    """Give back the random-access leases of a reader that is gone (its finalizer: holds no reader)."""
    for c in list(leased):
        leased.discard(c)
        cache.release(c)


class ChunkReader:
    """Per-process access to a dataset's chunks.

    Args:
        chunks: index.json chunk entries.
        local_dir: directory of a local, uncompressed dataset (read in place), else None.
        cache: the chunk cache for remote or compressed datasets, else None.
        depth: returns the prefetch depth now (read live).
        knobs: the dataset's knob board (the prefetcher's other live knobs), or None for this process's knobs.
    """

    def __init__(
        self,
        chunks: Sequence[dict[str, Any]],
        local_dir: str | None,
        cache: ChunkCache | None,
        depth: Callable[[], int],
        knobs: KnobBoard | BoardGroup | None = None,
    ) -> None:
        self.chunks = chunks
        self.local_dir = local_dir
        self.cache = cache
        self._depth = depth
        self._knobs = knobs
        self._open: OrderedDict[int, OpenChunk] = OrderedDict()
        self._leased: set[int] = set()  # chunks leased for random access (no prefetcher)
        self._prefetcher: Prefetcher | None = None
        self._sched_pos: dict[int, int] = {}
        #: Counts the iterations started (:meth:`start`): an iteration's schedule (``ScheduledReads``) acts on the
        #: reader only while it is the current one, so a dropped iterator collected later cannot stop the next.
        self.iteration = 0
        self._max_open = max(2, int(config.get("open_chunks_max")))
        if cache is not None:
            # a dataset dropped after ds[i] drops its reader with it: its random-access leases go back then (the
            # process's lease table and lease files outlive the reader, and would keep those chunks unevictable)
            weakref.finalize(self, _release_all, cache, self._leased)

    # --- schedule (iteration) ----------------------------------------------------------------------

    def start(self, schedule: Sequence[int]) -> None:
        """Begin an iteration that will read ``schedule`` (distinct chunks in first-use order); the one before
        it, if any, ends (its leases dropped)."""
        self.stop()
        self.iteration += 1
        if self.cache is not None and schedule:
            self._sched_pos = {c: p for p, c in enumerate(schedule)}
            self._prefetcher = Prefetcher(self.cache, schedule, self._depth, self._knobs)

    def finished_with(self, chunk: int) -> None:
        """The iteration will not read ``chunk`` again: unmap it and drop its lease."""
        oc = self._open.pop(chunk, None)
        if oc is not None:
            oc.close()
        if self._prefetcher is not None and chunk in self._sched_pos:
            self._prefetcher.release(self._sched_pos[chunk])
        elif chunk in self._leased and self.cache is not None:
            self._leased.discard(chunk)
            self.cache.release(chunk)

    def stop(self) -> None:
        """End the iteration: stop prefetching and drop every lease and mapping."""
        if self._prefetcher is not None:
            self._prefetcher.close()
            self._prefetcher = None
        self._sched_pos = {}
        if self.cache is not None:
            self.close()  # drop leases: cached chunks become evictable
        # local chunks stay mapped (bounded LRU): the next epoch reuses the mappings and their page tables

    # --- access ------------------------------------------------------------------------------------

    def open(self, chunk: int) -> OpenChunk:
        """The mapped chunk ``chunk`` (fetched and leased first when it comes from the cache)."""
        oc = self._open.get(chunk)
        if oc is not None:
            self._open.move_to_end(chunk)
            return oc
        entry = self.chunks[chunk]
        if self.cache is None:
            assert self.local_dir is not None
            path = os.path.join(self.local_dir, entry["filename"])
        elif self._prefetcher is not None and chunk in self._sched_pos:
            path = self._prefetcher.get(self._sched_pos[chunk])
        else:
            path = self.cache.acquire(chunk)
            self._leased.add(chunk)
        try:
            oc = self._open_file(chunk, path, int(entry["chunk_size"]))
        except FileNotFoundError:
            if self.cache is None:
                raise
            # evicted by another process between its lease check and the delete, after this process leased it
            # (see ChunkCache.refetch): fetched again, and this process's lease keeps it now
            oc = self._open_file(chunk, self.cache.refetch(chunk), int(entry["chunk_size"]))
        self._open[chunk] = oc
        while len(self._open) > self._max_open:
            old, oldc = self._open.popitem(last=False)
            oldc.close()
            if old in self._leased and self.cache is not None and self._prefetcher is None:
                self._leased.discard(old)
                self.cache.release(old)
        return oc

    def _open_file(self, chunk: int, path: str, num_items: int) -> OpenChunk:
        """Open the local file of ``chunk`` as the kind its bytes say (subclasses read other file kinds)."""
        cf = open_chunk_file(path, num_items)
        if isinstance(cf, ChunkFile):
            return OpenChunk(chunk, cf, chunk_view(cf.buffer, cf.num_items, path))
        return OpenChunk(chunk, cf, cf)

    def close(self) -> None:
        """Unmap every chunk and drop random-access leases."""
        for oc in self._open.values():
            oc.close()
        self._open.clear()
        if self.cache is not None:
            for c in list(self._leased):
                self.cache.release(c)
        self._leased.clear()
