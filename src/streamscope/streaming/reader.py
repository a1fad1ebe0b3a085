"""``litdata.streaming.reader.BinaryReader`` at the same path: read items of an optimized dataset by ChunkedIndex.

A small, synchronous reader built on the format layer (no prefetch thread): for training use
:class:`~streamscope.engine.StreamingDataset`. Chunks of a remote dataset (``remote_input_dir``) are
downloaded into ``cache_dir`` on first use; whole-file compressed chunks are decompressed next to them
(``chunk-R-I.bin``); LitData 0.2.76's framed and per-sample zstd chunks are read where they are, one frame or
item inflated at a time, and its Arrow-footer chunks by row; encrypted chunks are decrypted in memory (one chunk
kept), never written plain. With
``max_cache_size``, a remote dataset's chunk is deleted from ``cache_dir`` (its download and its decompressed
copy) once the reader moves past it while the chunk files there exceed that size, as LitData's reader does.
``max_pre_download``, ``session_options`` and ``on_demand_bytes`` are accepted and unused.
"""

from __future__ import annotations

import os
from collections import namedtuple
from dataclasses import dataclass
from typing import Any

from streamscope import events as ev
from streamscope._core.errors import CorruptChunkError, DatasetIndexError, FormatError, IndexNotFoundError
from streamscope.format.arrowchunk import ARROW_MAGIC, ArrowChunk, check_footer_magic
from streamscope.format.chunk import ChunkFile, decompress_file, open_chunk_file, parse_header
from streamscope.format.compression import uncompressed_name
from streamscope.format.encryption import check_encryption
from streamscope.format.index import load_index
from streamscope.format.item_loader import BaseItemLoader, PyTreeLoader, TokensLoader
from streamscope.format.v076 import decrypt_to_classic, open_chunk_bytes
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


