"""LitData 0.2.76 Arrow-footer chunks, read in place.

For dict samples whose fields are all JSON-like (str, int, float, bool, bytes, None, lists, dicts), LitData 0.2.76
keeps the rows as an Arrow table at the end of the chunk::

    u32 N | u32 offsets[N+1] | item bytes | Arrow IPC file | u32 ipc_len | b"LDARW01\\0"

Usually the items are empty (every offset equals the header size, 4*(N+2)): the rows live only in the Arrow
IPC file, written in record batches of 256 rows (optionally with Arrow's own zstd body compression). When the
items are full the footer still wins: LitData returns the Arrow row whenever a chunk has a readable footer. A
sample is ``record_batch.to_pylist()[row]``: a dict whose keys follow the schema (the first-seen key order over
the chunk's rows), with None for a key a row lacks.

Worked example: ``{"id": "k0", "i": 0}`` and ``{"id": "k1", "i": 1}`` in one chunk make the 16-byte header
``02000000 10000000 10000000 10000000`` (N=2, three offsets all 16, no item bytes), then the IPC file (starting
``ARROW1``) of one record batch with schema ``id: string, i: int64``, then its length as u32 and ``LDARW01\\0``.

:class:`ArrowChunk` maps nothing itself: it reads a buffer (an ``mmap`` from :func:`open_chunk_file
<streamscope.format.chunk.open_chunk_file>`, or bytes) and hands it to pyarrow without a copy; one record batch is
materialised at a time. Reading needs pyarrow (``pip install "streamscope[arrow]"``).
"""

from __future__ import annotations

import struct
from collections import OrderedDict
from typing import Any

import numpy as np

from streamscope._core.errors import CorruptChunkError, FormatError
from streamscope._core.optional import require
from streamscope.format.header import parse_header

__all__ = ["ARROW_MAGIC", "FOOTER_ROWS", "ArrowChunk", "arrow_footer_start", "check_footer_magic", "require_arrow"]

ARROW_MAGIC = b"LDARW01\0"
FOOTER_ROWS = 256  # rows per record batch written by LitData 0.2.76
_IPC_FILE_MAGIC = b"ARROW1"
_BATCH_CACHE = 8
_WHOLE_BATCH = 8  # rows of one record batch asked for together from which the batch is decoded whole


def require_arrow(name: str) -> Any:
    """``pyarrow``, or a MissingDependencyError naming the chunk that needs it and the extra to install."""
    return require("pyarrow", f"chunk {name!r} keeps its samples in a LitData 0.2.76 Arrow footer; reading it", "arrow")


def check_footer_magic(tail: bytes, name: str) -> None:
    """Raise for a trailer that looks like a LitData footer magic this reader does not know (a newer version)."""
    if len(tail) == 8 and tail[:2] == b"LD" and tail[7:] == b"\0" and tail[2:7].isalnum() and tail != ARROW_MAGIC:
        what = "Arrow footer version" if tail[:5] == ARROW_MAGIC[:5] else "footer magic"
        raise FormatError(
            f"chunk {name!r} ends with the unknown {what} {tail!r} (this reader knows {ARROW_MAGIC!r} from LitData "
            "0.2.76); it was written by a newer LitData"
        )


def arrow_footer_start(buf: Any, name: str, size: int | None = None) -> tuple[int, int]:
    """``(ipc_start, ipc_len)`` of the footer of chunk bytes ``buf`` (which must end with :data:`ARROW_MAGIC`)."""
    size = len(buf) if size is None else size
    if size < 12 + 8:
        raise CorruptChunkError(f"chunk {name!r} is {size} bytes: too short for a header and an Arrow footer")
    (ipc_len,) = struct.unpack_from("<I", buf, size - 12)
    start = size - 12 - ipc_len
    if ipc_len == 0 or start < 8:
        raise CorruptChunkError(
            f"chunk {name!r}: Arrow footer length {ipc_len} (u32 at offset {size - 12}) does not fit a file of "
            f"{size} bytes"
        )
    return start, ipc_len


