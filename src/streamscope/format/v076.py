"""LitData 0.2.76 zstd layouts, turned into classic chunks (and read in memory where that is needed).

``compression="zstd"`` in LitData 0.2.76 means one of three layouts, named by ``config["compression_level"]``:

* ``"batch"`` (the default): framed zstd, file name ``chunk-R-I.bin`` (no ``.zstd``). The file starts with
  ``struct "<8sHHIII"`` = ``b"LDFZ01\\0\\0"``, version 1, flags, ``N`` items, ``K`` rows per frame, ``F``
  frames; then ``u32 offsets[N+1]`` RELATIVE to the concatenated (uncompressed) item bytes; then ``F`` frame
  records ``"<IIQII"`` (first item, item count, absolute offset of the zstd frame, its length, its inflated
  length); then the zstd frames. Frame f inflates to the classic item bytes of its rows, so the frames in order
  are the item region of the classic chunk, whose absolute offsets are ``4*(N+2) + offsets``.
* ``"sample"``: the classic header, each item is its own zstd frame.
* ``"chunk"`` (or no level, as 0.2.68): one zstd frame of the whole classic file, ``chunk-R-I.zstd.bin``.

Worked example (framed, N=2, K=256, one frame): ``4c44465a30310000 0100 0000 02000000 00010000 01000000`` (magic,
version 1, flags 0, N=2, K=256, F=1), offsets ``00000000 12000000 24000000`` (items of 18 bytes each), frame
``00000000 02000000 4400000000000000 <clen> 24000000`` (items 0..1, frame at offset 68, inflates to 36 bytes),
then the zstd frame.

The chunk cache normalises every layout once, when a chunk is fetched (:func:`prepare_chunk_file`, traced as a
``decompress`` span): afterwards every chunk is a classic file (possibly followed by an Arrow footer, see
:mod:`.arrowchunk`) that the reader maps in place. :class:`V076Chunk` reads the zstd layouts in memory for the
callers that open one chunk once (keys index, dataset update).
"""

from __future__ import annotations

import mmap
import os
import shutil
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from streamscope._core.errors import CorruptChunkError, FormatError
from streamscope.events import kinds
from streamscope.format.arrowchunk import ARROW_MAGIC, ArrowChunk, arrow_footer_start, check_footer_magic
from streamscope.format.compression import decompress_to
from streamscope.format.encryption import decrypt_chunk
from streamscope.format.header import parse_header

__all__ = [
    "FRAMED_MAGIC",
    "ZSTD_MAGIC",
    "FramedLayout",
    "V076Chunk",
    "chunk_layout",
    "open_chunk_bytes",
    "parse_framed",
    "prepare_chunk_file",
    "to_classic_bytes",
    "decrypt_to_classic",
]

FRAMED_MAGIC = b"LDFZ01\0\0"
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
_PREFIX = struct.Struct("<8sHHIII")
_FRAME = struct.Struct("<IIQII")
_U32_LIMIT = 1 << 32


def _zstd() -> Any:
    import zstandard  # noqa: PLC0415

    return zstandard


# --- telling the layouts apart -------------------------------------------------------------------------


def chunk_layout(head: bytes, tail: bytes, config: dict[str, Any] | None, name: str) -> str:
    """The layout of a chunk file from its first and last 8 bytes and the index ``config``.

    Returns ``"zstd"`` (one whole-file frame), ``"framed"``, ``"sample_zstd"``, ``"arrow"`` (classic header and
    an Arrow footer) or ``"classic"``.

    Raises:
        FormatError: a framed-zstd magic of another version (a newer LitData).
    """
    if head[:4] == ZSTD_MAGIC:
        return "zstd"
    if head == FRAMED_MAGIC:
        return "framed"
    if head[:4] == FRAMED_MAGIC[:4]:
        raise FormatError(
            f"chunk {name!r} starts with the unknown framed-zstd magic {head!r} (this reader knows {FRAMED_MAGIC!r} "
            "from LitData 0.2.76); it was written by a newer LitData"
        )
    if tail == ARROW_MAGIC:
        return "arrow"
    if (config or {}).get("compression_level") == "sample":
        return "sample_zstd"
    return "classic"