class BinaryReader:
    """Read items of the optimized dataset in ``cache_dir`` (or ``remote_input_dir``) by :class:`ChunkedIndex`.

    Args:
        cache_dir: local dataset directory, or where a remote dataset's files are downloaded to.
        subsampled_files: only these chunk file names (index order kept).
        region_of_interest: per kept chunk, the ``(start, end)`` local item range to read.
        max_cache_size: for a remote dataset, the bytes of chunk files ``cache_dir`` may hold before a chunk the
            reader has moved past is deleted (int, or a string such as ``"10GB"``); None keeps every chunk.
        remote_input_dir: URL of the dataset when it is not in ``cache_dir``.
        compression: accepted; the index's ``config["compression"]`` is what is used.
        encryption: the key of an encrypted dataset.
        item_loader: ``PyTreeLoader()`` (default) or ``TokensLoader(block_size)``.
        serializers: extra serializers by name.
        storage_options: options for the remote store.
        session_options: accepted (unused).
        max_pre_download: accepted (no prefetch here).
        on_demand_bytes: accepted (whole chunks are read).
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
        storage_options: dict | None = None,
        session_options: dict | None = None,
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
        self._max_cache_bytes = convert_chunk_bytes(max_cache_size) if max_cache_size is not None else None
        self._max_pre_download = max_pre_download
        self.on_demand_bytes = on_demand_bytes
        self._config: dict[str, Any] | None = None
        self._chunks: list[dict[str, Any]] = []
        self._intervals: list[Interval] = []
        self._open: tuple[int, Any] | None = None
        self._store: Any = None

    # --- index -------------------------------------------------------------------------------------

    def _remote(self) -> Any:
        if self._store is None:
            from streamscope.storage import open_store  # noqa: PLC0415

            self._store = open_store(self._remote_input_dir, self._storage_options)
        return self._store

    def _try_load_config(self) -> dict[str, Any] | None:
        path = os.path.join(self._cache_dir, "index.json")
        if not os.path.exists(path) and self._remote_input_dir:
            self._remote().download_file("index.json", path)
        if not os.path.exists(path):
            return None
        index = load_index(path)
        config = index["config"]
        chunks = index["chunks"]
        if self.subsampled_files is not None:
            wanted = set(self.subsampled_files)
            chunks = [c for c in chunks if c["filename"] in wanted]
        self._item_loader.setup(config, self._serializers, chunks)
        check_encryption(config.get("encryption"), self._encryption, repr(self._remote_input_dir or self._cache_dir))
        tokens = isinstance(self._item_loader, TokensLoader)
        sizes = [self._item_loader.blocks_in_chunk(c) if tokens else int(c["chunk_size"]) for c in chunks]  # type: ignore[attr-defined]
        roi = self.region_of_interest or [(0, n) for n in sizes]
        if len(roi) != len(sizes):
            raise FormatError(f"region_of_interest has {len(roi)} entries for {len(sizes)} chunks")
        intervals, begin = [], 0
        for n, (a, b) in zip(sizes, roi):
            intervals.append(Interval(begin, begin + a, begin + b, begin + n))
            begin += n
        self._config, self._chunks, self._intervals = config, chunks, intervals
        return config

    def _ensure(self) -> dict[str, Any]:
        if self._config is None and self._try_load_config() is None:
            raise IndexNotFoundError(f"no index.json in {self._cache_dir!r}: the reader index isn't defined")
        assert self._config is not None
        return self._config

    @property
    def config(self) -> dict[str, Any]:
        """The index.json ``config`` (streamscope: a dict; LitData returns its ChunksConfig object)."""
        return self._ensure()

    @property
    def rank(self) -> int:
        """This process's rank for reading (the DataLoader worker id, 0 outside workers)."""
        from streamscope.engine.distributed import WorkerEnv  # noqa: PLC0415

        return WorkerEnv.detect().worker_id

    def get_length(self) -> int:
        """Number of items of the kept chunks (LitData: the last interval's ``chunk_end``, regions ignored)."""
        self._ensure()
        return self._intervals[-1].chunk_end if self._intervals else 0

    def get_chunk_intervals(self) -> list[Interval]:
        """``Interval(chunk_start, roi_start_idx, roi_end_idx, chunk_end)`` of each chunk (global item indexes)."""
        self._ensure()
        return list(self._intervals)

    def _get_chunk_index_from_index(self, index: int) -> tuple[int, int]:
        """(global item index, chunk index) of the ``index``-th item of the regions of interest."""
        self._ensure()
        pos = index
        for c, iv in enumerate(self._intervals):
            n = iv.roi_end_idx - iv.roi_start_idx
            if 0 <= pos < n:
                return iv.roi_start_idx + pos, c
            pos -= n
        raise DatasetIndexError(f"index {index} is outside the regions of interest of {self._cache_dir!r}")

    # --- chunks ------------------------------------------------------------------------------------

    def _local_plain(self, c: int) -> str:
        """Local path of chunk ``c`` as stored (downloaded and decompressed when needed)."""
        entry = self._chunks[c]
        name = entry["filename"]
        comp = self._config.get("compression") if self._config else None
        plain = os.path.join(self._cache_dir, uncompressed_name(name, comp))
        if os.path.exists(plain):
            return plain
        src = os.path.join(self._cache_dir, name)
        if not os.path.exists(src):
            if not self._remote_input_dir:
                raise FileNotFoundError(f"chunk {src!r} (chunk {c} of index.json) does not exist")
            with ev.span("download", "download", chunk=c, file=name):
                self._remote().download_file(name, src)
        if plain != src:  # whole-file zstd; 0.2.76's framed and per-sample zstd chunks are read as they are
            decompress_file(src, plain, comp or "zstd", config=self._config)
        return plain

    def _chunk(self, c: int) -> Any:
        if self._open is not None and self._open[0] == c:
            return self._open[1]
        self.close()
        assert self._config is not None
        path = self._local_plain(c)
        expected = int(self._chunks[c]["chunk_size"])
        encrypted = self._config.get("encryption")
        if encrypted:
            with open(path, "rb") as f:
                data = f.read()
            name = self._chunks[c]["filename"]
            with ev.span("decrypt", "read", chunk=c, file=name):
                plain = decrypt_to_classic(data, self._encryption, encrypted["level"], name, self._config)
            cf: Any = _BytesChunk(plain, name, expected)
            if cf.size != cf._starts[-1]:
                if plain[-8:] != ARROW_MAGIC:
                    check_footer_magic(plain[-8:], name)
                    raise CorruptChunkError(
                        f"chunk {name!r}: items end at offset {cf._starts[-1]} but it has {cf.size} bytes"
                    )
                cf = ArrowChunk(plain, name, expected)
        elif self._config.get("compression_level") == "sample":  # items are zstd frames: inflated one at a time
            cf = open_chunk_bytes(path, self._config, expected)
        else:
            cf = open_chunk_file(path, expected)
        self._open = (c, cf)
        return cf

    def read(self, index: ChunkedIndex) -> Any:
        """The item at ``index`` (``index.index`` is global; ``index.chunk_index`` the chunk holding it)."""
        if not isinstance(index, ChunkedIndex):
            raise ValueError("The Reader.read(...) method expects a chunked Index.")
        self._ensure()
        c = index.chunk_index
        if not 0 <= c < len(self._intervals):
            raise DatasetIndexError(f"chunk_index {c} is outside the {len(self._intervals)} chunks")
        iv = self._intervals[c]
        local = index.index - iv.chunk_start
        if not 0 <= local < iv.chunk_end - iv.chunk_start:
            raise DatasetIndexError(
                f"item {index.index} is not in chunk {c} (items {iv.chunk_start}..{iv.chunk_end - 1})"
            )
        cf = self._chunk(c)
        with ev.span("read_item", "sample", chunk=c, index=index.index):
            if isinstance(self._item_loader, TokensLoader):
                item = self._item_loader.read_block(cf, local)
            else:  # the chunk decodes by its kind (classic items, 0.2.76 Arrow rows, framed zstd)
                item = cf.sample(local, self._item_loader)
        if index.is_last_index:
            self.close()
        return item

    def close(self) -> None:
        """Drop the open chunk (and evict it, see ``max_cache_size``)."""
        if self._open is not None:
            c = self._open[0]
            self._open[1].close()
            self._open = None
            self._evict(c)

    def _evict(self, c: int) -> None:
        """Delete chunk ``c``'s files from ``cache_dir`` if the dataset is remote and the cache is over its size."""
        if self._max_cache_bytes is None or not self._remote_input_dir or self._config is None:
            return
        remote = str(self._remote_input_dir)
        source = remote[len("local:") :] if remote.startswith("local:") else None
        if source is not None and os.path.realpath(source) == os.path.realpath(self._cache_dir):
            return  # the cache is the dataset itself
        names = [n for n in os.listdir(self._cache_dir) if n.endswith(".bin")]
        used = sum(
            os.path.getsize(os.path.join(self._cache_dir, n))
            for n in names
            if os.path.isfile(os.path.join(self._cache_dir, n))
        )
        if used <= self._max_cache_bytes:
            return
        name = self._chunks[c]["filename"]
        for n in {name, uncompressed_name(name, self._config.get("compression"))}:
            try:
                os.remove(os.path.join(self._cache_dir, n))
            except FileNotFoundError:
                pass

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_open"] = None
        state["_store"] = None
        return state
