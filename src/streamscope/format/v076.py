"""Reading chunks written by LitData 0.2.76 (which 0.2.68 readers cannot read).

Three layouts, told apart by their bytes and the index ``config``:

* framed zstd (``compression_level="batch"``, the 0.2.76 default for ``compression="zstd"``): the file starts
  with ``struct "<8sHHIII"`` = ``b"LDFZ01\\0\\0"``, version 1, flags, ``N`` items, ``K`` rows per frame,
  ``F`` frames; then ``u32 offsets[N+1]`` relative to the concatenated (uncompressed) item bytes; then ``F``
  frame records ``"<IIQII"`` (first item, item count, absolute compressed offset, compressed length,
  uncompressed length); then the zstd frames. Each frame inflates to the classic item bytes of its rows.
* per-sample zstd (``compression_level="sample"``): the classic header, each item is its own zstd frame.
* Arrow footer: the chunk ends with ``<Arrow IPC file> | u32 ipc_len | b"LDARW01\\0"``; for JSON-like dict
  samples the items themselves are empty and each sample is a row of the Arrow table (needs pyarrow).
"""

from __future__ import annotations

import mmap
import os
import struct
from typing import Any

from streamscope._core.errors import CorruptChunkError, FormatError
from streamscope._core.optional import require
from streamscope.format.chunk import parse_header

FRAMED_MAGIC = b"LDFZ01\0\0"
ARROW_MAGIC = b"LDARW01\0"
_PREFIX = struct.Struct("<8sHHIII")
_FRAME = struct.Struct("<IIQII")


def _zstd() -> Any:
    import zstandard  # noqa: PLC0415

    return zstandard


