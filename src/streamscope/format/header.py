"""The classic chunk header: ``u32 N | u32 offsets[N+1]``, validated against the bytes it describes.

Every chunk kind starts with it (classic, classic with an Arrow footer, a per-sample zstd chunk once prepared, a
decrypted chunk), so the readers of each kind (:mod:`.chunk`, :mod:`.arrowchunk`, :mod:`.v076`,
:mod:`.encryption`) import it from here, below all of them.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from streamscope._core.errors import CorruptChunkError

__all__ = ["parse_header"]


def parse_header(buf: Any, name: str, size: int | None = None, expected_items: int | None = None) -> np.ndarray:
    """Validate the classic header of chunk bytes ``buf``; returns the ``N+1`` offsets (int64 array).

    Args:
        buf: the chunk's bytes (any buffer).
        name: file name used in error messages.
        size: bytes that belong to the chunk (default ``len(buf)``).
        expected_items: ``chunk_size`` from index.json, checked against the header when given.
    """
    size = len(buf) if size is None else size
    if size < 4:
        raise CorruptChunkError(f"chunk {name!r} is {size} bytes: too short for a header (offset 0)")
    n = int(np.frombuffer(buf, dtype="<u4", count=1, offset=0)[0])
    head = 4 * (n + 2)
    if head > size:
        magic = bytes(buf[:8])
        hint = ""
        if magic[:4] == b"\x28\xb5\x2f\xfd":
            hint = "; it starts with the zstd magic: decompress it first (decompress_file)"
        elif magic == b"LDFZ01\0\0":
            hint = "; it is a LitData 0.2.76 framed-zstd chunk: open it with open_chunk"
        raise CorruptChunkError(
            f"chunk {name!r} header says {n} items, needing a {head}-byte header, but the file has {size} bytes "
            f"(truncated at offset {size}){hint}"
        )
    if expected_items is not None and n != expected_items:
        raise CorruptChunkError(
            f"chunk {name!r} header says {n} items but index.json says chunk_size={expected_items} (offset 0)"
        )
    offsets = np.frombuffer(buf, dtype="<u4", count=n + 1, offset=4).astype(np.int64)
    if offsets[0] != head:
        raise CorruptChunkError(f"chunk {name!r}: first item offset {offsets[0]} != header size {head} (offset 4)")
    if n:
        steps = np.diff(offsets)
        bad = np.flatnonzero(steps < 0)
        if bad.size:
            i = int(bad[0])
            raise CorruptChunkError(
                f"chunk {name!r}: offsets not monotonic, item {i + 1} starts at {offsets[i + 1]} before item {i} "
                f"at {offsets[i]} (header offset {4 * (i + 2)})"
            )
    if offsets[-1] > size:
        raise CorruptChunkError(
            f"chunk {name!r}: items end at offset {offsets[-1]} but the file has {size} bytes (truncated at {size})"
        )
    return offsets
