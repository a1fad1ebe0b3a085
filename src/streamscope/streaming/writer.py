"""``litdata.streaming.writer.BinaryWriter`` at the same path: LitData's writer API over streamscope's ChunkWriter.

The chunk files are written by :class:`streamscope.format.writer.ChunkWriter`, byte-identical to LitData's, in
the layout the ``write_format`` knob names (default LitData 0.2.76's; ``write_format=`` overrides it per writer).
This class adds LitData's bookkeeping around it: the writer's rank (``DATA_OPTIMIZER_GLOBAL_RANK``, else
``global_rank * num_dataloader_workers + worker_id``), the per-rank ``{rank}.index.json`` written by
:meth:`BinaryWriter.done`, and :meth:`BinaryWriter.merge` into ``index.json``.

Indexes may come in any order, as in LitData (:mod:`streamscope.format.ordered_chunks` holds them until they
fill a chunk of consecutive indexes, and says where it differs from LitData 0.2.68); ``merge`` is
:func:`streamscope.format.complete.merge_index_files` after waiting at most ``timeout`` seconds for the other
ranks' index files (LitData waits forever; streamscope raises :class:`~streamscope._core.errors.FormatError`
naming what is missing). ``follow_tensor_dimension`` and ``msg_queue`` are accepted and unused; no
``save_checkpoint``.
"""

from __future__ import annotations

import os
from typing import Any

from streamscope import events as ev
from streamscope.engine.distributed import DistEnv, WorkerEnv
from streamscope.engine.parquet import index_parquet_dataset  # LitData defines it in this module
from streamscope.format.complete import index_file_names, merge_index_files, wait_for_index_files
from streamscope.format.compression import parse_compression
from streamscope.format.index import INDEX_FILENAME, write_partial_index
from streamscope.format.ordered_chunks import OrderedChunks
from streamscope.format.writer import ChunkWriter, convert_chunk_bytes, resolve_write_format

__all__ = ["BinaryWriter", "index_parquet_dataset"]


