"""The engine's chunk reader over a dataset in LitData's stored layout, for LitData's reader faces
(``streaming/reader.py``'s ``BinaryReader``, and ``Cache``, which reads through it).

It is a :class:`~streamscope.engine.reader.ChunkReader` (one per process, leases, refetch after another process's
eviction) whose chunks open as the index ``config`` says: encrypted chunks are decrypted in memory, never written
plain; LitData 0.2.76's per-sample zstd chunks are read where they are, one item inflated at a time; the other
kinds as their bytes say (:func:`~streamscope.format.chunk.open_chunk_file`). :func:`stored_reader` picks where the
chunks come from: a local dataset's plain chunks are read in place (no lease, no copy); a remote dataset's, or
whole-file compressed ones, through a :class:`~streamscope.cache.chunk_cache.ChunkCache` on the dataset folder
itself (``as_stored``: LitData's file layout), downloaded and decompressed there once for every process reading it.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

from streamscope._core.errors import CorruptChunkError, DatasetIndexError, FormatError
from streamscope._core.protocols import ObjectStore
from streamscope.cache.chunk_cache import ChunkCache
from streamscope.cache.leases import process_leases
from streamscope.engine.reader import ChunkReader, OpenChunk
from streamscope.events import kinds
from streamscope.format.arrowchunk import ARROW_MAGIC, ArrowChunk, check_footer_magic
from streamscope.format.chunk import ChunkFile, open_chunk_file, parse_header
from streamscope.format.compression import uncompressed_name
from streamscope.format.encryption import check_encryption
from streamscope.format.index import load_index
from streamscope.format.item_loader import BaseItemLoader, TokensLoader
from streamscope.format.v076 import decrypt_to_classic, open_chunk_bytes

__all__ = ["StoredChunkReader", "StoredIndex", "stored_reader"]


class _BytesChunk(ChunkFile):
    """A decrypted chunk held in memory, with the same item access as a mapped :class:`ChunkFile`."""

    def __init__(self, data: bytes, name: str, expected_items: int | None) -> None:  # noqa: D107
        self.path = name
        self._mm = None
        self._view = memoryview(data)
        self._offsets = parse_header(self._view, name, len(data), expected_items)
        self.size = len(data)
        self.num_items = len(self._offsets) - 1
        self.header_size = 4 * (self.num_items + 2)
        self._starts = self._offsets.tolist()


class StoredChunkReader(ChunkReader):
    """A :class:`ChunkReader` whose chunks open as the index ``config`` says (see the module docstring)."""

    def __init__(
        self,
        chunks: Sequence[dict[str, Any]],
        local_dir: str | None,
        cache: ChunkCache | None,
        config: dict[str, Any],
        encryption: Any,
    ) -> None:
        super().__init__(chunks, local_dir, cache, lambda: 0)
        self._config = config
        self._encryption = encryption

    def _open_file(self, chunk: int, path: str, num_items: int) -> OpenChunk:
        if self.cache is None and not os.path.exists(path):
            raise FileNotFoundError(f"chunk {path!r} (chunk {chunk} of index.json) does not exist")
        encrypted = self._config.get("encryption")
        if encrypted:
            with open(path, "rb") as f:
                data = f.read()
            name = self.chunks[chunk]["filename"]
            with kinds.decrypt(chunk=chunk, file=name):
                plain = decrypt_to_classic(data, self._encryption, encrypted["level"], name, self._config)
            cf: Any = _BytesChunk(plain, name, num_items)
            if cf.size != cf._starts[-1]:
                if plain[-8:] != ARROW_MAGIC:
                    check_footer_magic(plain[-8:], name)
                    raise CorruptChunkError(
                        f"chunk {name!r}: items end at offset {cf._starts[-1]} but it has {cf.size} bytes"
                    )
                cf = ArrowChunk(plain, name, num_items)
        elif self._config.get("compression_level") == "sample":  # items are zstd frames: inflated one at a time
            cf = open_chunk_bytes(path, self._config, num_items)
        else:
            cf = open_chunk_file(path, num_items)
        return OpenChunk(chunk, cf, cf)


def stored_reader(
    folder: str,
    chunks: Sequence[dict[str, Any]],
    config: dict[str, Any],
    *,
    remote_input_dir: str | None,
    open_store: Callable[[], ObjectStore],
    budget: int | None,
    encryption: Any,
) -> StoredChunkReader:
    """The reader of the dataset stored (or cached, in its stored layout) in ``folder``.

    Args:
        folder: the local dataset folder, or where a remote dataset's files are kept.
        chunks, config: the index's chunk entries and ``config``.
        remote_input_dir: the dataset's URL when ``folder`` is not the dataset itself (None: a local dataset).
        open_store: the store to fetch from (the remote dataset, or one over ``folder`` whose whole-file compressed
            chunks are decompressed beside the stored ones); called only when the cache is needed.
        budget: bytes of chunk files ``folder`` may hold before a chunk no reader holds is evicted; None: no limit
            (nor when ``folder`` is the dataset's own files, a ``local:`` URL of it included).
        encryption: the key of an encrypted dataset.
    """
    compression = config.get("compression")
    if not remote_input_dir and all(uncompressed_name(c["filename"], compression) == c["filename"] for c in chunks):
        return StoredChunkReader(chunks, folder, None, config, encryption)
    url = str(remote_input_dir or "")
    source = url[len("local:") :] if url.startswith("local:") else None
    if not url or (source is not None and os.path.realpath(source) == os.path.realpath(folder)):
        budget = None  # the dataset's own files are the cache: nothing there is evicted
    cache = ChunkCache(open_store(), folder, chunks, compression, budget, process_leases(), config, as_stored=True)
    return StoredChunkReader(chunks, None, cache, config, encryption)


class StoredIndex:
    """The index.json of a stored dataset as a reader face uses it: ``config``, the kept chunk entries and their
    ``intervals`` ``(chunk_start, roi_start, roi_end, chunk_end)`` in global item indexes; ``item_loader`` is set up
    on the kept chunks and the key checked.

    Raises:
        FormatError: ``region_of_interest`` does not have one entry per kept chunk.
    """

    def __init__(
        self,
        path: str,
        subsampled_files: Sequence[str] | None,
        region_of_interest: Sequence[tuple[int, int]] | None,
        item_loader: BaseItemLoader,
        serializers: dict[str, Any] | None,
        encryption: Any,
        what: str,
    ) -> None:
        index = load_index(path)
        config, chunks = index["config"], index["chunks"]
        if subsampled_files is not None:
            wanted = set(subsampled_files)
            chunks = [c for c in chunks if c["filename"] in wanted]
        item_loader.setup(config, serializers, chunks)
        check_encryption(config.get("encryption"), encryption, what)
        tokens = isinstance(item_loader, TokensLoader)
        sizes = [item_loader.blocks_in_chunk(c) if tokens else int(c["chunk_size"]) for c in chunks]  # type: ignore[attr-defined]
        roi = region_of_interest or [(0, n) for n in sizes]
        if len(roi) != len(sizes):
            raise FormatError(f"region_of_interest has {len(roi)} entries for {len(sizes)} chunks")
        self.config: dict[str, Any] = config
        self.chunks: list[dict[str, Any]] = chunks
        self.intervals: list[tuple[int, int, int, int]] = []
        begin = 0
        for n, (a, b) in zip(sizes, roi):
            self.intervals.append((begin, begin + a, begin + b, begin + n))
            begin += n

    def roi_position(self, index: int, folder: str) -> tuple[int, int]:
        """(global item index, chunk index) of the ``index``-th item of the regions of interest (of ``folder``)."""
        pos = index
        for c, (_, a, b, _) in enumerate(self.intervals):
            if 0 <= pos < b - a:
                return a + pos, c
            pos -= b - a
        raise DatasetIndexError(f"index {index} is outside the regions of interest of {folder!r}")

    def local_item(self, chunk: int, index: int) -> int:
        """Item ``index`` (global) as an item of ``chunk``.

        Raises:
            DatasetIndexError: no such chunk, or the item is not in it.
        """
        if not 0 <= chunk < len(self.intervals):
            raise DatasetIndexError(f"chunk_index {chunk} is outside the {len(self.intervals)} chunks")
        start, _, _, end = self.intervals[chunk]
        if not start <= index < end:
            raise DatasetIndexError(f"item {index} is not in chunk {chunk} (items {start}..{end - 1})")
        return index - start
