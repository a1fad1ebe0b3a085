"""INTERIM chunk writer, used only until ``streamscope.format.writer`` lands on main. TO BE DELETED then.

It implements the subset of the format engineer's ``ChunkWriter`` interface that :mod:`.functions` uses
(``ChunkWriter(out_dir, *, chunk_size, chunk_bytes, compression, item_loader, serializers, rank,
chunk_index)``, ``add_item(index, sample) -> closed entries``, ``done()``, ``chunks``, ``config``) for
PyTree samples whose leaves are ``str, bool, int, float, bytes, numpy arrays, torch tensors`` or anything
picklable, writing LitData 0.2.68's chunk layout (``u32 N | u32 offsets[N+1] | items``; each item
``u32 sizes[L] | leaves``). :mod:`._writer` picks the real writer as soon as it is importable.
"""

from __future__ import annotations

import json
import os
import pickle
import struct
from collections import OrderedDict
from typing import Any

import numpy as np

from streamscope._core.errors import ConfigError, SchemaMismatchError

try:  # torch is a hard dependency of streamscope, but keep the writer importable without it.
    import torch
except ImportError:  # pragma: no cover
    torch = None  # type: ignore[assignment]

_NP_DTYPES = [
    np.int8,
    np.int16,
    np.int32,
    np.int64,
    np.uint8,
    np.uint16,
    np.uint32,
    np.uint64,
    np.float16,
    np.float32,
    np.float64,
    np.complex64,
    np.complex128,
    np.bool_,
    np.object_,
    np.bytes_,
    np.str_,
    np.void,
]
_NP_INDEX = {np.dtype(d): i for i, d in enumerate(_NP_DTYPES)}

_TORCH_INDEX: dict[Any, int] = {}
if torch is not None:
    for _i, _d in enumerate(
        [
            torch.float32,
            torch.float,
            torch.float64,
            torch.double,
            torch.complex64,
            torch.cfloat,
            torch.complex128,
            torch.cdouble,
            torch.float16,
            torch.half,
            torch.bfloat16,
            torch.uint8,
            torch.int8,
            torch.int16,
            torch.short,
            torch.int32,
            torch.int,
            torch.int64,
            torch.long,
            torch.bool,
            torch.uint16,
        ]
    ):
        _TORCH_INDEX[_d] = _i  # aliases resolve to the last index, as LitData's inverse dict does

_LEAF = {"type": None, "context": None, "children_spec": []}


def _flatten(obj: Any, leaves: list[Any]) -> dict[str, Any]:
    """Append ``obj``'s leaves to ``leaves`` and return its LitData-style schema node."""
    t = type(obj)
    if t is dict or t is OrderedDict:
        name = "builtins.dict" if t is dict else "collections.OrderedDict"
        return {
            "type": name,
            "context": json.dumps(list(obj.keys())),
            "children_spec": [_flatten(v, leaves) for v in obj.values()],
        }
    if t is list or t is tuple:
        return {
            "type": "builtins.list" if t is list else "builtins.tuple",
            "context": "null",
            "children_spec": [_flatten(v, leaves) for v in obj],
        }
    leaves.append(obj)
    return _LEAF


def _pick(leaf: Any) -> tuple[str, Any]:
    """Return (data_format name, type key) for a leaf, following LitData's detection order."""
    if isinstance(leaf, str):
        if os.path.isfile(leaf):
            return "pickle", "pickle"
        return "str", str
    if isinstance(leaf, bool):
        return "bool", bool
    if isinstance(leaf, int):
        return "int", int
    if isinstance(leaf, float):
        return "float", float
    if isinstance(leaf, bytes):
        return "bytes", bytes
    if isinstance(leaf, np.ndarray):
        if leaf.ndim == 1:
            return f"no_header_numpy:{_NP_INDEX[leaf.dtype]}", ("np1", leaf.dtype)
        if leaf.ndim > 1:
            return "numpy", "npN"
    if torch is not None and isinstance(leaf, torch.Tensor):
        if leaf.ndim == 1:
            return f"no_header_tensor:{_TORCH_INDEX[leaf.dtype]}", ("t1", leaf.dtype)
        return "tensor", "tN"
    return "pickle", "pickle"


def _encode(kind: Any, leaf: Any) -> bytes:
    if kind is str:
        return leaf.encode("utf-8")
    if kind is int:
        return struct.pack("<q", leaf)
    if kind is float:
        return struct.pack("<d", leaf)
    if kind is bool:
        return b"\x01" if leaf else b"\x00"
    if kind is bytes:
        return leaf
    if kind == "npN":
        arr = leaf
        head = struct.pack(f"<II{arr.ndim}I", _NP_INDEX[arr.dtype], arr.ndim, *arr.shape)
        return head + arr.tobytes(order="C")
    if kind == "tN":
        head = struct.pack(f">II{leaf.ndim}I", _TORCH_INDEX[leaf.dtype], leaf.ndim, *leaf.shape)
        return head + leaf.numpy().tobytes(order="C")
    if kind == "pickle":
        return pickle.dumps(leaf)
    tag, _dtype = kind
    if tag == "np1":
        return leaf.tobytes(order="C")
    return leaf.numpy().tobytes(order="C")