# --- framed zstd ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FramedLayout:
    """The directory of a framed-zstd chunk: item offsets (relative) and ``(first, count, off, clen, ulen)``
    frames."""

    num_items: int
    frame_rows: int
    offsets: np.ndarray
    frames: list[tuple[int, int, int, int, int]]


def parse_framed(buf: Any, name: str) -> FramedLayout:
    """Read and check the directory of framed-zstd chunk bytes ``buf``.

    Raises:
        CorruptChunkError: truncated tables, a frame pointing outside the file, frames that do not tile the items.
        FormatError: an unsupported version.
    """
    size = len(buf)
    if size < _PREFIX.size:
        raise CorruptChunkError(f"chunk {name!r}: framed-zstd header truncated ({size} bytes, needs {_PREFIX.size})")
    magic, version, _flags, n, k, nf = _PREFIX.unpack_from(buf, 0)
    if magic != FRAMED_MAGIC:
        chunk_layout(magic, b"", None, name)  # a newer framed magic raises there
        raise FormatError(f"chunk {name!r} is not a framed-zstd chunk (magic {magic!r})")
    if version != 1:
        raise FormatError(
            f"chunk {name!r}: framed-zstd version {version} is not supported (this reader knows version 1 of "
            "LitData 0.2.76)"
        )
    if n == 0 or k == 0 or nf == 0:
        raise CorruptChunkError(f"chunk {name!r}: invalid framed-zstd header N={n} K={k} frames={nf} (offset 12)")
    off_end = _PREFIX.size + 4 * (n + 1)
    table_end = off_end + _FRAME.size * nf
    if table_end > size:
        raise CorruptChunkError(
            f"chunk {name!r}: framed-zstd offset and frame tables need {table_end} bytes but the file has {size} "
            f"(truncated at offset {size})"
        )
    offsets = np.frombuffer(buf, dtype="<u4", count=n + 1, offset=_PREFIX.size).astype(np.int64)
    if offsets[0] != 0 or (n and bool((np.diff(offsets) < 0).any())):
        raise CorruptChunkError(f"chunk {name!r}: framed-zstd item offsets are not monotonic from 0 (offset 24)")
    frames = []
    expect_first = 0
    for f in range(nf):
        pos = off_end + f * _FRAME.size
        first, cnt, coff, clen, ulen = _FRAME.unpack_from(buf, pos)
        if coff < table_end or coff + clen > size or clen == 0:
            raise CorruptChunkError(
                f"chunk {name!r}: frame {f} (record at offset {pos}) points at bytes {coff}..{coff + clen} but the "
                f"file has {size} bytes (frames start at {table_end})"
            )
        if first != expect_first or cnt == 0 or first + cnt > n:
            raise CorruptChunkError(
                f"chunk {name!r}: frame {f} (record at offset {pos}) holds items {first}..{first + cnt - 1}, "
                f"expected to start at item {expect_first} of {n}"
            )
        if ulen != offsets[first + cnt] - offsets[first]:
            raise CorruptChunkError(
                f"chunk {name!r}: frame {f} (record at offset {pos}) inflates to {ulen} bytes but its items span "
                f"{int(offsets[first + cnt] - offsets[first])}"
            )
        frames.append((int(first), int(cnt), int(coff), int(clen), int(ulen)))
        expect_first = first + cnt
    if expect_first != n:
        raise CorruptChunkError(f"chunk {name!r}: the frames hold items 0..{expect_first - 1} of {n}")
    return FramedLayout(int(n), int(k), offsets, frames)


def _inflate(buf: Any, frame: tuple[int, int, int, int, int], f: int, name: str) -> bytes:
    _, _, coff, clen, ulen = frame
    zstd = _zstd()
    try:
        data = zstd.ZstdDecompressor().decompress(buf[coff : coff + clen], max_output_size=ulen)
    except zstd.ZstdError as exc:
        raise CorruptChunkError(f"chunk {name!r}: zstd frame {f} at offset {coff} is corrupt: {exc}") from None
    if len(data) != ulen:
        raise CorruptChunkError(
            f"chunk {name!r}: zstd frame {f} at offset {coff} inflated to {len(data)} bytes, the table says {ulen}"
        )
    return data


