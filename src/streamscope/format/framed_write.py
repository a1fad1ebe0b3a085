"""Writing LitData 0.2.76's in-file zstd layouts (read by :mod:`.v076`), and the ``compression_level`` rules.

``compression_level`` says how much of a chunk one zstd frame covers (it is not the zstd level, which stays in
``compression="zstd:N"``):

* ``"batch"`` (0.2.76's default for ``compression="zstd"``): the file keeps its plain name ``chunk-R-I.bin`` and
  holds ``struct "<8sHHIII"`` = ``b"LDFZ01\\0\\0"``, version 1, flags 0, ``N`` items, ``K`` rows per frame,
  ``F = ceil(N / K)`` frames; then ``u32 offsets[N+1]`` relative to the concatenated item bytes (``offsets[0] =
  0``); then ``F`` records ``"<IIQII"`` (first item, items, absolute file offset of the frame, compressed
  length, uncompressed length); then the frames, each one zstd frame of ``K`` consecutive items' bytes.
* ``"sample"``: the classic header, every item one zstd frame (offsets address the compressed items).
* ``"chunk"``: 0.2.68's whole-file zstd, ``chunk-R-I.zstd.bin`` (:mod:`.compression`).

Worked example, ``K = 2``, three items of 18 bytes: prefix ``LDFZ01\\0\\0 0100 0000 03000000 02000000
02000000`` (24 bytes), offsets ``0, 18, 36, 54`` (16 bytes), two frame records (48 bytes) ``(0, 2, 88, c0, 36)``
and ``(2, 1, 88 + c0, c1, 18)``, then the two frames of ``c0`` and ``c1`` bytes.

The frames are made with the same libzstd one-shot call LitData makes (content size in the frame header), so
the bytes match LitData's when both link the same libzstd version.
"""

from __future__ import annotations

import operator
import struct
from typing import Any

from streamscope._core.errors import FormatError
from streamscope.format.compression import compress_bytes, parse_compression

__all__ = [
    "COMPRESSION_LEVELS",
    "DEFAULT_BATCH_SIZE",
    "in_file",
    "pack_framed_zstd",
    "pack_sample_zstd",
    "parse_compression_level",
    "resolve_compression_level",
]

FRAMED_MAGIC = b"LDFZ01\0\0"
FRAMED_VERSION = 1
_PREFIX = struct.Struct("<8sHHIII")
_FRAME = struct.Struct("<IIQII")
COMPRESSION_LEVELS = ("chunk", "batch", "sample")
#: items per zstd frame when ``compression_batch_size`` is not given (LitData 0.2.76's default)
DEFAULT_BATCH_SIZE = 256


def parse_compression_level(value: Any) -> str:
    """``"chunk"``, ``"batch"`` or ``"sample"`` (case and blanks ignored); None/"" mean ``"chunk"``.

    Raises:
        FormatError: a bool, an int (a zstd level given in the wrong place) or another string; LitData's sentence
            comes first.
    """
    if value is None or value == "":
        return "chunk"
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise FormatError(f"compression_level must be 'chunk', 'batch', or 'sample'. Got {value!r}")
    if isinstance(value, int):
        raise FormatError(
            f"compression_level={value!r} is granularity, not a zstd numeric level. Use compression='zstd:4' for "
            "the algorithm level and compression_level='chunk'|'batch'|'sample' for how much to wrap."
        )
    key = value.strip().lower()
    if key not in COMPRESSION_LEVELS:
        raise FormatError(f"compression_level must be 'chunk', 'batch', or 'sample', got {value!r}.")
    return key


