"""``litdata.streaming.writer.BinaryWriter`` at the same path: LitData's writer API over the format's writers.

The chunks: :class:`~streamscope.format.writer.ChunkWriter`, byte-identical to LitData's, made once the rank is
known (:func:`~streamscope.engine.distributed.writer_rank`); indexes in any order:
:mod:`~streamscope.format.ordered_chunks` (it says where it differs from LitData 0.2.68); the merge and its bounded
wait: :mod:`~streamscope.format.complete`. ``follow_tensor_dimension`` and ``msg_queue`` are accepted and unused;
no ``save_checkpoint``.
"""

from __future__ import annotations

import os
from typing import Any

from streamscope.engine.distributed import DistEnv, writer_rank
from streamscope.engine.parquet import index_parquet_dataset  # LitData defines it in this module
from streamscope.events import kinds
from streamscope.format.complete import merge_rank_indexes, merge_written_ranks
from streamscope.format.compression import parse_compression
from streamscope.format.index import INDEX_FILENAME, write_partial_index
from streamscope.format.ordered_chunks import OrderedChunks
from streamscope.format.writer import ChunkWriter, convert_chunk_bytes, resolve_write_format

__all__ = ["BinaryWriter", "index_parquet_dataset"]


class BinaryWriter:
    """Write samples into LitData chunk files and index files in ``cache_dir`` (LitData's signature).

    Args:
        cache_dir: directory receiving the chunks and index files (created if missing).
        chunk_size, chunk_bytes: exactly one: max items (tokens for TokensLoader) or max bytes (an int, or a string
            such as "64MB", decimal units) per chunk.
        compression: None, "zstd" or "zstd:N"; ``compression_level`` how zstd wraps a chunk (LitData 0.2.76):
            "batch" (default: frames of ``compression_batch_size`` items, default 256, inside ``.bin``), "sample"
            (a frame per item) or "chunk" (the whole file, ``.zstd.bin``: the only one of write_format "0.2.68").
        encryption, serializers: a key (``streamscope.utilities.encryption``); extra serializers by name.
        chunk_index, item_loader: the first chunk's index (0); ``PyTreeLoader()`` (default) or ``TokensLoader()``.
        write_format: "0.2.76" or "0.2.68" (streamscope addition; default: the ``write_format`` knob).
    """

    def __init__(
        self,
        cache_dir: str,
        chunk_size: int | None = None,
        chunk_bytes: int | str | None = None,
        compression: str | None = None,
        compression_level: str | None = None,
        compression_batch_size: int | None = None,
        encryption: Any | None = None,
        follow_tensor_dimension: bool = True,
        serializers: dict[str, Any] | None = None,
        chunk_index: int | None = None,
        item_loader: Any | None = None,
        msg_queue: Any | None = None,
        write_format: str | None = None,
    ) -> None:
        if cache_dir is None:
            raise FileNotFoundError("BinaryWriter needs a cache_dir")
        os.makedirs(cache_dir, exist_ok=True)
        if (chunk_size is None and chunk_bytes is None) or (chunk_size and chunk_bytes):
            raise ValueError("Either one of the `chunk_size` or the `chunk_bytes` need to be provided.")
        self._write_format = resolve_write_format(write_format)
        if self._write_format == "0.2.68":
            parse_compression(compression)  # before the other checks, as LitData
        self._cache_dir = str(cache_dir)
        self._chunk_args: dict[str, Any] = dict(  # the ChunkWriter's, but for the rank (known at the first item)
            chunk_size=chunk_size,
            chunk_bytes=convert_chunk_bytes(chunk_bytes),  # an int, as LitData keeps it
            compression=compression,
            item_loader=item_loader,
            serializers=serializers,
            chunk_index=chunk_index or 0,
            encryption=encryption,
            write_format=self._write_format,
            compression_level=compression_level,
            compression_batch_size=compression_batch_size,
        )
        self.msg_queue = msg_queue
        self._rank: int | None = None
        self._is_done = False
        self._ordered = OrderedChunks()  # the samples not yet in a chunk, by index
        ChunkWriter(self._cache_dir, rank=0, **self._chunk_args)  # checks the arguments now, as LitData does
        self._writer: ChunkWriter | None = None

    @property
    def writer(self) -> ChunkWriter:
        """The underlying format-layer writer (created on first use, once the rank is known)."""
        if self._writer is None:
            self._writer = ChunkWriter(self._cache_dir, rank=self.rank, **self._chunk_args)
        return self._writer

    @property
    def rank(self) -> int:
        """``DATA_OPTIMIZER_GLOBAL_RANK`` if set, else ``global_rank * num_workers + worker_id``."""
        if self._rank is None:
            self._rank = writer_rank()
        return self._rank

    @property
    def filled(self) -> bool:
        """True once ``done()`` ran or the directory already holds ``index.json``."""
        return self._is_done or os.path.exists(os.path.join(self._cache_dir, INDEX_FILENAME))

    def get_config(self) -> dict[str, Any]:
        """The index ``config`` of what has been written (``data_format``/``data_spec`` None before any item)."""
        return self.writer.index_config()

    def get_chunk_filename(self) -> str:
        """``chunk-{rank}-{index}[.{compression}].bin`` of the next chunk."""
        return self.writer.filename()

    def __setitem__(self, index: int, items: Any) -> None:
        self.add_item(index, items)

    def add_item(self, index: int, items: Any) -> str | None:
        """Serialize sample ``items`` at ``index`` (any order; raises as :meth:`OrderedChunks.add`); returns a
        chunk's path when one was written."""
        entry = self._ordered.add(self.writer, index, items)
        return None if entry is None else os.path.join(self._cache_dir, entry["filename"])

    def write_chunks_index(self) -> str:
        """Write ``{rank}.index.json`` (nothing, and ``""``, when no chunk was written)."""
        chunks = self.writer.chunks
        return write_partial_index(self._cache_dir, self.rank, chunks, self.get_config()) if chunks else ""

    def done(self) -> list[str]:
        """Write the last chunk and this rank's index file; returns the paths of the chunks written now."""
        if self.filled:
            return []
        with kinds.chunk_write(rank=self.rank):
            closed = self._ordered.flush(self.writer) + self.writer.done()
        self.write_chunks_index()
        self._is_done = True
        return [os.path.join(self._cache_dir, c["filename"]) for c in closed]

    def merge(self, num_workers: int = 1, node_rank: int | None = None, timeout: float = 600.0) -> None:
        """Rank 0 merges the ``world_size * num_workers`` ranks' index files into ``index.json`` (or
        ``{node_rank}-index.json``) once written, the others wait for it; ``FormatError`` after ``timeout`` seconds
        (streamscope addition: LitData waits forever), or when the configs differ."""
        expected = DistEnv.detect().world_size * (num_workers or 1) if self.rank == 0 else 0
        merge_written_ranks(self._cache_dir, self.rank, expected, timeout, node_rank)

    def _merge_no_wait(self, node_rank: int | None = None, existing_index: dict[str, Any] | None = None) -> None:
        merge_rank_indexes(self._cache_dir, node_rank, existing_index)