class BinaryWriter:
    """Write samples into LitData chunk files and index files in ``cache_dir`` (LitData's signature).

    Args:
        cache_dir: directory receiving the chunks and index files (created if missing).
        chunk_size: max items per chunk (max tokens for TokensLoader); exactly one of chunk_size/chunk_bytes.
        chunk_bytes: max bytes per chunk (int, or a string such as "64MB", decimal units).
        compression: None, "zstd" or "zstd:N".
        compression_level: how zstd wraps a chunk (LitData 0.2.76): "batch" (default with zstd: frames of
            ``compression_batch_size`` items inside ``.bin``), "sample" (one frame per item) or "chunk" (the
            whole file, ``.zstd.bin``, as 0.2.68); write_format "0.2.68" accepts only None or "chunk".
        compression_batch_size: items per zstd frame at level "batch" (default 256).
        encryption: a key from ``streamscope.utilities.encryption`` (sample or chunk level).
        follow_tensor_dimension: accepted for compatibility (unused).
        serializers: extra serializers by name, tried before the built-ins.
        chunk_index: index of the first chunk file (default 0).
        item_loader: ``PyTreeLoader()`` (default) or ``TokensLoader()``.
        msg_queue: accepted for compatibility (unused).
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
        self._chunk_size = chunk_size
        self._chunk_bytes = convert_chunk_bytes(chunk_bytes)  # an int, as LitData keeps it
        self._compression = compression
        self._compression_level = compression_level
        self._compression_batch_size = compression_batch_size
        self._encryption = encryption
        self._follow_tensor_dimension = follow_tensor_dimension
        self._serializers = serializers
        self._first_chunk_index = chunk_index or 0
        self._item_loader = item_loader
        self.msg_queue = msg_queue
        self._rank: int | None = None
        self._writer: ChunkWriter | None = None
        self._is_done = False
        self._ordered = OrderedChunks()  # the samples not yet in a chunk (see the module docstring)
        # validate the arguments now (LitData raises in its constructor too)
        self._make_writer(rank=0)
        self._writer = None

    def _make_writer(self, rank: int) -> ChunkWriter:
        return ChunkWriter(
            self._cache_dir,
            chunk_size=self._chunk_size,
            chunk_bytes=self._chunk_bytes,
            compression=self._compression,
            item_loader=self._item_loader,
            serializers=self._serializers,
            rank=rank,
            chunk_index=self._first_chunk_index,
            encryption=self._encryption,
            write_format=self._write_format,
            compression_level=self._compression_level,
            compression_batch_size=self._compression_batch_size,
        )

    @property
    def writer(self) -> ChunkWriter:
        """The underlying format-layer writer (created on first use, once the rank is known)."""
        if self._writer is None:
            self._writer = self._make_writer(self.rank)
        return self._writer

    @property
    def rank(self) -> int:
        """``DATA_OPTIMIZER_GLOBAL_RANK`` if set, else ``global_rank * num_workers + worker_id``."""
        if self._rank is None:
            env = os.getenv("DATA_OPTIMIZER_GLOBAL_RANK")
            if env:
                self._rank = int(env)
            else:
                worker = WorkerEnv.detect()
                self._rank = DistEnv.detect().rank * worker.num_workers + worker.worker_id
        return self._rank

    @property
    def filled(self) -> bool:
        """True once ``done()`` ran or the directory already holds ``index.json``."""
        return self._is_done or os.path.exists(os.path.join(self._cache_dir, INDEX_FILENAME))

    def get_config(self) -> dict[str, Any]:
        """The index ``config`` of what has been written (``data_format``/``data_spec`` None before any item)."""
        if self._writer is not None and self._writer.config is not None:
            return dict(self._writer.config)
        out = {
            "compression": self._compression,
            "chunk_size": self._chunk_size,
            "chunk_bytes": self.writer.chunk_bytes_limit,
            "data_format": None,
            "data_spec": None,
            "encryption": self._encryption.state_dict() if self._encryption is not None else None,
            "item_loader": self.writer.item_loader.name,
        }
        if self._write_format == "0.2.76":
            out.update(compression_level=None, compression_batch_size=None, ipc_compression=None, types=None)
        return out

    def get_chunk_filename(self) -> str:
        """``chunk-{rank}-{index}[.{compression}].bin`` of the next chunk."""
        return self.writer.filename()

    def __setitem__(self, index: int, items: Any) -> None:
        self.add_item(index, items)

    def add_item(self, index: int, items: Any) -> str | None:
        """Serialize sample ``items`` at ``index`` (any order); returns a chunk's path when one was written.

        Raises:
            ValueError: ``index`` was added already (LitData's message).
            FormatError: ``index`` is below a chunk already written, or the sample does not fit the first one.
        """
        entry = self._ordered.add(self.writer, index, items)
        return None if entry is None else os.path.join(self._cache_dir, entry["filename"])

    def write_chunks_index(self) -> str:
        """Write ``{rank}.index.json`` (nothing, and ``""``, when no chunk was written)."""
        chunks = self.writer.chunks
        if not chunks:
            return ""
        return write_partial_index(self._cache_dir, self.rank, chunks, self.get_config())

    def done(self) -> list[str]:
        """Write the last chunk and this rank's index file; returns the paths of the chunks written now."""
        if self.filled:
            return []
        with ev.span("chunk_write", "write", rank=self.rank):
            closed = self._ordered.flush(self.writer)
            closed += self.writer.done()
        self.write_chunks_index()
        self._is_done = True
        return [os.path.join(self._cache_dir, c["filename"]) for c in closed]

    def merge(self, num_workers: int = 1, node_rank: int | None = None, timeout: float = 600.0) -> None:
        """Merge every rank's index file into ``index.json`` (rank 0), or wait for it (other ranks).

        Args:
            num_workers: writers per process; rank 0 waits for ``world_size * num_workers`` index files.
            node_rank: write ``{node_rank}-index.json`` instead of ``index.json`` (multi-node).
            timeout: seconds to wait for the other ranks (streamscope addition; LitData waits forever).

        Raises:
            FormatError: the index files did not all appear in time, or their configs differ.
        """
        if self.rank != 0:
            wait_for_index_files(self._cache_dir, None, timeout, f"rank {self.rank}")
            return
        expected = DistEnv.detect().world_size * (num_workers or 1)
        if wait_for_index_files(self._cache_dir, expected, timeout, "rank 0"):
            self._merge_no_wait(node_rank=node_rank)

    def _merge_no_wait(self, node_rank: int | None = None, existing_index: dict[str, Any] | None = None) -> None:
        names = index_file_names(self._cache_dir, node_rank)
        with ev.span("index_merge", "read", files=len(names)):
            merge_index_files(self._cache_dir, names, node_rank=node_rank, existing=existing_index)
