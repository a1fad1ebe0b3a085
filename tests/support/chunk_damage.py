"""Ways to damage LitData 0.2.76 chunk bytes, for the bad-input tests (format level and through the dataset).

Each function takes a healthy chunk's bytes and returns damaged bytes plus the words the error must contain.
"""

from __future__ import annotations

import struct
from collections.abc import Callable

_PREFIX = struct.Struct("<8sHHIII")
_FRAME = struct.Struct("<IIQII")


def _ipc_len_pos(raw: bytes) -> int:
    assert raw[-8:] == b"LDARW01\0", "not an Arrow-footer chunk"
    return len(raw) - 12


def arrow_len_too_big(raw: bytes) -> tuple[bytes, str]:
    pos = _ipc_len_pos(raw)
    return raw[:pos] + struct.pack("<I", len(raw) * 2) + raw[pos + 4 :], "footer length"


def arrow_len_off_by_some(raw: bytes) -> tuple[bytes, str]:
    pos = _ipc_len_pos(raw)
    (n,) = struct.unpack_from("<I", raw, pos)
    return raw[:pos] + struct.pack("<I", n - 4) + raw[pos + 4 :], "footer length"


def arrow_garbage_ipc(raw: bytes) -> tuple[bytes, str]:
    pos = _ipc_len_pos(raw)
    (n,) = struct.unpack_from("<I", raw, pos)
    start = pos - n
    junk = bytes((i * 37 + 11) % 256 for i in range(n))
    return raw[:start] + junk + raw[pos:], "Arrow IPC footer"


def arrow_ipc_body_cut(raw: bytes) -> tuple[bytes, str]:
    """Keep the IPC file's magic but zero its middle (schema and batch metadata)."""
    pos = _ipc_len_pos(raw)
    (n,) = struct.unpack_from("<I", raw, pos)
    start = pos - n
    return raw[: start + 8] + b"\0" * (n - 16) + raw[start + n - 8 :], "Arrow IPC footer"


def arrow_unknown_version(raw: bytes) -> tuple[bytes, str]:
    return raw[:-8] + b"LDARW02\0", "unknown Arrow footer version"


def unknown_footer_magic(raw: bytes) -> tuple[bytes, str]:
    return raw[:-8] + b"LDXYZ01\0", "unknown footer magic"


def framed_unknown_version(raw: bytes) -> tuple[bytes, str]:
    assert raw[:8] == b"LDFZ01\0\0"
    return raw[:8] + struct.pack("<H", 2) + raw[10:], "version 2"


def framed_unknown_magic(raw: bytes) -> tuple[bytes, str]:
    return b"LDFZ02\0\0" + raw[8:], "unknown framed-zstd magic"


def _frame_pos(raw: bytes, f: int) -> int:
    _, _, _, n, _, _ = _PREFIX.unpack_from(raw, 0)
    return _PREFIX.size + 4 * (n + 1) + f * _FRAME.size


def framed_frame_past_end(raw: bytes) -> tuple[bytes, str]:
    pos = _frame_pos(raw, 0)
    first, cnt, coff, clen, ulen = _FRAME.unpack_from(raw, pos)
    return raw[:pos] + _FRAME.pack(first, cnt, coff, len(raw), ulen) + raw[pos + _FRAME.size :], "points at bytes"


def framed_offset_past_end(raw: bytes) -> tuple[bytes, str]:
    pos = _frame_pos(raw, 0)
    first, cnt, coff, clen, ulen = _FRAME.unpack_from(raw, pos)
    return raw[:pos] + _FRAME.pack(first, cnt, len(raw) + 100, clen, ulen) + raw[pos + _FRAME.size :], "points at"


def framed_truncated(raw: bytes) -> tuple[bytes, str]:
    return raw[: len(raw) - 7], "points at bytes"


def framed_header_truncated(raw: bytes) -> tuple[bytes, str]:
    return raw[:30], "truncated"


def framed_corrupt_frame(raw: bytes) -> tuple[bytes, str]:
    """Break frame 0's zstd magic (zstd frames carry no checksum: damage inside a frame may go unseen)."""
    pos = _frame_pos(raw, 0)
    _, _, coff, _, _ = _FRAME.unpack_from(raw, pos)
    return raw[:coff] + b"\0\0\0\0" + raw[coff + 4 :], "zstd frame 0"


ARROW: dict[str, Callable[[bytes], tuple[bytes, str]]] = {
    "len_too_big": arrow_len_too_big,
    "len_off": arrow_len_off_by_some,
    "garbage_ipc": arrow_garbage_ipc,
    "ipc_body_cut": arrow_ipc_body_cut,
    "unknown_version": arrow_unknown_version,
    "unknown_magic": unknown_footer_magic,
}
FRAMED: dict[str, Callable[[bytes], tuple[bytes, str]]] = {
    "unknown_version": framed_unknown_version,
    "unknown_magic": framed_unknown_magic,
    "frame_past_end": framed_frame_past_end,
    "offset_past_end": framed_offset_past_end,
    "truncated": framed_truncated,
    "header_truncated": framed_header_truncated,
    "corrupt_frame": framed_corrupt_frame,
}
