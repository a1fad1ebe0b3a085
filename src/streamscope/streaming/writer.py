"""``litdata.streaming.writer.BinaryWriter`` at the same path: LitData's writer API over streamscope's ChunkWriter.

The chunk files are written by :class:`streamscope.format.writer.ChunkWriter`, byte-identical to LitData's, in
the layout the ``write_format`` knob names (default LitData 0.2.76's; ``write_format=`` overrides it per writer).
This class adds LitData's bookkeeping around it: the writer's rank (``DATA_OPTIMIZER_GLOBAL_RANK``, else
``global_rank * num_dataloader_workers + worker_id``), the per-rank ``{rank}.index.json`` written by
:meth:`BinaryWriter.done`, and :meth:`BinaryWriter.merge` into ``index.json``.

Indexes may come in any order, as in LitData: each sample is encoded as it comes and held until the
consecutive run from the lowest index held fills a chunk; that chunk is then written (a chunk holds consecutive
indexes). The chunks are LitData's wherever LitData's are right. Differences from LitData 0.2.68: an index
below the chunks already written, or a gap left at :meth:`BinaryWriter.done`, raises
:class:`~streamscope._core.errors.FormatError` naming the index (LitData writes the late index into a later
chunk, and fails an ``assert`` on a gap); the indexes still held at ``done()`` are split at the chunk limit
(LitData writes them as one chunk, over the limit); ``merge`` waits at most ``timeout`` seconds for the other
ranks' index files (LitData waits forever) and raises :class:`~streamscope._core.errors.FormatError` naming
what is missing; ``follow_tensor_dimension`` and ``msg_queue`` are accepted and unused; no ``save_checkpoint``.
"""

from __future__ import annotations

import os
import re
import time
from typing import Any

from streamscope import events as ev
from streamscope._core.errors import FormatError
from streamscope.engine.distributed import DistEnv, WorkerEnv
from streamscope.engine.parquet import index_parquet_dataset  # LitData defines it in this module
from streamscope.format.compression import parse_compression
from streamscope.format.index import (
    INDEX_FILENAME,
    load_partial_index,
    merge_indexes,
    natural_key,
    write_index,
    write_partial_index,
)
from streamscope.format.writer import ChunkWriter, PendingItem, convert_chunk_bytes, resolve_write_format

__all__ = ["BinaryWriter", "index_parquet_dataset"]

