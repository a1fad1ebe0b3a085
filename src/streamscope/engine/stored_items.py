"""Items of a stored dataset read one at a time by chunk and global index, as LitData's ``BinaryReader`` reads them
(``streaming/reader.py`` is its face; ``Cache`` reads through it).

:class:`StoredItems` loads the dataset's index once (fetching ``index.json`` from ``remote_input_dir`` when the
local folder lacks it) and reads through the engine's reader of stored datasets
(:func:`~streamscope.engine.stored_reader.stored_reader`): synchronous, no prefetch. The chunk read last stays open
and leased until the caller moves to another chunk (or reads the last index, or closes), so no process's eviction
deletes it; with a ``budget`` the cache evicts a remote dataset's chunks the caller has moved past.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from streamscope._core.errors import IndexNotFoundError
from streamscope._core.protocols import ObjectStore
from streamscope.engine.stored_reader import StoredChunkReader, StoredIndex, stored_reader
from streamscope.events import kinds
from streamscope.format.item_loader import BaseItemLoader, TokensLoader

__all__ = ["StoredItems"]


class StoredItems:
    """The index, the reader and the open chunk of the dataset in ``folder`` (or ``remote_input_dir``).

    Args:
        folder: the local dataset, or where a remote dataset's files go.
        remote_input_dir: the remote dataset's URL (None: ``folder`` is the dataset).
        storage_options: options of the store of ``remote_input_dir``.
        budget: bytes of chunk files ``folder`` may hold before a chunk no reader holds is evicted (None: no limit).
        encryption: the key of an encrypted dataset.
    """

    def __init__(
        self,
        folder: str,
        remote_input_dir: str | None,
        storage_options: dict[str, Any] | None,
        budget: int | None,
        encryption: Any,
    ) -> None:
        self._folder = folder
        self._remote_input_dir = remote_input_dir
        self._storage_options = dict(storage_options or {})
        self._budget = budget
        self._encryption = encryption
        self.index: StoredIndex | None = None
        self._open: int | None = None  # the chunk read last: held open and leased until the reader moves on
        self._store: ObjectStore | None = None
        self._reader: StoredChunkReader | None = None

    def _remote(self) -> ObjectStore:
        if self._store is None:
            from streamscope.storage import open_store  # noqa: PLC0415

            self._store = open_store(self._remote_input_dir or self._folder, self._storage_options)
        return self._store

    def load_index(
        self,
        subsampled_files: Sequence[str] | None,
        region_of_interest: Sequence[tuple[int, int]] | None,
        item_loader: BaseItemLoader,
        serializers: dict[str, Any] | None,
    ) -> StoredIndex | None:
        """Load ``index.json`` (fetched from ``remote_input_dir`` when missing) and keep it; None when there is none.

        ``subsampled_files`` and ``region_of_interest``: the chunk files kept, and per kept chunk the local item
        range read; ``item_loader`` is set up on the kept chunks (see :class:`StoredIndex`).
        """
        path = os.path.join(self._folder, "index.json")
        if not os.path.exists(path) and self._remote_input_dir:
            self._remote().download_file("index.json", path)
        if not os.path.exists(path):
            return None
        what = repr(self._remote_input_dir or self._folder)
        self.index = StoredIndex(
            path, subsampled_files, region_of_interest, item_loader, serializers, self._encryption, what
        )
        return self.index

    def require_index(
        self,
        subsampled_files: Sequence[str] | None,
        region_of_interest: Sequence[tuple[int, int]] | None,
        item_loader: BaseItemLoader,
        serializers: dict[str, Any] | None,
    ) -> StoredIndex:
        """The index, loaded by :meth:`load_index` the first time.

        Raises:
            IndexNotFoundError: the folder (and ``remote_input_dir``) has no ``index.json``.
        """
        if self.index is not None:
            return self.index
        index = self.load_index(subsampled_files, region_of_interest, item_loader, serializers)
        if index is None:
            raise IndexNotFoundError(f"no index.json in {self._folder!r}: the reader index isn't defined")
        return index

    def read(self, stored: StoredIndex, chunk: int, index: int, item_loader: BaseItemLoader, last: bool) -> Any:
        """Item ``index`` (global) of ``chunk``; ``last``: the caller's last item, its chunk is closed after it.

        Raises:
            DatasetIndexError: no such chunk, or the item is not in it.
        """
        local = stored.local_item(chunk, index)
        if self._reader is None:
            self._reader = stored_reader(
                self._folder,
                stored.chunks,
                stored.config,
                remote_input_dir=self._remote_input_dir,
                open_store=self._remote,
                budget=self._budget,
                encryption=self._encryption,
            )
        if self._open is not None and self._open != chunk:
            self.close()
        cf = self._reader.open(chunk).file
        self._open = chunk
        with kinds.read_item(chunk=chunk, index=index):
            if isinstance(item_loader, TokensLoader):
                item = item_loader.read_block(cf, local)
            else:  # the chunk decodes by its kind (classic items, 0.2.76 Arrow rows, framed zstd)
                item = cf.sample(local, item_loader)
        if last:
            self.close()
        return item

    def close(self) -> None:
        """Drop the open chunk and its lease (the cache may then evict it)."""
        if self._open is not None and self._reader is not None:
            c, self._open = self._open, None
            self._reader.finished_with(c)

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_open"] = None  # the open chunk and its lease are this process's: a copy holds none
        state["_store"] = None
        state["_reader"] = None
        return state