def resolve_compression_level(
    compression: str | None,
    compression_level: Any,
    compression_batch_size: Any = None,
    *,
    encryption: Any = None,
    item_loader_name: str = "PyTreeLoader",
) -> str:
    """The level a 0.2.76 writer uses, checking the arguments in LitData 0.2.76's order and words.

    Without compression the level is ``"chunk"`` whatever was given (LitData ignores it then); with
    ``"zstd"``/``"zstd:N"`` and no level it is ``"batch"``.

    Raises:
        FormatError: a bad level, a batch/sample level with another codec, a ``compression_batch_size`` below 1,
            an unknown compression, or a batch/sample level with encryption or with a loader other than
            PyTreeLoader.
    """
    if compression and (compression == "zstd_framed" or str(compression).startswith("zstd_framed:")):
        raise FormatError(
            "compression='zstd_framed' is not a codec. Use compression='zstd' with compression_level='batch' "
            "(framed .bin) or 'chunk' (whole-file .zstd.bin)."
        )
    if not compression:
        level = "chunk"
    elif compression_level is not None and compression_level != "":
        level = parse_compression_level(compression_level)
    else:
        level = "batch" if str(compression).startswith("zstd") else "chunk"
    if compression and level != "chunk" and not str(compression).startswith("zstd"):
        raise FormatError("compression_level='batch'/'sample' is only supported with compression='zstd'.")
    if compression_batch_size is not None:
        try:
            size = operator.index(compression_batch_size)
        except TypeError:
            size = 0
        if isinstance(compression_batch_size, bool) or size < 1:
            raise FormatError(f"compression_batch_size must be a positive integer. Got {compression_batch_size!r}")
    parse_compression(compression)
    if level in ("batch", "sample"):
        if encryption is not None:
            raise FormatError("compression_level='batch'/'sample' does not support encryption.")
        if item_loader_name != "PyTreeLoader":
            raise FormatError("compression_level='batch'/'sample' is only supported for pytree chunks (PyTreeLoader).")
    return level


def in_file(level: str | None) -> bool:
    """True for the levels whose zstd frames live inside a plain ``.bin`` (batch, sample)."""
    return level in ("batch", "sample")


def _classic_offsets(chunk: bytes) -> tuple[int, list[int]]:
    if len(chunk) < 8:
        raise FormatError(f"a classic chunk needs at least 8 bytes, got {len(chunk)}")
    (n,) = struct.unpack_from("<I", chunk, 0)
    if n == 0:
        raise FormatError("cannot frame a chunk with no items")
    if len(chunk) < 4 * (n + 2):
        raise FormatError(f"classic chunk of {len(chunk)} bytes is too short for the header of {n} items")
    return n, list(struct.unpack_from(f"<{n + 1}I", chunk, 4))


def pack_framed_zstd(chunk: bytes, compression: str, frame_rows: int) -> bytes:
    """The ``"batch"`` layout of classic chunk bytes ``chunk`` (header + items), ``frame_rows`` items per frame."""
    n, offsets = _classic_offsets(chunk)
    k = max(1, int(frame_rows))
    n_frames = -(-n // k)
    base = offsets[0]
    rel = [o - base for o in offsets]
    pos = _PREFIX.size + 4 * (n + 1) + _FRAME.size * n_frames
    records: list[bytes] = []
    frames: list[bytes] = []
    for f in range(n_frames):
        first, end = f * k, min(n, f * k + k)
        raw = chunk[offsets[first] : offsets[end]]
        packed = compress_bytes(raw, compression)
        records.append(_FRAME.pack(first, end - first, pos, len(packed), len(raw)))
        frames.append(packed)
        pos += len(packed)
    head = _PREFIX.pack(FRAMED_MAGIC, FRAMED_VERSION, 0, n, k, n_frames) + struct.pack(f"<{n + 1}I", *rel)
    return b"".join([head, *records, *frames])


def pack_sample_zstd(chunk: bytes, compression: str) -> bytes:
    """The ``"sample"`` layout of classic chunk bytes ``chunk``: same header shape, each item one zstd frame."""
    n, offsets = _classic_offsets(chunk)
    parts = [compress_bytes(chunk[offsets[i] : offsets[i + 1]], compression) for i in range(n)]
    new = [4 * (n + 2)]
    for p in parts:
        new.append(new[-1] + len(p))
    return b"".join([struct.pack(f"<I{n + 1}I", n, *new), *parts])