_WORKER_INDEX = re.compile(r"^\d+\.index\.json$")
_NODE_INDEX = re.compile(r"^\d+-index\.json$")


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
        # samples not yet in a chunk, by index: encoded bytes and dim (see the module docstring)
        self._held: dict[int, PendingItem] = {}
        self._run: list[int] = []  # [first index, next index to scan, bytes, count] of the run being scanned
        self._written_below: int | None = None  # every index below this one is in a chunk already
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
        if index in self._held:
            raise ValueError(f"The provided index {index} already exists in the cache.")
        if self._written_below is not None and index < self._written_below:
            raise FormatError(
                f"sample index {index} came after the chunks holding every index below {self._written_below} were "
                "written (a chunk holds consecutive indexes; add each index before the run it belongs to fills a chunk)"
            )
        writer = self.writer
        self._held[index] = writer.encode(index, items)
        if self._run and index < self._run[0]:
            self._run = []  # a lower index: the run starts there now
        # at most one chunk per call, as LitData: the item that crossed the limit waits for the next call (or
        # done()), so a lower index still missing can come before a chunk of it is written
        end = self._full_run()
        return None if end is None else self._write_run(end)

    def _full_run(self) -> int | None:
        """The end (exclusive) of the chunk the consecutive run from the lowest held index fills, if it does."""
        if not self._held:
            return None
        if not self._run:
            first = min(self._held)
            self._run = [first, first, 0, 0]
        first, nxt, nbytes, count = self._run
        while nxt in self._held:
            item = self._held[nxt]
            nbytes += self.writer.account_bytes(item)
            count += item.dim if item.dim else 1
            nxt += 1
            if self.writer.over_limit(nbytes, count):
                self._run = []
                return max(nxt - 1, first + 1)  # without the item that crossed the limit, unless it is alone
        self._run = [first, nxt, nbytes, count]
        return None

    def _write_run(self, end: int) -> str:
        first = min(self._held)
        writer = self.writer
        closed: list[dict[str, Any]] = []
        for i in range(first, end):
            closed += writer.add_encoded(self._held.pop(i))
        closed += writer.close_chunk()
        self._written_below = end
        return os.path.join(self._cache_dir, closed[-1]["filename"])

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
            closed = self._flush_held()
            closed += self.writer.done()
        self.write_chunks_index()
        self._is_done = True
        return [os.path.join(self._cache_dir, c["filename"]) for c in closed]

    def _flush_held(self) -> list[dict[str, Any]]:
        """Hand the samples still held to the chunk writer, in index order (they must be consecutive)."""
        if not self._held:
            return []
        indexes = sorted(self._held)
        gaps = [i + 1 for i, j in zip(indexes, indexes[1:]) if j != i + 1]
        if gaps:
            raise FormatError(
                f"done(): index {gaps[0]} was never added, but indexes after it were ({len(self._held)} samples "
                "held); a chunk holds consecutive indexes"
            )
        writer = self.writer
        closed: list[dict[str, Any]] = []
        for i in indexes:
            closed += writer.add_encoded(self._held.pop(i))
        self._run = []
        return closed

    def merge(self, num_workers: int = 1, node_rank: int | None = None, timeout: float = 600.0) -> None:
        """Merge every rank's index file into ``index.json`` (rank 0), or wait for it (other ranks).

        Args:
            num_workers: writers per process; rank 0 waits for ``world_size * num_workers`` index files.
            node_rank: write ``{node_rank}-index.json`` instead of ``index.json`` (multi-node).
            timeout: seconds to wait for the other ranks (streamscope addition; LitData waits forever).

        Raises:
            FormatError: the index files did not all appear in time, or their configs differ.
        """
        num_workers = num_workers or 1
        final = os.path.join(self._cache_dir, INDEX_FILENAME)
        deadline = time.monotonic() + timeout
        if self.rank != 0:
            while not os.path.exists(final):
                if time.monotonic() > deadline:
                    raise FormatError(f"rank {self.rank}: {final!r} did not appear within {timeout:.0f} s")
                time.sleep(0.01)
            return
        world_size = DistEnv.detect().world_size
        expected = world_size * num_workers
        while True:
            names = os.listdir(self._cache_dir)
            if INDEX_FILENAME in names:
                return
            parts = [n for n in names if _WORKER_INDEX.match(n)]
            if len(parts) >= expected:
                break
            if time.monotonic() > deadline:
                raise FormatError(
                    f"{self._cache_dir!r}: {len(parts)} of {expected} per-rank index files after {timeout:.0f} s "
                    f"(found {sorted(parts)}); a rank that wrote no chunk writes none"
                )
            time.sleep(0.01)
        self._merge_no_wait(node_rank=node_rank)

    def _merge_no_wait(self, node_rank: int | None = None, existing_index: dict[str, Any] | None = None) -> None:
        listed = os.listdir(self._cache_dir)
        names = [n for n in listed if _WORKER_INDEX.match(n) or (node_rank is None and _NODE_INDEX.match(n))]
        paths = [os.path.join(self._cache_dir, n) for n in sorted(names, key=natural_key)]
        with ev.span("index_merge", "read", files=len(names)):
            chunks, config = merge_indexes((load_partial_index(p) for p in paths), existing_index)
            if node_rank is None:
                write_index(os.path.join(self._cache_dir, INDEX_FILENAME), chunks, config)
            else:
                write_index(os.path.join(self._cache_dir, f"{node_rank}-{INDEX_FILENAME}"), chunks, config, None)
            for path in paths:
                os.remove(path)