def _classic_header(n: int, rel_offsets: np.ndarray, name: str) -> bytes:
    head = 4 * (n + 2)
    absolute = rel_offsets + head
    if int(absolute[-1]) >= _U32_LIMIT:
        raise CorruptChunkError(
            f"chunk {name!r}: {int(absolute[-1])} bytes inflated do not fit a classic chunk (4 GiB)"
        )
    return struct.pack("<I", n) + absolute.astype("<u4").tobytes()


def _framed_to_classic(buf: Any, name: str, write: Callable[[Any], Any]) -> int:
    layout = parse_framed(buf, name)
    header = _classic_header(layout.num_items, layout.offsets, name)
    write(header)
    total = len(header)
    for f, frame in enumerate(layout.frames):
        data = _inflate(buf, frame, f, name)
        write(data)
        total += len(data)
    return total


# --- per-sample zstd -----------------------------------------------------------------------------------


def _sample_zstd_to_classic(buf: Any, name: str, write: Callable[[Any], Any]) -> int:
    offsets = parse_header(buf, name)
    end = int(offsets[-1])
    if end != len(buf):
        raise CorruptChunkError(f"chunk {name!r}: items end at offset {end} but the file has {len(buf)} bytes")
    n = len(offsets) - 1
    zstd = _zstd()
    items = []
    for i in range(n):
        a, b = int(offsets[i]), int(offsets[i + 1])
        try:
            items.append(zstd.ZstdDecompressor().decompressobj().decompress(buf[a:b]) if b > a else b"")
        except zstd.ZstdError as exc:
            raise CorruptChunkError(f"chunk {name!r}: item {i} (offset {a}) is not a valid zstd frame: {exc}") from None
    sizes = np.fromiter((len(x) for x in items), dtype=np.int64, count=n)
    header = _classic_header(n, np.concatenate([[0], np.cumsum(sizes)]), name)
    write(header)
    for x in items:
        write(x)
    return len(header) + int(sizes.sum())


# --- normalising a chunk -------------------------------------------------------------------------------


def _read_ends(path: str) -> tuple[int, bytes, bytes]:
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        head = f.read(8)
        tail = b""
        if size >= 8:
            f.seek(size - 8)
            tail = f.read(8)
    return size, head, tail


def prepare_chunk_file(
    src: str,
    dst: str,
    config: dict[str, Any] | None = None,
    expected_bytes: int | None = None,
    *,
    move: bool = False,
) -> str:
    """Make ``dst`` a chunk file the reader maps in place: classic, or classic with an Arrow footer.

    Whole-file zstd is inflated (its size checked against ``expected_bytes``, the entry's ``chunk_bytes``, when
    given); framed and per-sample zstd are rewritten as classic chunks; other files are copied (or renamed when
    ``move``: ``src`` is a private download). ``dst`` appears only once complete (tmp file + ``os.replace``).
    Traced as a ``decompress`` span. Returns the source layout (see :func:`chunk_layout`).

    Raises:
        CorruptChunkError: the source is damaged (names the file and the offset).
        FormatError: a layout of a newer LitData.
    """
    size, head, tail = _read_ends(src)
    if size == 0:
        raise CorruptChunkError(f"chunk {src!r} is empty (0 bytes, offset 0)")
    layout = chunk_layout(head, tail, config, src)
    if layout in ("classic", "arrow"):  # checked when opened
        tmp = f"{dst}.tmp.{os.getpid()}"
        if move:
            os.replace(src, dst)
        else:
            try:
                shutil.copyfile(src, tmp)
                os.replace(tmp, dst)
            finally:
                if os.path.exists(tmp):
                    os.unlink(tmp)
        return layout
    with kinds.decompress(file=os.path.basename(src)) as span:
        if layout == "zstd":
            span["bytes"] = decompress_to(src, dst, "zstd", expected_bytes)
        else:
            tmp = f"{dst}.tmp.{os.getpid()}"
            try:
                with open(src, "rb") as fin:
                    mm = mmap.mmap(fin.fileno(), 0, access=mmap.ACCESS_READ)
                try:
                    with open(tmp, "wb") as fout:
                        convert = _framed_to_classic if layout == "framed" else _sample_zstd_to_classic
                        span["bytes"] = convert(memoryview(mm), src, fout.write)
                finally:
                    _close_quietly(mm)
                os.replace(tmp, dst)
            finally:
                if os.path.exists(tmp):
                    os.unlink(tmp)
        if move:
            os.unlink(src)
    return layout


