"""``litdata.streaming.cache`` at the same path: ``Cache`` (one writer and one reader on a directory) and ``Dir``.

``cache[i] = sample`` writes, ``cache.done()`` closes this rank's chunks and index file, ``cache.merge()`` writes
``index.json``; then ``cache[i]`` (or ``cache[ChunkedIndex(...)]``) reads back and ``len(cache)`` counts the items.
What differs from LitData: :mod:`~streamscope.streaming.writer`, :mod:`~streamscope.streaming.reader`.
"""

from __future__ import annotations

import os
from typing import Any

from streamscope._core.dirs import Dir, local_and_url
from streamscope.streaming.reader import BinaryReader, ChunkedIndex, Interval
from streamscope.streaming.writer import BinaryWriter

__all__ = ["Cache", "Dir"]


class Cache:
    """A directory that is written like an optimized dataset and read back by index (LitData's signature).

    Args:
        input_dir: local directory (or ``Dir(path=local, url=remote)``) where chunks are written and read.
        subsampled_files: read only these chunk files.
        region_of_interest: per chunk, the ``(start, end)`` local item range to read.
        compression: None, "zstd" or "zstd:N" for the chunks written.
        compression_level: how zstd wraps the chunks written ("batch", "sample" or "chunk"; see ``BinaryWriter``).
        compression_batch_size: items per zstd frame at level "batch" (default 256).
        encryption: key for writing and reading encrypted chunks.
        chunk_size: max items per chunk written (exactly one of chunk_size/chunk_bytes).
        chunk_bytes: max bytes per chunk written.
        item_loader: ``PyTreeLoader()`` (default) or ``TokensLoader``.
        max_cache_size: bytes (or a string such as "10GB") of a remote dataset's chunks the directory may hold
            before the reader evicts one it moved past (see ``BinaryReader``); None keeps every chunk.
        serializers: extra serializers by name.
        writer_chunk_index: index of the first chunk written.
        storage_options: options for the remote store of ``input_dir.url``.
        session_options, max_pre_download, msg_queue, on_demand_bytes: accepted (unused).
    """

    def __init__(
        self,
        input_dir: str | Dir | None,
        subsampled_files: list[str] | None = None,
        region_of_interest: list[tuple[int, int]] | None = None,
        compression: str | None = None,
        compression_level: str | None = None,
        compression_batch_size: int | None = None,
        encryption: Any | None = None,
        chunk_size: int | None = None,
        chunk_bytes: int | str | None = None,
        item_loader: Any | None = None,
        max_cache_size: int | float | str | None = None,
        serializers: dict[str, Any] | None = None,
        writer_chunk_index: int | None = None,
        storage_options: dict[str, Any] | None = None,
        session_options: dict[str, Any] | None = None,
        max_pre_download: int = 2,
        msg_queue: Any | None = None,
        on_demand_bytes: bool = False,
    ) -> None:
        path, url = local_and_url(input_dir, "Cache")
        self._cache_dir = path
        self._writer = BinaryWriter(
            path,
            chunk_size=chunk_size,
            chunk_bytes=chunk_bytes,
            compression=compression,
            compression_level=compression_level,
            compression_batch_size=compression_batch_size,
            encryption=encryption,
            serializers=serializers,
            chunk_index=writer_chunk_index or 0,
            item_loader=item_loader,
            msg_queue=msg_queue,
        )
        self._reader = BinaryReader(
            path,
            subsampled_files=subsampled_files,
            region_of_interest=region_of_interest,
            max_cache_size=max_cache_size,
            remote_input_dir=url,
            compression=compression,
            encryption=encryption,
            item_loader=item_loader,
            serializers=serializers,
            storage_options=storage_options,
            session_options=session_options,
            max_pre_download=max_pre_download,
            on_demand_bytes=on_demand_bytes,
        )
        self._is_done = False

    @property
    def rank(self) -> int:
        """The writer's rank (see :attr:`BinaryWriter.rank`)."""
        return self._writer.rank

    @property
    def filled(self) -> bool:
        """True once ``index.json`` exists in the directory (the dataset is complete)."""
        self._is_done = self._is_done or os.path.exists(os.path.join(self._cache_dir, "index.json"))
        return self._is_done

    @property
    def cache_dir(self) -> str:
        """The local directory."""
        return self._cache_dir

    @property
    def checkpoint_dir(self) -> str:
        """``<cache_dir>/checkpoints`` (created)."""
        path = os.path.join(self._cache_dir, "checkpoints")
        os.makedirs(path, exist_ok=True)
        return path

    def __setitem__(self, index: int, data: Any) -> None:
        self._writer[index] = data

    def _add_item(self, index: int, data: Any) -> str | None:
        return self._writer.add_item(index, data)

    def __getitem__(self, index: int | ChunkedIndex) -> Any:
        if isinstance(index, int):
            index = ChunkedIndex(*self._get_chunk_index_from_index(index))
        return self._reader.read(index)

    def done(self) -> list[str] | None:
        """Close this rank's last chunk and write its index file; returns the chunk paths written now."""
        return self._writer.done()

    def merge(self, num_workers: int = 1, node_rank: int | None = None) -> None:
        """Merge the ranks' index files into ``index.json`` (see :meth:`BinaryWriter.merge`)."""
        self._writer.merge(num_workers, node_rank=node_rank)

    def _merge_no_wait(self, node_rank: int | None = None, existing_index: dict[str, Any] | None = None) -> None:
        self._writer._merge_no_wait(node_rank=node_rank, existing_index=existing_index)

    def __len__(self) -> int:
        return self._reader.get_length()

    def get_chunk_intervals(self) -> list[Interval]:
        """``Interval`` of each chunk (global item indexes)."""
        return self._reader.get_chunk_intervals()

    def _get_chunk_index_from_index(self, index: int) -> tuple[int, int]:
        return self._reader._get_chunk_index_from_index(index)
