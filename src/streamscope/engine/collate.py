"""Column-wise batch decoding straight from mmapped chunks.

For the common leaf types (``int``, ``float``, ``bool``, ``str``, ``numpy``, ``no_header_numpy``, ``tensor``,
``no_header_tensor``) and containers (dict, list, tuple, a bare leaf), a batch is decoded one *column* (leaf)
at a time: per-item size headers are gathered with one numpy fancy-index, fixed-size numbers are gathered the
same way, and array leaves are copied once into a preallocated ``(B, ...)`` array that becomes the tensor. The
result is exactly what ``torch.utils.data.default_collate`` returns for the list of decoded samples (tests
compare them). Anything else (other leaf types, ragged arrays, namedtuples, ...) returns None and the caller
takes the sample-by-sample path.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

__all__ = ["ALLOC", "ArrowCollator", "BlockCollator", "ChunkView", "ColumnCollator", "chunk_view", "empty_batch_bytes"]


_NUMERIC = {"int": np.dtype("<i8"), "float": np.dtype("<f8"), "bool": np.dtype(np.bool_)}
_TORCH_NUMERIC = {"int": torch.int64, "float": torch.float64, "bool": torch.bool}


@dataclass
class ChunkView:
    """An open chunk as flat arrays: ``buf`` (uint8 over the whole file) and ``offsets`` (u32, N+1)."""

    buf: np.ndarray
    offsets: np.ndarray
    mv: memoryview
    path: str = ""


def chunk_view(mapped: Any, num_items: int, path: str = "") -> ChunkView:
    """Views over a mapped chunk file (anything exporting the buffer protocol, e.g. an ``mmap``)."""
    mv = memoryview(mapped).cast("B")
    buf = np.frombuffer(mv, dtype=np.uint8)
    offsets = np.frombuffer(mv, dtype="<u4", count=num_items + 1, offset=4)
    return ChunkView(buf, offsets, mv, path)


#: The allocation hook of a DataLoader worker that decodes into reusable arenas (stream.batching): called with a
#: byte count, returns a 1-D uint8 tensor of that many bytes or None (arena full).
ALLOC: list[Callable[[int], torch.Tensor | None] | None] = [None]


#: The last batch a collator built in this process and its tensor bytes: ``engine.batching.batch_bytes`` reads
#: them for that very batch (an identity test: this slot holds it, so no other object can pass it) instead of
#: walking its tensors, which a loop with no workers would do on its own thread for every batch with metrics on.
#: Only ever replaced whole (a list of two: the batch, its bytes); a batch collated elsewhere is walked.
LAST: list[Any] = [None, 0]


def _note(batch: Any, nbytes: int) -> Any:
    """``batch``, noted as the last one built here with its tensor bytes (:data:`LAST`)."""
    global LAST
    LAST = [batch, nbytes]
    return batch


def empty_batch_bytes(n: int, nbytes: int) -> torch.Tensor:
    """An uninitialised ``(n, nbytes)`` uint8 tensor; in a DataLoader worker it lives in shared memory.

    Like ``default_collate``: a batch built in shared memory is handed to the main process without a copy. A
    worker's arena hook (:data:`ALLOC`) is asked first.
    """
    from torch.utils.data import get_worker_info

    hook = ALLOC[0]
    if hook is not None and n * nbytes > 0:
        t = hook(n * nbytes)
        if t is not None:
            return t.view(n, nbytes)
    if get_worker_info() is not None and n * nbytes > 0:
        base = torch.empty(0, dtype=torch.uint8)
        # torch leaves _typed_storage unannotated
        storage = base._typed_storage()._new_shared(n * nbytes, device=base.device)  # type: ignore[no-untyped-call]
        return base.new(storage).resize_(n, nbytes)
    return torch.empty((n, nbytes), dtype=torch.uint8)


def _numpy_dtypes() -> Sequence[np.dtype]:
    from streamscope.format.dtypes import NUMPY_DTYPES

    return NUMPY_DTYPES


def _torch_dtype(idx: int) -> torch.dtype:
    from streamscope.format.dtypes import TORCH_DTYPE_NAMES

    dtype: torch.dtype = getattr(torch, TORCH_DTYPE_NAMES[idx])
    return dtype


def _torch_twin(np_dtype: np.dtype) -> torch.dtype | None:
    """The torch dtype ``torch.from_numpy`` gives an array of ``np_dtype`` (None: torch has none)."""
    try:
        return torch.from_numpy(np.empty(0, dtype=np_dtype)).dtype
    except TypeError:
        return None


class _Fallback(Exception):
    """This batch cannot take the column path."""


def _parse_spec(data_spec: str | None) -> Any:
    if data_spec is None:
        return None
    parsed = json.loads(data_spec)
    return parsed[1] if isinstance(parsed, list) and len(parsed) == 2 else parsed


def _structure(node: dict[str, Any], counter: list[int]) -> Any:
    """Turn a treespec node into a nested template: ('dict', keys, children) / ('list', children) / leaf int."""
    typ = node.get("type")
    children = node.get("children_spec") or []
    if typ is None and not children:
        i = counter[0]
        counter[0] += 1
        return i
    if typ == "builtins.dict":
        keys = json.loads(node["context"])
        return ("dict", keys, [_structure(c, counter) for c in children])
    if typ in ("builtins.list", "builtins.tuple"):
        return ("list", [_structure(c, counter) for c in children])
    raise _Fallback(f"container {typ}")


def _build(template: Any, columns: list[Any]) -> Any:
    if isinstance(template, int):
        return columns[template]
    if template[0] == "dict":
        return {k: _build(t, columns) for k, t in zip(template[1], template[2])}
    # default_collate transposes sequences with zip(): a str column directly inside one stays a tuple
    out = []
    for t in template[1]:
        col = _build(t, columns)
        out.append(tuple(col) if isinstance(t, int) and isinstance(col, list) else col)
    return out


class ColumnCollator:
    """Decodes batches of PyTree items column-wise; ``None`` from :meth:`collate` means "not for this batch"."""

    def __init__(self, data_format: Sequence[str], data_spec: str | None) -> None:
        self.data_format = list(data_format)
        self.num_leaves = len(self.data_format)
        self.kinds = [f.split(":", 1)[0] for f in self.data_format]
        self.template: Any = None
        self.supported = True
        try:
            spec = _parse_spec(data_spec)
            if spec is None:
                self.template = 0 if self.num_leaves == 1 else ("list", list(range(self.num_leaves)))
                if self.num_leaves != 1:
                    self.supported = False
            else:
                counter = [0]
                self.template = _structure(spec, counter)
                if counter[0] != self.num_leaves:
                    self.supported = False
        except (_Fallback, ValueError, KeyError, TypeError):
            self.supported = False
        known = {"int", "float", "bool", "str", "numpy", "no_header_numpy", "tensor", "no_header_tensor"}
        if any(k not in known for k in self.kinds):
            self.supported = False
        self._hdr_idx = np.arange(4 * self.num_leaves, dtype=np.int64)

    def collate(self, groups: Sequence[tuple[ChunkView, np.ndarray, np.ndarray]], batch_len: int) -> Any:
        """Collate one batch.

        Args:
            groups: per chunk: (its view, positions in the batch, item indexes in the chunk).
            batch_len: number of items in the batch.
        """
        if not self.supported:
            return None
        try:
            return self._collate(groups, batch_len)
        except _Fallback:
            return None

    def _collate(self, groups: Sequence[tuple[ChunkView, np.ndarray, np.ndarray]], n: int) -> Any:
        L = self.num_leaves
        parts = []
        for view, pos, items in groups:
            starts = view.offsets[items].astype(np.int64)
            sizes = view.buf[starts[:, None] + self._hdr_idx].view("<u4").reshape(len(items), L).astype(np.int64)
            leaf_starts = starts[:, None] + 4 * L + np.cumsum(sizes, axis=1) - sizes
            parts.append((view, pos, leaf_starts, sizes, starts, items))
        columns = [self._column(j, parts, n) for j in range(L)]
        # str columns are lists: no bytes
        return _note(_build(self.template, columns), sum(c.nbytes for c in columns if type(c) is torch.Tensor))

    def _column(
        self, j: int, parts: list[tuple[ChunkView, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]], n: int
    ) -> Any:
        kind = self.kinds[j]
        if kind in _NUMERIC:
            dt = _NUMERIC[kind]
            raw = empty_batch_bytes(n, dt.itemsize)  # shared memory in a worker, like the image column
            out = raw.numpy().view(dt).reshape(n)
            idx = np.arange(dt.itemsize, dtype=np.int64)
            for view, pos, ls, sz, _, _ in parts:
                if np.any(sz[:, j] != dt.itemsize):
                    raise _Fallback(kind)
                out[pos] = view.buf[ls[:, j][:, None] + idx].view(dt).ravel()
            return raw.view(_TORCH_NUMERIC[kind]).reshape(n)
        if kind == "str":
            col: list[Any] = [None] * n
            for view, pos, ls, sz, _, _ in parts:
                mv = view.mv
                for p, a, b in zip(pos.tolist(), ls[:, j].tolist(), (ls[:, j] + sz[:, j]).tolist()):
                    col[p] = str(mv[a:b], "utf-8")
            return col
        if kind in ("numpy", "tensor"):
            return self._array_column(j, parts, n, kind)
        # no_header_numpy / no_header_tensor: 1-D, dtype from the name
        dtype_idx = int(self.data_format[j].split(":", 1)[1])
        if kind == "no_header_numpy":
            np_dtype = _numpy_dtypes()[dtype_idx]
            if np_dtype.itemsize == 0 or np_dtype.kind in "OSUV":
                raise _Fallback(kind)
            torch_dtype = None
            itemsize = np_dtype.itemsize
        else:
            torch_dtype = _torch_dtype(dtype_idx)
            itemsize = torch.empty((), dtype=torch_dtype).element_size()
        nbytes = int(parts[0][3][0, j])
        for _, _, _, sz, _, _ in parts:
            if np.any(sz[:, j] != nbytes):
                raise _Fallback("ragged")  # default_collate would refuse to stack; the sample path says so
        if nbytes % itemsize:
            raise _Fallback("size")
        return self._fill(
            j, parts, n, nbytes, 0, (nbytes // itemsize,), np_dtype if torch_dtype is None else None, torch_dtype
        )

    def _array_column(
        self,
        j: int,
        parts: list[tuple[ChunkView, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]],
        n: int,
        kind: str,
    ) -> Any:
        view0, _, ls0, _, _, _ = parts[0]
        a0 = int(ls0[0, j])
        if kind == "numpy":
            dtype_idx, ndim = (int(x) for x in view0.buf[a0 : a0 + 8].view("<u4"))
            shape = tuple(int(x) for x in view0.buf[a0 + 8 : a0 + 8 + 4 * ndim].view("<u4"))
            np_dtype = _numpy_dtypes()[dtype_idx]
            if np_dtype.kind in "OSUV" or np_dtype.itemsize == 0:
                raise _Fallback("numpy dtype")
            torch_dtype = None
            itemsize = np_dtype.itemsize
        else:
            dtype_idx, ndim = (int(x) for x in view0.buf[a0 : a0 + 8].view(">u4"))
            shape = tuple(int(x) for x in view0.buf[a0 + 8 : a0 + 8 + 4 * ndim].view(">u4"))
            torch_dtype = _torch_dtype(dtype_idx)
            np_dtype = None
            itemsize = torch.empty((), dtype=torch_dtype).element_size()
        hlen = 8 + 4 * ndim
        nbytes = int(np.prod(shape, dtype=np.int64)) * itemsize
        header = view0.buf[a0 : a0 + hlen]
        hidx = np.arange(hlen, dtype=np.int64)
        for view, _, ls, sz, _, _ in parts:
            if np.any(sz[:, j] != hlen + nbytes):
                raise _Fallback("ragged")
            if not np.array_equal(view.buf[ls[:, j][:, None] + hidx], np.broadcast_to(header, (len(ls), hlen))):
                raise _Fallback("header")
        return self._fill(j, parts, n, nbytes, hlen, shape, np_dtype, torch_dtype)

    @staticmethod
    def _fill(
        j: int,
        parts: list[tuple[ChunkView, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]],
        n: int,
        nbytes: int,
        skip: int,
        shape: tuple[int, ...],
        np_dtype: np.dtype | None,
        torch_dtype: torch.dtype | None,
    ) -> torch.Tensor:
        if nbytes == 0:
            raise _Fallback("empty")
        raw = empty_batch_bytes(n, nbytes)
        flat = raw.numpy()
        for view, pos, ls, _, _, _ in parts:
            src = ls[:, j] + skip
            buf = view.buf
            for p, a in zip(pos.tolist(), src.tolist()):
                flat[p] = buf[a : a + nbytes]
        if np_dtype is not None:
            torch_dtype = _torch_twin(np_dtype)
            if torch_dtype is None:
                return torch.from_numpy(flat.view(np_dtype).reshape((n, *shape)))
        assert torch_dtype is not None
        # a view of ``raw`` keeps its storage (a worker's shared arena): it travels without a copy
        return raw.view(torch_dtype).reshape((n, *shape))


class BlockCollator:
    """Batches of TokensLoader blocks: one ``(B, block_size)`` tensor filled straight from the token streams."""

    supported = True

    def __init__(self, loader: Any) -> None:
        self.loader = loader
        self.block_size = int(loader.block_size)
        self.dtype = np.dtype(loader._dtype)
        self.nbytes = self.block_size * self.dtype.itemsize
        if getattr(loader, "_kind", "") == "no_header_tensor":
            self.torch_dtype = loader._torch_dtype
        else:
            self.torch_dtype = torch.from_numpy(np.empty(0, dtype=self.dtype)).dtype

    def collate(self, groups: Sequence[tuple[ChunkView, np.ndarray, np.ndarray]], n: int) -> Any:
        """Collate one batch of blocks (same result as ``default_collate`` of the blocks)."""
        from streamscope._core.errors import CorruptChunkError

        nb = self.nbytes
        raw = empty_batch_bytes(n, nb)
        flat = raw.numpy()
        for view, pos, items in groups:
            head = 4 * (len(view.offsets) + 1)
            end = int(view.offsets[-1])
            nblocks = (end - head) // nb
            if len(items) and int(items.max()) >= nblocks:
                raise CorruptChunkError(
                    f"chunk {view.path!r}: token block {int(items.max())} ends at offset "
                    f"{head + (int(items.max()) + 1) * nb} past the chunk data end {end}"
                )
            buf = view.buf
            for p, a in zip(pos.tolist(), (head + items.astype(np.int64) * nb).tolist()):
                flat[p] = buf[a : a + nb]
        return _note(raw.view(self.torch_dtype).reshape(n, self.block_size), n * nb)


class ArrowCollator:
    """Batches of LitData 0.2.76 Arrow-footer rows, column by column; the result is ``default_collate(rows)``.

    A batch's rows are taken from the chunks' record batches (pyarrow ``take``); then per column: int64, double
    and bool columns without nulls become one tensor (the numpy values written straight into the batch's
    storage, shared memory in a worker), string and binary columns without nulls a list, and any other column
    goes through ``default_collate`` of its Python values (which is what ``default_collate`` of the row dicts
    does per key). Rows from chunks whose schemas differ in names or order return None (the caller collates the
    rows themselves, so ``default_collate`` raises or keys in its own way).
    """

    supported = True

    def collate(self, groups: Sequence[tuple[Any, np.ndarray, np.ndarray]], n: int) -> Any:
        """Collate one batch: per chunk (its ArrowChunk, positions in the batch, rows in the chunk)."""
        names = groups[0][0].names
        if any(chunk.names != names for chunk, _, _ in groups[1:]):
            return None
        tables = [(pos, chunk.take(items)) for chunk, pos, items in groups]
        return {name: self._column(name, tables, n) for name in names}

    @staticmethod
    def _column(name: str, tables: list[tuple[np.ndarray, Any]], n: int) -> Any:
        from torch.utils.data import default_collate

        from streamscope._core.optional import require

        pa = require("pyarrow", "batching LitData 0.2.76 Arrow rows", "arrow")

        cols = [(pos, t.column(name)) for pos, t in tables]
        typ = cols[0][1].type
        same = all(c.type == typ for _, c in cols) and not any(c.null_count for _, c in cols)
        if same and (pa.types.is_int64(typ) or pa.types.is_float64(typ) or pa.types.is_boolean(typ)):
            kind = "int" if pa.types.is_int64(typ) else "float" if pa.types.is_float64(typ) else "bool"
            dt = _NUMERIC[kind]
            raw = empty_batch_bytes(n, dt.itemsize)
            out = raw.numpy().view(dt).reshape(n)
            for pos, c in cols:
                out[pos] = c.to_numpy()
            return raw.view(_TORCH_NUMERIC[kind]).reshape(n)
        values: list[Any] = [None] * n
        for pos, c in cols:
            for p, v in zip(pos.tolist(), c.to_pylist()):
                values[p] = v
        if same and (
            pa.types.is_string(typ)
            or pa.types.is_large_string(typ)
            or pa.types.is_binary(typ)
            or pa.types.is_large_binary(typ)
        ):
            return values  # default_collate returns a list of str/bytes as it is
        return default_collate(values)
