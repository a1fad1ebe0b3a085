"""The ``json`` leaf of LitData 0.2.76: one list/dict field of a sample stored as a single tagged-binary leaf.

LitData 0.2.76 writes a nested value of a dict sample (``{"tags": [...], "meta": {...}}``) as ONE leaf named
``json`` instead of flattening it into many leaves, so samples with lists of varying length share one
``data_format``. The leaf is a tagged binary encoding, byte for byte as below; payloads whose first byte is
above ``0x20`` (in practice ``[`` or ``{``: older writers) are plain UTF-8 JSON.

Encoding of a value (``u32``/``i64``/``f64`` little-endian; ``str`` = ``u32 len`` + UTF-8)::

    tag 0  JSON       u32 len, compact JSON (separators "," ":", non-ASCII kept) - the fallback for anything else
    tag 1  str list   u32 n, n x str                      (also the empty list: 01 00000000)
    tag 2  int list   u32 n, n x i64                      (every item an int within int64, no bools)
    tag 3  float list u32 n, n x f64                      (every item a float)
    tag 4  bool list  u32 n, n x u8 (0/1)
    tag 5  dict       u32 n, n x (str key, value)         (every key a str, else the whole dict is JSON)
    tag 6  records    u32 rows, u32 k, k x str key, then per row per key one cell:
                      0x10 None | 0x11 str | 0x12 i64 | 0x13 f64 | 0x14 u8 bool
                      (a list of dicts that all have the first dict's keys and only such scalar values)
    tag 7  str, 8 int (i64), 9 float (f64), 10 bool (u8), 11 None

The list kinds are decided on the whole list (``[1, 2.5]`` is JSON, not a float list); an int outside int64 is
JSON. Worked example: ``{"k": [1, 2]}`` encodes to ``05 01000000 | 01000000 6b | 02 02000000
0100000000000000 0200000000000000``.

LitData uses ``orjson`` for the JSON fallback when it is installed; its output differs from the standard
library's only in corner cases (``NaN``, exponent spelling, non-str keys), and :func:`decode` reads both.
"""

from __future__ import annotations

import json
import struct
from typing import Any

from streamscope._core.errors import FormatError

__all__ = ["JsonLeaf", "decode", "encode"]

_JSON, _STRS, _I64S, _F64S, _BOOLS, _DICT, _RECS, _STR, _I64T, _F64T, _BOOL, _NONE = range(12)
_REC_NONE, _REC_STR, _REC_I64, _REC_F64, _REC_BOOL = 0x10, 0x11, 0x12, 0x13, 0x14
_I64_MIN, _I64_MAX = -(2**63), 2**63 - 1
_U32 = struct.Struct("<I")
_HDR = struct.Struct("<BI")
_I64 = struct.Struct("<q")
_F64 = struct.Struct("<d")