class V076Chunk:
    """A chunk of any 0.2.68/0.2.76 pytree layout, held in memory (or mapped) and read item by item.

    Attributes:
        kind: ``"classic"``, ``"framed"``, ``"sample_zstd"`` or ``"arrow"``.
        num_items: items in the chunk.
    """

    def __init__(
        self, buf: Any, name: str, config: dict[str, Any] | None = None, expected_items: int | None = None
    ) -> None:
        self.name = name
        self._buf = memoryview(buf)
        self._owner: Any = buf if isinstance(buf, mmap.mmap) else None
        self._config = config or {}
        self._frames_cache: dict[int, bytes] = {}
        self._rows: list[Any] | None = None
        self._arrow_span: tuple[int, int] | None = None
        if len(self._buf) == 0:
            raise CorruptChunkError(f"chunk {name!r} is empty (0 bytes, offset 0)")
        if bytes(self._buf[:8]) == FRAMED_MAGIC:
            self.kind = "framed"
            self._parse_framed()
        else:
            size = len(self._buf)
            if size >= 12 and bytes(self._buf[-8:]) == ARROW_MAGIC:
                (ipc_len,) = struct.unpack_from("<I", self._buf, size - 12)
                start = size - 12 - ipc_len
                if start < 0 or ipc_len == 0:
                    raise CorruptChunkError(
                        f"chunk {name!r}: Arrow footer length {ipc_len} is invalid (offset {size - 12})"
                    )
                self._arrow_span = (start, ipc_len)
                size = start
            self._offsets = parse_header(self._buf, name, size)
            self.num_items = len(self._offsets) - 1
            if self._arrow_span is not None:
                self.kind = "arrow"
            elif self._config.get("compression_level") == "sample":
                self.kind = "sample_zstd"
            else:
                self.kind = "classic"
        if expected_items is not None and self.num_items != expected_items:
            raise CorruptChunkError(
                f"chunk {name!r} holds {self.num_items} items but index.json says chunk_size={expected_items}"
            )

    # --- framed ----------------------------------------------------------------------------------

    def _parse_framed(self) -> None:
        buf, name = self._buf, self.name
        if len(buf) < _PREFIX.size:
            raise CorruptChunkError(f"chunk {name!r}: framed header truncated at offset {len(buf)}")
        _, version, _flags, n, k, nf = _PREFIX.unpack_from(buf, 0)
        if version != 1:
            raise FormatError(f"chunk {name!r}: framed zstd version {version} is not supported (only 1)")
        if k <= 0 or (n > 0 and nf <= 0):
            raise CorruptChunkError(f"chunk {name!r}: invalid framed header N={n} K={k} frames={nf} (offset 8)")
        off_end = _PREFIX.size + 4 * (n + 1)
        table_end = off_end + _FRAME.size * nf
        if table_end > len(buf):
            raise CorruptChunkError(
                f"chunk {name!r}: framed offset/frame tables need {table_end} bytes, file has {len(buf)}"
            )
        self._offsets = list(struct.unpack_from(f"<{n + 1}I", buf, _PREFIX.size))
        if any(b < a for a, b in zip(self._offsets, self._offsets[1:])):
            raise CorruptChunkError(f"chunk {name!r}: framed item offsets are not monotonic (offset {_PREFIX.size})")
        frames = []
        for f in range(nf):
            pos = off_end + f * _FRAME.size
            first, cnt, coff, clen, ulen = _FRAME.unpack_from(buf, pos)
            if cnt == 0 or coff < table_end or coff + clen > len(buf) or first + cnt > n:
                raise CorruptChunkError(f"chunk {name!r}: frame {f} record is invalid or truncated (offset {pos})")
            frames.append((first, cnt, coff, clen, ulen))
        self._frames = frames
        self._frame_rows = k
        self.num_items = n

    def _frame_for(self, i: int) -> int:
        f = i // self._frame_rows
        if f < len(self._frames) and self._frames[f][0] <= i < self._frames[f][0] + self._frames[f][1]:
            return f
        for j, (first, cnt, *_rest) in enumerate(self._frames):
            if first <= i < first + cnt:
                return j
        raise CorruptChunkError(f"chunk {self.name!r}: no frame holds item {i}")

    def _inflate(self, f: int) -> bytes:
        data = self._frames_cache.get(f)
        if data is None:
            first, cnt, coff, clen, ulen = self._frames[f]
            try:
                data = _zstd().ZstdDecompressor().decompress(bytes(self._buf[coff : coff + clen]), max_output_size=ulen)
            except _zstd().ZstdError as exc:
                raise CorruptChunkError(
                    f"chunk {self.name!r}: zstd frame {f} at offset {coff} is corrupt: {exc}"
                ) from None
            if len(data) != ulen:
                raise CorruptChunkError(
                    f"chunk {self.name!r}: frame {f} inflated to {len(data)} bytes, header says {ulen} (offset {coff})"
                )
            self._frames_cache = {f: data}  # keep one inflated frame (sequential reads hit it)
        return data

    # --- items -----------------------------------------------------------------------------------

    def item_view(self, i: int) -> memoryview:
        """Classic PyTree item bytes of item ``i`` (inflated for framed/sample zstd chunks)."""
        if not 0 <= i < self.num_items:
            raise IndexError(f"item {i} is outside chunk {self.name!r} of {self.num_items} items")
        if self.kind == "arrow":
            raise FormatError(f"chunk {self.name!r} stores its samples as Arrow rows; use sample(i, loader)")
        if self.kind == "framed":
            f = self._frame_for(i)
            base = self._offsets[self._frames[f][0]]
            data = self._inflate(f)
            return memoryview(data)[self._offsets[i] - base : self._offsets[i + 1] - base]
        raw = self._buf[int(self._offsets[i]) : int(self._offsets[i + 1])]
        if self.kind == "sample_zstd":
            try:
                return memoryview(_zstd().ZstdDecompressor().decompressobj().decompress(bytes(raw)))
            except _zstd().ZstdError as exc:
                raise CorruptChunkError(f"chunk {self.name!r}: item {i} zstd payload is corrupt: {exc}") from None
        return raw

    def _arrow_rows(self) -> list[Any]:
        if self._rows is None:
            pa = require("pyarrow", f"chunk {self.name!r} has a LitData 0.2.76 Arrow footer; reading it", "arrow")
            assert self._arrow_span is not None
            start, n = self._arrow_span
            ipc = pa.py_buffer(bytes(self._buf[start : start + n]))
            try:
                reader = (
                    pa.ipc.open_file(ipc)
                    if bytes(self._buf[start : start + 6]) == b"ARROW1"
                    else pa.ipc.open_stream(ipc)
                )
                table = reader.read_all()
            except (pa.ArrowInvalid, OSError) as exc:
                raise CorruptChunkError(
                    f"chunk {self.name!r}: Arrow footer at offset {start} is unreadable: {exc}"
                ) from None
            self._rows = table.to_pylist()
            if len(self._rows) != self.num_items:
                raise CorruptChunkError(
                    f"chunk {self.name!r}: Arrow footer has {len(self._rows)} rows, header says {self.num_items} items"
                )
        return self._rows

    def close(self) -> None:
        """Drop the buffer (the mapping is freed once no decoded view refers to it)."""
        self._frames_cache = {}
        self._rows = None
        try:
            self._buf.release()
        except BufferError:
            pass
        owner, self._owner = self._owner, None
        if owner is not None:
            try:
                owner.close()
            except BufferError:
                pass  # decoded arrays still point into the map; it is unmapped when they are freed

    def __enter__(self) -> V076Chunk:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def sample(self, i: int, loader: Any) -> Any:
        """Sample ``i``: an Arrow row (dict) for Arrow-footer chunks, else ``loader.decode`` of the item."""
        if self.kind == "arrow":
            if not 0 <= i < self.num_items:
                raise IndexError(f"item {i} is outside chunk {self.name!r} of {self.num_items} items")
            return self._arrow_rows()[i]
        return loader.decode(self.item_view(i))


def open_chunk_bytes(
    source: str | bytes | bytearray | memoryview,
    config: dict[str, Any] | None = None,
    expected_items: int | None = None,
) -> V076Chunk:
    """Open a chunk of any supported layout from a path (mapped read-only) or from its bytes.

    Args:
        source: a local uncompressed chunk path, or the chunk's bytes.
        config: the index ``config`` (needed to recognise per-sample zstd).
        expected_items: ``chunk_size`` from index.json, checked against the chunk.
    """
    if isinstance(source, (bytes, bytearray, memoryview)):
        return V076Chunk(source, "<chunk bytes>", config, expected_items)
    with open(source, "rb") as f:
        if os.fstat(f.fileno()).st_size == 0:
            raise CorruptChunkError(f"chunk {source!r} is empty (0 bytes, offset 0)")
        mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    return V076Chunk(mm, source, config, expected_items)
