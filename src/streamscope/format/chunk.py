"""Reading chunk files: memory-mapped, zero-copy item views with a validated header.

A classic chunk is ``u32 N | u32 offsets[N+1] | item bytes`` with absolute offsets. :class:`ChunkFile`
checks the header against the file before handing out views, so a truncated or corrupt file raises
:class:`~streamscope._core.errors.CorruptChunkError` naming the file and the offset instead of returning
garbage. Compressed chunks (whole-file, framed or per-sample zstd) are turned into plain files first
(:func:`decompress_file`). :func:`open_chunk_file` opens a plain file of either kind LitData 0.2.76 leaves:
classic (:class:`ChunkFile`) or classic with an Arrow footer (:class:`~streamscope.format.arrowchunk.ArrowChunk`).
"""

from __future__ import annotations

import mmap
import os
from typing import Any

import numpy as np

from streamscope._core.errors import CorruptChunkError, FormatError
from streamscope.events import kinds
from streamscope.format.arrowchunk import ArrowChunk, check_footer_magic
from streamscope.format.header import parse_header
from streamscope.format.v076 import V076Chunk, prepare_chunk_file
from streamscope.format.v076 import open_chunk_bytes as _open_chunk_bytes

__all__ = ["ChunkFile", "decompress_file", "open_chunk", "open_chunk_bytes", "open_chunk_file", "parse_header"]


class ChunkFile:
    """One local, uncompressed chunk file, memory-mapped read-only; items are zero-copy ``memoryview`` s.

    Args:
        path: the chunk file.
        expected_items: ``chunk_size`` from index.json; a different header count raises.
        allow_trailing: accept bytes after the last item (0.2.76 Arrow-footer chunks); by default the last
            offset must equal the file size.
    """

    def __init__(
        self,
        path: str,
        expected_items: int | None = None,
        *,
        allow_trailing: bool = False,
        mapped: mmap.mmap | None = None,
        offsets: np.ndarray | None = None,
    ) -> None:
        self.path = path
        self._mm: mmap.mmap | None = mapped
        self._view: memoryview | None = None
        if mapped is None:
            with kinds.mmap(file=os.path.basename(path)):
                self._mm = _map(path)
        assert self._mm is not None
        size = len(self._mm)
        self._view = memoryview(self._mm)
        try:
            self._offsets = parse_header(self._view, path, size, expected_items) if offsets is None else offsets
            end = int(self._offsets[-1])
            if not allow_trailing and end != size:
                check_footer_magic(bytes(self._view[-8:]), path)
                raise CorruptChunkError(f"chunk {path!r}: items end at offset {end} but the file has {size} bytes")
        except BaseException:
            self.close()
            raise
        self.size = size
        self.num_items: int = len(self._offsets) - 1
        self.header_size = 4 * (self.num_items + 2)
        self._starts = self._offsets.tolist()

    def item_view(self, i: int) -> memoryview:
        """Bytes of item ``i`` (local index), zero-copy."""
        if not 0 <= i < self.num_items:
            raise IndexError(f"item {i} is outside chunk {self.path!r} of {self.num_items} items")
        view = self._view
        if view is None:
            raise FormatError(f"chunk {self.path!r} is closed")
        s = self._starts
        return view[s[i] : s[i + 1]]

    def item_bytes(self, i: int) -> bytes:
        """A copy of item ``i``'s bytes."""
        return bytes(self.item_view(i))

    def data_view(self) -> memoryview:
        """All item bytes after the header, zero-copy (TokensLoader reads this as one token stream)."""
        if self._view is None:
            raise FormatError(f"chunk {self.path!r} is closed")
        return self._view[self.header_size : self._starts[-1]]

    @property
    def buffer(self) -> memoryview:
        """The whole file, zero-copy."""
        if self._view is None:
            raise FormatError(f"chunk {self.path!r} is closed")
        return self._view

    def sample(self, i: int, loader: Any) -> Any:
        """Decoded sample ``i`` (the same call on every chunk kind: see :func:`open_chunk_file`)."""
        return loader.decode(self.item_view(i))

    def samples(self, items: Any, loader: Any) -> list[Any]:
        """Decoded samples of local items ``items``."""
        view = self._view
        if view is None:
            raise FormatError(f"chunk {self.path!r} is closed")
        decode, s, n = loader.decode, self._starts, self.num_items
        out = []
        for i in items.tolist() if hasattr(items, "tolist") else items:
            if not 0 <= i < n:
                raise IndexError(f"item {i} is outside chunk {self.path!r} of {n} items")
            out.append(decode(view[s[i] : s[i + 1]]))
        return out

    kind = "classic"

    def close(self) -> None:
        """Unmap the file. Views still held by decoded samples keep the mapping alive until they are freed."""
        view, mm = self._view, self._mm
        self._view = None
        self._mm = None
        if view is not None:
            try:
                view.release()
            except BufferError:
                pass
        if mm is not None:
            try:
                mm.close()
            except BufferError:
                pass  # numpy arrays still point into the map; it is unmapped when they are garbage-collected

    def __enter__(self) -> ChunkFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __len__(self) -> int:
        return self.num_items