def _matches(kind: Any, leaf: Any) -> bool:
    if kind is str:
        return type(leaf) is str
    if kind is int:
        return type(leaf) is int or (isinstance(leaf, int) and not isinstance(leaf, bool))
    if kind is float:
        return isinstance(leaf, float)
    if kind is bool:
        return isinstance(leaf, bool)
    if kind is bytes:
        return isinstance(leaf, bytes)
    if kind == "npN":
        return isinstance(leaf, np.ndarray) and leaf.ndim > 1
    if kind == "tN":
        return torch is not None and isinstance(leaf, torch.Tensor) and leaf.ndim != 1
    if kind == "pickle":
        return True
    tag, dtype = kind
    if tag == "np1":
        return isinstance(leaf, np.ndarray) and leaf.ndim == 1 and leaf.dtype == dtype
    return torch is not None and isinstance(leaf, torch.Tensor) and leaf.ndim == 1 and leaf.dtype == dtype


class ChunkWriter:
    """Greedy chunk writer producing LitData 0.2.68 PyTreeLoader chunks (interim; see module doc)."""

    def __init__(
        self,
        out_dir: str,
        *,
        chunk_size: int | None = None,
        chunk_bytes: int | None = None,
        compression: str | None = None,
        item_loader: Any = None,
        serializers: Any = None,
        rank: int = 0,
        chunk_index: int = 0,
    ) -> None:
        if item_loader is not None and type(item_loader).__name__ != "PyTreeLoader":
            raise ConfigError(f"the interim writer supports only PyTreeLoader, got {type(item_loader).__name__}")
        if serializers:
            raise ConfigError("the interim writer does not support custom serializers")
        self._comp_level: int | None = None
        if compression is not None:
            if compression == "zstd":
                self._comp_level = 4
            elif compression.startswith("zstd:") and compression[5:].isdigit() and 1 <= int(compression[5:]) <= 22:
                self._comp_level = int(compression[5:])
            else:
                raise ConfigError(f"unknown compression {compression!r}: use 'zstd' or 'zstd:1'..'zstd:22'")
        self.out_dir = out_dir
        self.chunk_size = chunk_size
        self.chunk_bytes = chunk_bytes
        self.compression = compression
        self.rank = rank
        self.chunk_index = chunk_index
        self.chunks: list[dict[str, Any]] = []
        self.config: dict[str, Any] | None = None
        self._kinds: list[Any] = []
        self._spec: dict[str, Any] | None = None
        self._keys: tuple[Any, ...] | None = None
        self._pending: list[bytes] = []
        self._pending_bytes = 0
        os.makedirs(out_dir, exist_ok=True)

    def _serialize(self, index: int, sample: Any) -> bytes:
        leaves: list[Any] = []
        spec = _flatten(sample, leaves)
        if self.config is None:
            picked = [_pick(leaf) for leaf in leaves]
            self._kinds = [k for _, k in picked]
            self._spec = spec
            self.config = {
                "chunk_bytes": self.chunk_bytes,
                "chunk_size": self.chunk_size,
                "compression": self.compression,
                "data_format": [n for n, _ in picked],
                "data_spec": json.dumps([1, spec]),
                "encryption": None,
                "item_loader": "PyTreeLoader",
            }
        else:
            if len(leaves) != len(self._kinds) or spec != self._spec:
                raise SchemaMismatchError(
                    f"sample {index} has structure {json.dumps(spec)[:200]} but the first sample had "
                    f"{json.dumps(self._spec)[:200]}"
                )
        parts = []
        for j, (kind, leaf) in enumerate(zip(self._kinds, leaves)):
            if not _matches(kind, leaf):
                raise SchemaMismatchError(
                    f"sample {index} leaf {j} is {type(leaf).__name__} but the first sample's leaf {j} "
                    f"is {self.config['data_format'][j]}"
                )
            parts.append(_encode(kind, leaf))
        head = struct.pack(f"<{len(parts)}I", *(len(p) for p in parts))
        return head + b"".join(parts)

    def add_item(self, index: int, sample: Any) -> list[dict[str, Any]]:
        """Serialize one sample; return the entries of chunks closed by it (possibly empty)."""
        data = self._serialize(index, sample)
        closed: list[dict[str, Any]] = []
        over_bytes = self.chunk_bytes is not None and self._pending_bytes + len(data) > self.chunk_bytes
        over_items = self.chunk_size is not None and len(self._pending) + 1 > self.chunk_size
        if (over_bytes or over_items) and self._pending:
            closed.append(self._flush())
        self._pending.append(data)
        self._pending_bytes += len(data)
        if self.chunk_bytes is not None and len(self._pending) == 1 and len(data) > self.chunk_bytes:
            closed.append(self._flush())
        return closed

    def done(self) -> list[dict[str, Any]]:
        """Write the last partial chunk; return its entry (or nothing)."""
        return [self._flush()] if self._pending else []

    def _flush(self) -> dict[str, Any]:
        items = self._pending
        n = len(items)
        offsets = np.empty(n + 1, dtype=np.uint32)
        start = 4 * (n + 2)
        offsets[0] = start
        np.cumsum([len(d) for d in items], out=offsets[1:])
        offsets[1:] += start
        body = b"".join([struct.pack("<I", n), offsets.tobytes(), *items])
        name = f"chunk-{self.rank}-{self.chunk_index}"
        if self._comp_level is not None:
            import zstandard

            payload = zstandard.ZstdCompressor(level=self._comp_level).compress(body)
            name += f".{self.compression}.bin"
        else:
            payload = body
            name += ".bin"
        with open(os.path.join(self.out_dir, name), "wb") as f:
            f.write(payload)
        entry = {"chunk_bytes": len(body), "chunk_size": n, "dim": None, "filename": name}
        self.chunks.append(entry)
        self.chunk_index += 1
        self._pending = []
        self._pending_bytes = 0
        return entry