def _close_quietly(mm: mmap.mmap) -> None:
    try:
        mm.close()
    except BufferError:
        pass


def to_classic_bytes(data: bytes, name: str, config: dict[str, Any] | None = None) -> bytes:
    """:func:`prepare_chunk_file` in memory: the classic bytes (maybe with an Arrow footer) of chunk bytes ``data``."""
    if not data:
        raise CorruptChunkError(f"chunk {name!r} is empty (0 bytes, offset 0)")
    layout = chunk_layout(bytes(data[:8]), bytes(data[-8:]), config, name)
    if layout in ("classic", "arrow"):
        return data
    if layout == "zstd":
        zstd = _zstd()
        try:
            return zstd.ZstdDecompressor().decompressobj().decompress(data)
        except zstd.ZstdError as exc:
            raise CorruptChunkError(f"compressed chunk {name!r} is not valid zstd: {exc}") from None
    parts: list[bytes] = []
    convert = _framed_to_classic if layout == "framed" else _sample_zstd_to_classic
    convert(memoryview(data), name, parts.append)
    return b"".join(parts)


def decrypt_to_classic(data: bytes, encryption: Any, level: str, name: str, config: dict[str, Any] | None) -> bytes:
    """The plain classic bytes (maybe with an Arrow footer) of an encrypted chunk file's bytes ``data``.

    LitData 0.2.76 encrypts before it compresses (whole-file zstd is undone first) and never combines encryption
    with framed or per-sample zstd. At level ``"sample"`` an Arrow-footer chunk's items are empty and its footer
    is NOT encrypted (LitData writes the rows in the clear; its own reader fails on such chunks): the footer is
    kept as it is and the non-empty items are decrypted.
    """
    if data[:4] == ZSTD_MAGIC:
        data = to_classic_bytes(data, name, config)
    if level == "chunk":
        return to_classic_bytes(decrypt_chunk(data, encryption, level, name), name, config)
    data = to_classic_bytes(data, name, config)
    if level == "sample" and data[-8:] == ARROW_MAGIC:
        start, _ = arrow_footer_start(data, name)
        offsets = parse_header(data, name, start)
        if int(offsets[-1]) == int(offsets[0]):  # no item bytes: only the footer, which is plain
            return data
        return decrypt_chunk(data[:start], encryption, level, name) + data[start:]
    return decrypt_chunk(data, encryption, level, name)


# --- reading one chunk in memory -----------------------------------------------------------------------


