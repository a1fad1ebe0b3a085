"""Writing LitData 0.2.76's Arrow footer: JSON-like dict samples stored as the rows of an Arrow table.

A chunk whose samples are all dicts of JSON-like values ends with::

    <Arrow IPC file> | u32 ipc_len | b"LDARW01\\0"

The IPC file holds one row per sample (columns = the union of the samples' keys in first-seen order, a key a
sample lacks is null), written in record batches of 256 rows, with Arrow's own IPC buffer compression when the
dataset asked for compression (``config.ipc_compression``). When the footer holds every sample the item bytes
are left out: the chunk is the classic header with every offset equal to the header size, then the footer
(LitData 0.2.76's "slim" chunk; :func:`slim_chunk`).

Needs pyarrow: without it (or when Arrow cannot build the table, e.g. a column mixing ints and strings)
:func:`arrow_footer` returns None and the writer keeps the classic item bytes, as LitData does.
"""

from __future__ import annotations

import struct
from typing import Any

from streamscope._core.optional import available

__all__ = ["ARROW_MAGIC", "BATCH_ROWS", "arrow_footer", "slim_chunk"]

ARROW_MAGIC = b"LDARW01\0"
#: rows per IPC record batch (readers decode one batch at a time)
BATCH_ROWS = 256


def _plain(value: Any) -> Any:
    if type(value).__name__ == "JsonLeaf" and hasattr(value, "value"):
        return _plain(value.value)
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def arrow_footer(samples: list[Any], ipc_compression: str | None = None) -> bytes | None:
    """``<IPC file> | u32 len | LDARW01\\0`` for dict ``samples``, or None when they cannot be Arrow rows."""
    if not samples or any(not isinstance(s, dict) for s in samples):
        return None
    if not available("pyarrow"):  # the "arrow" extra; without it the chunk keeps its item bytes, as LitData's does
        return None
    import pyarrow as pa  # noqa: PLC0415

    rows = [_plain(s) for s in samples]
    keys: dict[str, None] = {}
    for row in rows:
        keys.update(dict.fromkeys(row))
    try:
        table = pa.Table.from_pylist([{k: row.get(k) for k in keys} for row in rows])
    except (TypeError, ValueError, pa.ArrowInvalid, pa.ArrowTypeError):
        return None
    options = None
    if ipc_compression:
        try:
            options = pa.ipc.IpcWriteOptions(compression=ipc_compression)
        except (TypeError, ValueError, pa.ArrowInvalid, pa.ArrowNotImplementedError):
            options = None
    sink = pa.BufferOutputStream()
    kwargs: dict[str, Any] = {} if options is None else {"options": options}
    with pa.ipc.new_file(sink, table.schema, **kwargs) as writer:
        for start in range(0, table.num_rows, BATCH_ROWS):
            writer.write_table(table.slice(start, min(BATCH_ROWS, table.num_rows - start)))
    ipc = sink.getvalue().to_pybytes()
    return ipc + struct.pack("<I", len(ipc)) + ARROW_MAGIC


def slim_chunk(n: int, footer: bytes) -> bytes:
    """A chunk of ``n`` samples held only by ``footer``: ``u32 n``, ``n + 1`` offsets all equal to the header
    size (every item empty), then the footer."""
    head = 4 * (n + 2)
    return struct.pack(f"<I{n + 1}I", n, *([head] * (n + 1))) + footer
