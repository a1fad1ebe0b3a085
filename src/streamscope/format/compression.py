"""Whole-file zstd compression of chunks: ``"zstd"`` (level 4) or ``"zstd:N"`` (N in 1..22).

The compressed file is one standard zstd frame of the uncompressed chunk bytes (with the content size in
the frame header), so any zstd decoder reads it.
"""

from __future__ import annotations

import os

from streamscope._core.errors import CorruptChunkError, FormatError

__all__ = [
    "DEFAULT_ZSTD_LEVEL",
    "VALID_COMPRESSIONS",
    "compress_bytes",
    "decompress_bytes",
    "decompress_to",
    "parse_compression",
    "uncompressed_name",
]


DEFAULT_ZSTD_LEVEL = 4
VALID_COMPRESSIONS: tuple[str, ...] = ("zstd",) + tuple(f"zstd:{i}" for i in range(1, 23))


def parse_compression(compression: str | None) -> int | None:
    """The zstd level for a compression name (None for no compression); unknown names raise FormatError."""
    if compression is None:
        return None
    if compression == "zstd":
        return DEFAULT_ZSTD_LEVEL
    if isinstance(compression, str) and compression.startswith("zstd:"):
        tail = compression[5:]
        if tail.isdigit() and 1 <= int(tail) <= 22 and str(int(tail)) == tail:
            return int(tail)
    raise FormatError(  # LitData's sentence first: code that matches it keeps working
        f"The provided compression {compression} isn't available in ['zstd']: valid are None, 'zstd' (level 4) "
        "and 'zstd:1'..'zstd:22'"
    )


def compress_bytes(data: bytes, compression: str) -> bytes:
    """One zstd frame of ``data`` at the level of ``compression``."""
    import zstandard  # noqa: PLC0415

    level = parse_compression(compression) or DEFAULT_ZSTD_LEVEL  # a str always names a level
    return zstandard.ZstdCompressor(level=level).compress(data)


def decompress_bytes(data: bytes, compression: str | None = "zstd") -> bytes:
    """Decompress a whole-file zstd chunk held in memory."""
    import zstandard  # noqa: PLC0415

    parse_compression(compression)
    try:
        return zstandard.ZstdDecompressor().decompressobj().decompress(data)
    except zstandard.ZstdError as exc:
        raise CorruptChunkError(f"zstd data is corrupt: {exc}") from None


def decompress_to(src: str, dst: str, compression: str, expected_bytes: int | None = None) -> int:
    """Stream-decompress file ``src`` into ``dst`` via a tmp file and ``os.replace``; returns bytes written.

    ``expected_bytes`` (the index's ``chunk_bytes``) is checked before ``dst`` appears.
    """
    import zstandard  # noqa: PLC0415

    parse_compression(compression)
    tmp = f"{dst}.tmp.{os.getpid()}"
    try:
        with open(src, "rb") as fin, open(tmp, "wb") as fout:
            _, written = zstandard.ZstdDecompressor().copy_stream(fin, fout)
        if written == 0:
            raise CorruptChunkError(f"compressed chunk {src!r} decompressed to 0 bytes")
        if expected_bytes is not None and written != expected_bytes:
            raise CorruptChunkError(
                f"compressed chunk {src!r} decompressed to {written} bytes but index.json says chunk_bytes="
                f"{expected_bytes}"
            )
        os.replace(tmp, dst)
    except zstandard.ZstdError as exc:
        raise CorruptChunkError(f"compressed chunk {src!r} is not valid zstd: {exc}") from None
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return int(written)


def uncompressed_name(filename: str, compression: str | None) -> str:
    """``chunk-0-1.zstd.bin`` -> ``chunk-0-1.bin`` (the name LitData decompresses to)."""
    if compression and filename.endswith(f".{compression}.bin"):
        return filename[: -len(f".{compression}.bin")] + ".bin"
    return filename