class V076Chunk:
    """A framed or per-sample zstd chunk read in memory, item by item (one inflated frame kept).

    Attributes:
        kind: ``"framed"``, ``"sample_zstd"`` or ``"classic"``.
        num_items: items in the chunk.
    """

    def __init__(
        self, buf: Any, name: str, config: dict[str, Any] | None = None, expected_items: int | None = None
    ) -> None:
        self.name = self.path = name
        self._buf = memoryview(buf)
        self._owner: Any = buf if isinstance(buf, mmap.mmap) else None
        self._frame: tuple[int, bytes] | None = None
        if len(self._buf) == 0:
            raise CorruptChunkError(f"chunk {name!r} is empty (0 bytes, offset 0)")
        if bytes(self._buf[:4]) == FRAMED_MAGIC[:4]:
            self.kind = "framed"
            self._layout = parse_framed(self._buf, name)
            self.num_items = self._layout.num_items
        else:
            offsets = parse_header(self._buf, name)
            if int(offsets[-1]) != len(self._buf):
                check_footer_magic(bytes(self._buf[-8:]), name)
                raise CorruptChunkError(
                    f"chunk {name!r}: items end at offset {int(offsets[-1])} but it has {len(self._buf)} bytes"
                )
            self._offsets = offsets.tolist()
            self.num_items = len(offsets) - 1
            self.kind = "sample_zstd" if (config or {}).get("compression_level") == "sample" else "classic"
        if expected_items is not None and self.num_items != expected_items:
            raise CorruptChunkError(
                f"chunk {name!r} holds {self.num_items} items but index.json says chunk_size={expected_items}"
            )

    def _frame_of(self, i: int) -> int:
        layout = self._layout
        f = min(i // layout.frame_rows, len(layout.frames) - 1)
        while layout.frames[f][0] > i:
            f -= 1
        while layout.frames[f][0] + layout.frames[f][1] <= i:
            f += 1
        return f

    def item_view(self, i: int) -> memoryview:
        """Classic PyTree item bytes of item ``i`` (inflated)."""
        if not 0 <= i < self.num_items:
            raise IndexError(f"item {i} is outside chunk {self.name!r} of {self.num_items} items")
        if self.kind == "framed":
            f = self._frame_of(i)
            if self._frame is None or self._frame[0] != f:
                self._frame = (f, _inflate(self._buf, self._layout.frames[f], f, self.name))
            offs = self._layout.offsets
            base = int(offs[self._layout.frames[f][0]])
            return memoryview(self._frame[1])[int(offs[i]) - base : int(offs[i + 1]) - base]
        raw = self._buf[self._offsets[i] : self._offsets[i + 1]]
        if self.kind == "sample_zstd" and len(raw):
            zstd = _zstd()
            try:
                return memoryview(zstd.ZstdDecompressor().decompressobj().decompress(raw))
            except zstd.ZstdError as exc:
                raise CorruptChunkError(f"chunk {self.name!r}: item {i} zstd payload is corrupt: {exc}") from None
        return raw

    def sample(self, i: int, loader: Any) -> Any:
        """Sample ``i``: ``loader.decode`` of its item bytes."""
        return loader.decode(self.item_view(i))

    def samples(self, items: Any, loader: Any) -> list[Any]:
        """Samples of local items ``items``."""
        return [loader.decode(self.item_view(i)) for i in (items.tolist() if hasattr(items, "tolist") else items)]

    def close(self) -> None:
        """Drop the buffer (a mapping is freed once no decoded view refers to it)."""
        self._frame = None
        try:
            self._buf.release()
        except BufferError:
            pass
        owner, self._owner = self._owner, None
        if owner is not None:
            _close_quietly(owner)

    def __enter__(self) -> V076Chunk:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_chunk_bytes(
    source: str | bytes | bytearray | memoryview,
    config: dict[str, Any] | None = None,
    expected_items: int | None = None,
) -> Any:
    """Open a chunk of any layout from a path (mapped read-only) or from its bytes.

    Arrow-footer chunks give an :class:`~streamscope.format.arrowchunk.ArrowChunk`, the others a
    :class:`V076Chunk`; both offer ``num_items``, ``kind``, ``sample(i, loader)`` and ``close()``.

    Args:
        source: a local chunk path, or the chunk's bytes (whole-file zstd must be inflated first).
        config: the index ``config`` (tells per-sample zstd apart).
        expected_items: ``chunk_size`` from index.json, checked against the chunk.
    """
    if isinstance(source, (bytes, bytearray, memoryview)):
        buf: Any = source
        name = "<chunk bytes>"
    else:
        name = source
        with open(source, "rb") as f:
            if os.fstat(f.fileno()).st_size == 0:
                raise CorruptChunkError(f"chunk {source!r} is empty (0 bytes, offset 0)")
            buf = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    if len(buf) == 0:
        raise CorruptChunkError(f"chunk {name!r} is empty (0 bytes, offset 0)")
    try:
        layout = chunk_layout(bytes(buf[:8]), bytes(buf[-8:]), config, name)
        if layout == "zstd":
            raise FormatError(f"chunk {name!r} is whole-file zstd: inflate it first (prepare_chunk_file)")
        if layout == "arrow":
            return ArrowChunk(buf, name, expected_items, owner=buf if isinstance(buf, mmap.mmap) else None)
        return V076Chunk(buf, name, config, expected_items)
    except BaseException:
        if isinstance(buf, mmap.mmap):
            _close_quietly(buf)
        raise