def decompress_file(
    src: str,
    dst: str,
    compression: str,
    expected_bytes: int | None = None,
    config: dict[str, Any] | None = None,
) -> None:
    """Turn compressed chunk ``src`` into a plain chunk ``dst`` atomically (tmp file + ``os.replace``).

    Whole-file zstd is inflated; LitData 0.2.76's framed and per-sample zstd chunks are rewritten as classic
    chunks (see :func:`streamscope.format.v076.prepare_chunk_file`); a plain file is copied.

    Args:
        src: the compressed chunk file.
        dst: where the plain chunk appears (only once complete).
        compression: the index's ``config["compression"]``.
        expected_bytes: the entry's ``chunk_bytes``; a different whole-file inflated size raises CorruptChunkError.
        config: the index ``config`` (its ``compression_level`` tells per-sample zstd apart).
    """
    cfg = dict(config or {})
    cfg.setdefault("compression", compression)
    prepare_chunk_file(src, dst, cfg, expected_bytes)


def _map(path: str) -> mmap.mmap:
    with open(path, "rb") as f:
        if os.fstat(f.fileno()).st_size == 0:
            raise CorruptChunkError(f"chunk {path!r} is empty (0 bytes, offset 0)")
        return mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)


def open_chunk_file(path: str, expected_items: int | None = None) -> Any:
    """Map a local plain chunk and open it as its bytes say: a :class:`ChunkFile` (classic), an
    :class:`~streamscope.format.arrowchunk.ArrowChunk` (Arrow footer) or, for a framed-zstd chunk that was not
    prepared, a :class:`~streamscope.format.v076.V076Chunk` read in memory.

    Per-sample zstd chunks look classic: prepare them first (:func:`decompress_file`) or read them with
    :func:`open_chunk_bytes` and the index ``config``. All offer ``num_items``, ``kind``, ``sample(i, loader)`` and
    ``close()``.
    """
    with kinds.mmap(file=os.path.basename(path)):
        mm = _map(path)
    try:
        size = len(mm)
        if size >= 4 and mm[:4] == b"LDFZ":  # framed zstd (or a newer version of it, which V076Chunk names)
            return V076Chunk(mm, path, None, expected_items)
        offsets = parse_header(mm, path, size, expected_items)
        if int(offsets[-1]) != size and size >= 12 and mm[size - 8 :] == b"LDARW01\0":
            return ArrowChunk(mm, path, expected_items, owner=mm)
    except BaseException:
        try:
            mm.close()
        except BufferError:
            pass
        raise
    return ChunkFile(path, expected_items, mapped=mm, offsets=offsets)


def open_chunk(path: str, config: dict[str, Any] | None = None, expected_items: int | None = None) -> Any:
    """Open a local chunk file that :func:`decompress_file` prepared (or that needed none): see
    :func:`open_chunk_file`. ``config`` is accepted for the callers that pass the index's."""
    return open_chunk_file(path, expected_items)


def open_chunk_bytes(*args: Any, **kwargs: Any) -> Any:
    """Read a chunk of any layout from its bytes or path; see :func:`streamscope.format.v076.open_chunk_bytes`."""
    return _open_chunk_bytes(*args, **kwargs)