class ArrowChunk:
    """A chunk whose samples are the rows of its Arrow footer.

    Args:
        buf: the chunk's bytes (an ``mmap`` or any buffer); not copied.
        name: the chunk's path, for messages.
        expected_items: ``chunk_size`` from index.json; a different count raises.
        owner: an object to close with the chunk (the ``mmap``).

    Raises:
        CorruptChunkError: the header, the footer length or the IPC data is damaged (at construction, not later).
        FormatError: pyarrow is missing.
    """

    kind = "arrow"

    def __init__(self, buf: Any, name: str, expected_items: int | None = None, owner: Any = None) -> None:
        self.path = name
        self._owner = owner
        self._view: memoryview | None = memoryview(buf).cast("B")
        self._reader: Any = None
        self._batches: OrderedDict[int, Any] = OrderedDict()
        self._rows: tuple[int, list[Any]] | None = None
        self._last = -2
        try:
            pa = require_arrow(name)
            size = len(self._view)
            start, ipc_len = arrow_footer_start(self._view, name, size)
            offsets = parse_header(self._view, name, start, expected_items)
            if int(offsets[-1]) != start:
                raise CorruptChunkError(
                    f"chunk {name!r}: the Arrow footer length {ipc_len} (u32 at offset {size - 12}) puts the IPC "
                    f"data at offset {start}, but the items end at offset {int(offsets[-1])}"
                )
            self.num_items = len(offsets) - 1
            self.header_size = 4 * (self.num_items + 2)
            ipc = self._view[start : start + ipc_len]
            try:
                source = pa.py_buffer(ipc)
                if bytes(ipc[:6]) == _IPC_FILE_MAGIC:
                    self._reader = pa.ipc.open_file(source)
                    nb = self._reader.num_record_batches
                else:  # an IPC stream (footers of early 0.2.76 writers): read whole
                    table = pa.ipc.open_stream(source).read_all()
                    batches = table.to_batches()
                    self._batches = OrderedDict(enumerate(batches))
                    nb = len(batches)
                self.schema = self._reader.schema if self._reader is not None else table.schema
            except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, OSError, ValueError) as exc:
                raise CorruptChunkError(
                    f"chunk {name!r}: the Arrow IPC footer at offset {start} ({ipc_len} bytes) is unreadable: {exc}"
                ) from None
            self.names: list[str] = list(self.schema.names)
            self._nb = nb
            self._bounds: np.ndarray | None = None  # row starts per batch when batches are not 256 rows each
            if self._reader is None or nb != -(-self.num_items // FOOTER_ROWS):
                self._exact_bounds()
        except BaseException:
            self.close()
            raise

    # --- batches -----------------------------------------------------------------------------------

    def _load(self, b: int) -> Any:
        got = self._batches.get(b)
        if got is not None:
            self._batches.move_to_end(b)
            return got
        pa = require_arrow(self.path)
        try:
            got = self._reader.get_batch(b)
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, OSError, ValueError) as exc:
            raise CorruptChunkError(f"chunk {self.path!r}: Arrow record batch {b} is unreadable: {exc}") from None
        self._batches[b] = got
        while len(self._batches) > _BATCH_CACHE:
            self._batches.popitem(last=False)
        return got

    def _exact_bounds(self) -> None:
        """Row starts of every batch, reading each batch once (layouts other than 256 rows per batch)."""
        counts = [self._load(b).num_rows for b in range(self._nb)]
        self._bounds = np.concatenate([[0], np.cumsum(counts, dtype=np.int64)])
        if int(self._bounds[-1]) != self.num_items:
            raise CorruptChunkError(
                f"chunk {self.path!r}: the Arrow footer holds {int(self._bounds[-1])} rows but the header says "
                f"{self.num_items} items"
            )

    def _batch(self, b: int) -> Any:
        """Record batch ``b``, checked against the row range it must hold."""
        batch = self._load(b)
        if self._bounds is None:
            want = min(FOOTER_ROWS, self.num_items - b * FOOTER_ROWS)
            if batch.num_rows != want:  # not 256 rows per batch after all: locate rows exactly from now on
                self._exact_bounds()
                raise _Relocate
        return batch

    def locate(self, items: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(record batch, row in batch) of local items ``items``."""
        if self._bounds is None:
            return items // FOOTER_ROWS, items % FOOTER_ROWS
        b = np.searchsorted(self._bounds, items, side="right") - 1
        return b, items - self._bounds[b]

    def _locate1(self, i: int) -> tuple[int, int]:
        if self._bounds is None:
            return divmod(i, FOOTER_ROWS)
        b = int(np.searchsorted(self._bounds, i, side="right")) - 1
        return b, i - int(self._bounds[b])

    # --- samples -----------------------------------------------------------------------------------

    def sample(self, i: int, loader: Any = None) -> Any:
        """Sample ``i`` (local): the row as a dict, as LitData 0.2.76 returns it. ``loader`` is not used."""
        if not 0 <= i < self.num_items:
            raise IndexError(f"item {i} is outside chunk {self.path!r} of {self.num_items} items")
        if self._view is None:
            raise FormatError(f"chunk {self.path!r} is closed")
        b, j = self._locate1(i)
        rows = self._rows
        if rows is not None and rows[0] == b:
            self._last = i
            return rows[1][j]
        try:
            batch = self._batch(b)
        except _Relocate:
            return self.sample(i)
        sequential = i == self._last + 1 or j == 0
        self._last = i
        if sequential:  # reading in order: decode the whole batch once
            decoded = batch.to_pylist()
            self._rows = (b, decoded)
            return decoded[j]
        return batch.slice(j, 1).to_pylist()[0]  # random access: only this row

    def samples(self, items: np.ndarray, loader: Any = None) -> list[Any]:
        """Samples of local rows ``items`` (any order). A record batch that many of them hit is decoded whole,
        once; the others row by row."""
        items = np.asarray(items, dtype=np.int64)
        n = len(items)
        if not n:
            return []
        if int(items.min()) < 0 or int(items.max()) >= self.num_items:
            raise IndexError(f"items reach outside chunk {self.path!r} of {self.num_items} items")
        try:
            b, j = self.locate(items)
            out: list[Any] = [None] * n
            if int(b[0]) == int(b[-1]) and (b == b[0]).all():
                groups: list[tuple[int, list[int]]] = [(int(b[0]), list(range(n)))]
            else:
                order = np.argsort(b, kind="stable")
                sb = b[order]
                cuts = (np.flatnonzero(sb[1:] != sb[:-1]) + 1).tolist()
                groups = [(int(sb[s]), order[s:e].tolist()) for s, e in zip([0, *cuts], [*cuts, n])]
            rows_of = j.tolist()
            for bb, pos in groups:
                cached = self._rows
                if cached is not None and cached[0] == bb:
                    rows = cached[1]
                elif len(pos) >= _WHOLE_BATCH:
                    rows = self._batch(bb).to_pylist()
                    self._rows = (bb, rows)
                else:
                    batch = self._batch(bb)
                    for p in pos:
                        out[p] = batch.slice(rows_of[p], 1).to_pylist()[0]
                    continue
                for p in pos:
                    out[p] = rows[rows_of[p]]
            return out
        except _Relocate:
            return self.samples(items, loader)

    def take(self, items: np.ndarray) -> Any:
        """A pyarrow Table of local rows ``items``, in that order."""
        pa = require_arrow(self.path)
        items = np.asarray(items, dtype=np.int64)
        if len(items) and (int(items.min()) < 0 or int(items.max()) >= self.num_items):
            raise IndexError(f"items {items.tolist()} reach outside chunk {self.path!r} of {self.num_items} items")
        try:
            b, j = self.locate(items)
            uniq = np.unique(b)
            if len(uniq) == 1:
                return pa.Table.from_batches([self._batch(int(uniq[0])).take(pa.array(j))])
            order = np.argsort(b, kind="stable")
            sb, sj = b[order], j[order]
            cuts = np.flatnonzero(np.diff(sb)) + 1
            pieces = [
                self._batch(int(sb[s])).take(pa.array(sj[s:e]))
                for s, e in zip(np.concatenate([[0], cuts]).tolist(), np.concatenate([cuts, [len(sb)]]).tolist())
            ]
            table = pa.Table.from_batches(pieces)
            inverse = np.empty_like(order)
            inverse[order] = np.arange(len(order))
            return table.take(pa.array(inverse))
        except _Relocate:
            return self.take(items)

    def rows(self, items: np.ndarray) -> list[Any]:
        """Samples of local rows ``items`` (``take(items).to_pylist()``)."""
        return self.take(items).to_pylist()

    # --- lifetime ----------------------------------------------------------------------------------

    def close(self) -> None:
        """Drop the record batches and the IPC reader, then the buffer (and its mmap)."""
        self._batches = OrderedDict()
        self._rows = None
        self._reader = None
        view, self._view = self._view, None
        if view is not None:
            try:
                view.release()
            except BufferError:
                pass
        owner, self._owner = self._owner, None
        if owner is not None:
            try:
                owner.close()
            except BufferError:
                pass  # pyarrow buffers still point into the map; it is unmapped when they are freed

    def __enter__(self) -> ArrowChunk:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __len__(self) -> int:
        return self.num_items


class _Relocate(Exception):
    """Batches turned out not to hold 256 rows each; bounds are exact now, look the rows up again."""