class JsonLeaf:
    """Marks a list/dict as one ``json`` leaf (the pytree flattener does not walk into it)."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value

    def __repr__(self) -> str:
        return f"JsonLeaf({self.value!r})"


# --- encoding ------------------------------------------------------------------------------------------


def _text(s: str) -> bytes:
    raw = s.encode("utf-8")
    return _U32.pack(len(raw)) + raw


def _as_json(value: Any) -> bytes:
    payload = json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    return _HDR.pack(_JSON, len(payload)) + payload


def _is_i64(v: Any) -> bool:
    return type(v) is not bool and isinstance(v, int) and _I64_MIN <= v <= _I64_MAX


def _records(rows: list[dict[str, Any]]) -> bytes | None:
    keys = list(rows[0])
    if not keys or not all(isinstance(k, str) for k in keys):
        return None
    keyset = set(keys)
    out = [_HDR.pack(_RECS, len(rows)), _U32.pack(len(keys))]
    out += [_text(k) for k in keys]
    for row in rows:
        if set(row) != keyset:
            return None
        for k in keys:
            v = row[k]
            if v is None:
                out.append(b"\x10")
            elif isinstance(v, bool):
                out.append(b"\x14\x01" if v else b"\x14\x00")
            elif isinstance(v, str):
                out.append(b"\x11" + _text(v))
            elif _is_i64(v):
                out.append(b"\x12" + _I64.pack(v))
            elif isinstance(v, float):
                out.append(b"\x13" + _F64.pack(v))
            else:
                return None
    return b"".join(out)


def encode(value: Any) -> bytes:
    """The ``json`` leaf bytes of ``value`` (byte-identical to LitData 0.2.76 without orjson).

    Raises:
        TypeError: a value JSON cannot hold (bytes, sets, objects) inside the JSON fallback.
    """
    if value is None:
        return b"\x0b"
    if isinstance(value, bool):
        return b"\x0a\x01" if value else b"\x0a\x00"
    if isinstance(value, str):
        return b"\x07" + _text(value)
    if _is_i64(value):
        return b"\x08" + _I64.pack(value)
    if isinstance(value, float):
        return b"\x09" + _F64.pack(value)
    if isinstance(value, dict):
        parts = [_HDR.pack(_DICT, len(value))]
        for k, v in value.items():
            if not isinstance(k, str):
                return _as_json(value)
            parts.append(_text(k))
            parts.append(encode(v))
        return b"".join(parts)
    if not isinstance(value, list):
        return _as_json(value)
    if not value:
        return _HDR.pack(_STRS, 0)
    first = value[0]
    if isinstance(first, str) and all(isinstance(v, str) for v in value):
        raws = [v.encode("utf-8") for v in value]
        return _HDR.pack(_STRS, len(raws)) + b"".join(_U32.pack(len(r)) + r for r in raws)
    if isinstance(first, bool) and all(isinstance(v, bool) for v in value):
        return _HDR.pack(_BOOLS, len(value)) + bytes(1 if v else 0 for v in value)
    if _is_i64(first) and all(_is_i64(v) for v in value):
        return _HDR.pack(_I64S, len(value)) + struct.pack(f"<{len(value)}q", *value)
    if isinstance(first, float) and all(isinstance(v, float) for v in value):
        return _HDR.pack(_F64S, len(value)) + struct.pack(f"<{len(value)}d", *value)
    if isinstance(first, dict) and all(isinstance(v, dict) for v in value):
        rec = _records(value)
        if rec is not None:
            return rec
    return _as_json(value)


# --- decoding ------------------------------------------------------------------------------------------


class _Reader:
    __slots__ = ("buf", "pos")

    def __init__(self, buf: bytes) -> None:
        self.buf = buf
        self.pos = 0

    def take(self, n: int) -> int:
        start = self.pos
        end = start + n
        if n < 0 or end > len(self.buf):
            raise FormatError(f"json leaf of {len(self.buf)} bytes is truncated: {n} bytes needed at offset {start}")
        self.pos = end
        return start

    def u32(self) -> int:
        return _U32.unpack_from(self.buf, self.take(4))[0]

    def text(self) -> str:
        n = self.u32()
        start = self.take(n)
        return self.buf[start : start + n].decode("utf-8")

    def value(self) -> Any:
        tag = self.buf[self.take(1)]
        if tag == _STR:
            return self.text()
        if tag == _I64T:
            return _I64.unpack_from(self.buf, self.take(8))[0]
        if tag == _F64T:
            return _F64.unpack_from(self.buf, self.take(8))[0]
        if tag == _BOOL:
            return self.buf[self.take(1)] != 0
        if tag == _NONE:
            return None
        if tag == _JSON:
            n = self.u32()
            start = self.take(n)
            return json.loads(self.buf[start : start + n])
        if tag == _DICT:
            n = self.u32()
            out: dict[str, Any] = {}
            for _ in range(n):
                k = self.text()
                out[k] = self.value()
            return out
        if tag == _STRS:
            return [self.text() for _ in range(self.u32())]
        if tag in (_I64S, _F64S):
            n = self.u32()
            start = self.take(8 * n)
            return list(struct.unpack_from(f"<{n}{'q' if tag == _I64S else 'd'}", self.buf, start))
        if tag == _BOOLS:
            n = self.u32()
            start = self.take(n)
            return [b != 0 for b in self.buf[start : start + n]]
        if tag == _RECS:
            return self.records()
        raise FormatError(f"json leaf: unknown tag {tag} at offset {self.pos - 1}")

    def records(self) -> list[dict[str, Any]]:
        rows = self.u32()
        keys = [self.text() for _ in range(self.u32())]
        out = []
        for _ in range(rows):
            row: dict[str, Any] = {}
            for k in keys:
                cell = self.buf[self.take(1)]
                if cell == _REC_NONE:
                    row[k] = None
                elif cell == _REC_STR:
                    row[k] = self.text()
                elif cell == _REC_I64:
                    row[k] = _I64.unpack_from(self.buf, self.take(8))[0]
                elif cell == _REC_F64:
                    row[k] = _F64.unpack_from(self.buf, self.take(8))[0]
                elif cell == _REC_BOOL:
                    row[k] = self.buf[self.take(1)] != 0
                else:
                    raise FormatError(f"json leaf: unknown record cell tag {cell} at offset {self.pos - 1}")
            out.append(row)
        return out


def decode(buf: bytes | bytearray | memoryview) -> Any:
    """The value of a ``json`` leaf (tagged binary, or plain JSON when the first byte is above 0x20).

    Raises:
        FormatError: the bytes are neither (truncated, unknown tag, invalid JSON or UTF-8).
    """
    raw = bytes(buf)
    try:
        if not raw or raw[0] > _NONE:  # not a tag: plain JSON (LitData parses it whole, leading whitespace too)
            return json.loads(raw)
        # like LitData, trailing bytes after the top-level value are ignored
        return _Reader(raw).value()
    except FormatError:
        raise
    except (ValueError, UnicodeDecodeError) as exc:  # json.JSONDecodeError is a ValueError
        raise FormatError(f"json leaf of {len(raw)} bytes cannot be decoded: {exc}") from None
