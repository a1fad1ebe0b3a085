"""``litdata.streaming.reader.BinaryReader`` at the same path: read items of an optimized dataset by ChunkedIndex.

A face over the engine's items of a stored dataset (``engine/stored_items.py``): synchronous, no prefetch; for
training use :class:`~streamscope.engine.StreamingDataset`. A local dataset's plain chunks are read in place; a
remote dataset's (``remote_input_dir``), and whole-file compressed ones, come through the engine's chunk cache on
``cache_dir`` itself in LitData's layout, once for all the processes reading it. The open chunk is leased until
the reader moves past it, so no process's eviction deletes it; with ``max_cache_size`` the cache evicts a remote
dataset's chunks the readers have moved past. Encrypted chunks are decrypted in memory, never written plain.
``max_pre_download``, ``session_options`` and ``on_demand_bytes`` are accepted and unused.
"""

from __future__ import annotations

import os
from collections import namedtuple
from dataclasses import dataclass
from typing import Any

from streamscope.engine.distributed import WorkerEnv
from streamscope.engine.stored_items import StoredItems
from streamscope.engine.stored_reader import StoredIndex
from streamscope.format.item_loader import BaseItemLoader, PyTreeLoader
from streamscope.format.writer import convert_chunk_bytes

__all__ = ["BinaryReader", "ChunkedIndex", "Interval"]

#: LitData's ``litdata.streaming.item_loader.Interval``: global item bounds of one chunk and its region of interest.
Interval = namedtuple("Interval", ["chunk_start", "roi_start_idx", "roi_end_idx", "chunk_end"])


@dataclass
class ChunkedIndex:
    """A global item index with the chunk that holds it (LitData's ``litdata.streaming.sampler.ChunkedIndex``)."""

    index: int
    chunk_index: int
    chunk_size: int | None = None
    chunk_indexes: list[int] | None = None
    is_last_index: bool = False


class BinaryReader:
    """Read items of the optimized dataset in ``cache_dir`` (or ``remote_input_dir``) by :class:`ChunkedIndex`.

    LitData's arguments: ``cache_dir`` (the local dataset, or where a remote one's files go), ``subsampled_files``
    and ``region_of_interest`` (the chunk files kept, and per kept chunk the local item range read),
    ``max_cache_size`` (bytes, or a string such as ``"10GB"``, of chunk files a remote dataset's ``cache_dir`` may
    hold before a chunk the readers moved past is deleted; None keeps every chunk), ``remote_input_dir``,
    ``encryption`` (the key), ``item_loader`` (``PyTreeLoader()`` or ``TokensLoader(block_size)``),
    ``serializers``, ``storage_options``; ``compression`` (the index's is used), ``session_options``,
    ``max_pre_download`` and ``on_demand_bytes`` are accepted.
    """

    def __init__(
        self,
        cache_dir: str,
        subsampled_files: list[str] | None = None,
        region_of_interest: list[tuple[int, int]] | None = None,
        max_cache_size: int | float | str | None = None,
        remote_input_dir: str | None = None,
        compression: str | None = None,
        encryption: Any | None = None,
        item_loader: BaseItemLoader | None = None,
        serializers: dict[str, Any] | None = None,
        storage_options: dict[str, Any] | None = None,
        session_options: dict[str, Any] | None = None,
        max_pre_download: int = 2,
        on_demand_bytes: bool = False,
    ) -> None:
        if not os.path.exists(cache_dir):
            raise FileNotFoundError(f"The provided cache_dir `{cache_dir}` doesn't exist.")
        self._cache_dir = cache_dir
        self._remote_input_dir = remote_input_dir
        self._compression = compression
        self._encryption = encryption
        self.subsampled_files = subsampled_files
        self.region_of_interest = region_of_interest
        self._item_loader = item_loader or PyTreeLoader()
        self._serializers = serializers
        self._storage_options = dict(storage_options or {})
        self._max_cache_size = max_cache_size
        self._max_pre_download = max_pre_download
        self.on_demand_bytes = on_demand_bytes
        budget = convert_chunk_bytes(max_cache_size) if max_cache_size is not None else None
        self._items = StoredItems(cache_dir, remote_input_dir, storage_options, budget, encryption)

    def _try_load_config(self) -> dict[str, Any] | None:
        index = self._items.load_index(*self._kept())
        return None if index is None else index.config

    def _ensure(self) -> StoredIndex:
        return self._items.require_index(*self._kept())

    def _kept(self) -> tuple[Any, Any, BaseItemLoader, dict[str, Any] | None]:
        """What is read of the index (LitData's attributes, read at load: a caller may set them before)."""
        return self.subsampled_files, self.region_of_interest, self._item_loader, self._serializers

    @property
    def config(self) -> dict[str, Any]:
        """The index.json ``config`` (streamscope: a dict; LitData returns its ChunksConfig object)."""
        return self._ensure().config

    @property
    def rank(self) -> int:
        """This process's rank for reading (the DataLoader worker id, 0 outside workers)."""
        return WorkerEnv.detect().worker_id

    def get_length(self) -> int:
        """Number of items of the kept chunks (LitData: the last interval's ``chunk_end``, regions ignored)."""
        intervals = self._ensure().intervals
        return intervals[-1][3] if intervals else 0

    def get_chunk_intervals(self) -> list[Interval]:
        """``Interval(chunk_start, roi_start_idx, roi_end_idx, chunk_end)`` of each chunk (global item indexes)."""
        return [Interval(*iv) for iv in self._ensure().intervals]

    def _get_chunk_index_from_index(self, index: int) -> tuple[int, int]:
        """(global item index, chunk index) of the ``index``-th item of the regions of interest."""
        return self._ensure().roi_position(index, self._cache_dir)

    def read(self, index: ChunkedIndex) -> Any:
        """The item at ``index`` (``index.index`` is global; ``index.chunk_index`` the chunk holding it)."""
        if not isinstance(index, ChunkedIndex):
            raise ValueError("The Reader.read(...) method expects a chunked Index.")
        return self._items.read(self._ensure(), index.chunk_index, index.index, self._item_loader, index.is_last_index)

    def close(self) -> None:
        """Drop the open chunk and its lease (the cache may then evict it, see ``max_cache_size``)."""
        self._items.close()
