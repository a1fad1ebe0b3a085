"""Parquet files as chunks: LitData's ``ParquetLoader`` and the index of a folder of ``.parquet`` files.

A Parquet dataset is a folder of ordinary ``.parquet`` files plus an ``index.json`` in which every file is one
chunk. The index is what ``index_parquet_dataset`` writes (and what LitData writes, so either engine reads the
other's)::

    {"chunks": [{"chunk_bytes": 1834, "chunk_size": 100, "dim": null, "filename": "part-0.parquet"}, ...],
     "config": {"chunk_bytes": null, "chunk_size": null, "compression": null,
                "data_format": ["int64", "large_string"], "data_spec": null, "encryption": null,
                "item_loader": "ParquetLoader"},
     "updated_at": "1715000000.123"}

``chunk_bytes`` is the file's size, ``chunk_size`` its row count, ``data_format`` the Arrow type of each column
(``str(field.type)``); every file must have the same column types. A sample is one row as a dict
``{column: python value}`` (what LitData's polars ``row(i, named=True)`` gives: str, int, float, bool, bytes,
None, lists, dicts for structs, ``datetime`` for timestamps).

This module reads with pyarrow only (polars is not needed). It is bytes <-> samples: files are opened by path
or file object; listing and fetching belong to the storage layer.
"""

from __future__ import annotations

import io
from collections import OrderedDict
from typing import Any

from streamscope._core import config as cfg
from streamscope._core.errors import CorruptChunkError, FormatError
from streamscope._core.optional import require
from streamscope.events import kinds
from streamscope.format.loader_base import BaseItemLoader
from streamscope.format.serializers import Serializer

__all__ = [
    "PARQUET_MAGIC",
    "ParquetChunk",
    "ParquetLoader",
    "parquet_chunk_entry",
    "parquet_config",
    "parquet_footer_range",
    "parquet_info_from_footer",
    "require_pyarrow",
]

PARQUET_MAGIC = b"PAR1"


def require_pyarrow(feature: str = "Parquet datasets", extra: str = "parquet") -> Any:
    """``pyarrow.parquet``, or a :class:`MissingDependencyError` naming ``feature`` and the extra to install."""
    return require("pyarrow.parquet", feature, extra)


def parquet_config(data_format: list[str]) -> dict[str, Any]:
    """The index.json ``config`` of a Parquet dataset whose columns have Arrow types ``data_format`` (with the
    ``types: null`` LitData 0.2.76 adds when the ``write_format`` knob is "0.2.76")."""
    config: dict[str, Any] = {
        "chunk_bytes": None,
        "chunk_size": None,
        "compression": None,
        "data_format": list(data_format),
        "data_spec": None,
        "encryption": None,
        "item_loader": ParquetLoader.name,
    }
    if cfg.parse_write_format(cfg.get("write_format")) == "0.2.76":
        config["types"] = None
    return config


def parquet_chunk_entry(filename: str, file_size: int, num_rows: int) -> dict[str, Any]:
    """One index.json chunk entry for a Parquet file (keys as LitData writes them)."""
    return {"chunk_bytes": int(file_size), "chunk_size": int(num_rows), "dim": None, "filename": filename}


def parquet_footer_range(file_size: int, tail: bytes, name: str) -> tuple[int, int]:
    """Byte range ``[start, end)`` of a Parquet file's footer, from its last 8 bytes ``tail``.

    Raises:
        CorruptChunkError: the file is too short or does not end with the ``PAR1`` magic.
    """
    if file_size < 12 or len(tail) != 8 or tail[4:] != PARQUET_MAGIC:
        raise CorruptChunkError(
            f"{name!r} is not a Parquet file: {file_size} bytes, it does not end with {PARQUET_MAGIC!r} "
            f"(offset {max(file_size - 4, 0)})"
        )
    footer_len = int.from_bytes(tail[:4], "little")
    start = file_size - 8 - footer_len
    if start < 4:
        raise CorruptChunkError(
            f"{name!r}: Parquet footer of {footer_len} bytes does not fit a {file_size}-byte file (offset {file_size - 8})"
        )
    return start, file_size


def parquet_info_from_footer(footer: bytes, name: str) -> tuple[int, list[str]]:
    """``(num_rows, column Arrow types)`` from the footer bytes (metadata + length + magic) of a Parquet file."""
    pq = require_pyarrow()
    try:
        pf = pq.ParquetFile(io.BytesIO(footer))
        return int(pf.metadata.num_rows), [str(f.type) for f in pf.schema_arrow]
    except Exception as exc:  # noqa: BLE001 (pyarrow raises several kinds on bad metadata)
        raise CorruptChunkError(f"{name!r}: unreadable Parquet footer: {type(exc).__name__}: {exc}") from None


class ParquetChunk:
    """One Parquet file opened for row reads (the Parquet counterpart of :class:`~.chunk.ChunkFile`).

    Args:
        source: a local path or a binary file object.
        expected_rows: ``chunk_size`` from index.json; a different row count raises.
        low_memory: keep only the row groups in use decoded (True), or the whole file (False).
        chunk_index: the chunk's position in the index (trace fields).
        columns: read only these columns (None: all).
    """

    def __init__(
        self,
        source: str | Any,
        expected_rows: int | None = None,
        low_memory: bool = True,
        chunk_index: int = -1,
        columns: list[str] | None = None,
    ) -> None:
        pq = require_pyarrow()
        self.path = source if isinstance(source, str) else getattr(source, "name", "<parquet stream>")
        self.low_memory = low_memory
        self.chunk_index = chunk_index
        try:
            self._pf = pq.ParquetFile(source)
        except Exception as exc:  # noqa: BLE001
            raise CorruptChunkError(
                f"{self.path!r} is not a readable Parquet file: {type(exc).__name__}: {exc}"
            ) from None
        self.columns = list(columns) if columns else None
        if self.columns:
            names = self._pf.schema_arrow.names
            missing = [c for c in self.columns if c not in names]
            if missing:
                raise FormatError(f"Parquet chunk {self.path!r} has no column {missing}; its columns: {names}")
        md = self._pf.metadata
        self.num_items = int(md.num_rows)
        if expected_rows is not None and self.num_items != int(expected_rows):
            raise CorruptChunkError(
                f"Parquet chunk {self.path!r} has {self.num_items} rows but index.json says chunk_size={expected_rows}"
            )
        starts = [0]
        for g in range(md.num_row_groups):
            starts.append(starts[-1] + int(md.row_group(g).num_rows))
        self._starts = starts
        self._groups: OrderedDict[int, list[dict[str, Any]]] = OrderedDict()
        self._keep = 2 if low_memory else max(1, md.num_row_groups)

    def _group_of(self, row: int) -> int:
        import bisect

        return bisect.bisect_right(self._starts, row) - 1

    def _rows_of_group(self, g: int) -> list[dict[str, Any]]:
        cached = self._groups.get(g)
        if cached is not None:
            self._groups.move_to_end(g)
            return cached
        with kinds.read_row_group(chunk=self.chunk_index, row_group=g) as f:
            try:
                table = self._pf.read_row_group(g, columns=self.columns)
            except Exception as exc:  # noqa: BLE001
                raise CorruptChunkError(
                    f"Parquet chunk {self.path!r}: row group {g} cannot be read: {type(exc).__name__}: {exc}"
                ) from None
            rows: list[dict[str, Any]] = table.to_pylist()
            f["rows"] = len(rows)
        self._groups[g] = rows
        while len(self._groups) > self._keep:
            self._groups.popitem(last=False)
        return rows

    def row(self, i: int) -> dict[str, Any]:
        """Row ``i`` (local to this file) as ``{column: value}``.

        Raises:
            FormatError: ``i`` is outside the file.
        """
        if not 0 <= i < self.num_items:
            raise FormatError(f"row {i} is outside Parquet chunk {self.path!r} ({self.num_items} rows)")
        g = self._group_of(i)
        return self._rows_of_group(g)[i - self._starts[g]]

    def rows(self, indices: Any) -> list[dict[str, Any]]:
        """Rows ``indices`` (local), in that order."""
        return [self.row(int(i)) for i in indices]

    def close(self) -> None:
        """Drop decoded rows and the file handle."""
        self._groups.clear()
        pf = getattr(self, "_pf", None)
        if pf is not None:
            try:
                pf.close()
            except Exception:  # noqa: BLE001 (closing is best effort)
                pass
            self._pf = None


class ParquetLoader(BaseItemLoader):
    """LitData's ``ParquetLoader``: every chunk is a ``.parquet`` file, every sample one row as a dict.

    Args:
        pre_load_chunk: accepted for compatibility (row groups are decoded on first use).
        low_memory: decode one row group at a time (default) instead of the whole file.
        columns: read only these columns (LitData 0.2.76); each row is a dict of them. None: all columns.
    """

    name = "ParquetLoader"
    _PICKLED = ("_pre_load_chunk", "_low_memory", "_columns")

    def __init__(self, pre_load_chunk: bool = False, low_memory: bool = True, columns: list[str] | None = None) -> None:
        super().__init__()
        self._pre_load_chunk = bool(pre_load_chunk)
        self._low_memory = bool(low_memory)
        self._columns = list(columns) if columns else None

    @property
    def low_memory(self) -> bool:
        """Whether only the row groups in use are kept decoded."""
        return self._low_memory

    def setup(
        self,
        config: dict[str, Any],
        serializers: dict[str, Serializer] | None = None,
        chunks: list[dict[str, Any]] | None = None,
    ) -> None:
        """Check the index was written for Parquet files (``data_format`` holds Arrow types, not serializers)."""
        loader_name = config.get("item_loader")
        if loader_name != self.name:
            raise FormatError(
                f"the dataset was written with item_loader {loader_name!r} but is read with {self.name!r}"
            )
        require_pyarrow()
        self._config = config
        self._chunks = chunks
        self._user_serializers = serializers
        self._data_format = list(config.get("data_format") or [])

    def open_chunk(self, source: str | Any, expected_rows: int | None = None, chunk_index: int = -1) -> ParquetChunk:
        """Open one Parquet chunk for row reads."""
        return ParquetChunk(source, expected_rows, self._low_memory, chunk_index, getattr(self, "_columns", None))

    def read_row(self, chunk: ParquetChunk, row: int) -> dict[str, Any]:
        """Row ``row`` of ``chunk`` as a dict."""
        return chunk.row(row)

    def decode_many(self, chunk: Any, indices: Any) -> list[Any]:
        """Rows ``indices`` of ``chunk``."""
        rows: list[Any] = chunk.rows(indices)  # chunk: the ParquetChunk of open_chunk
        return rows

    def decode(self, view: memoryview) -> Any:
        """Parquet rows are not item bytes: read them with :meth:`read_row`."""
        raise FormatError("ParquetLoader reads rows from Parquet files (read_row), not item bytes")

    @property
    def batch_layout(self) -> str | None:
        """None: rows are read one by one."""
        return None

    def read_sample(self, file: Any, item: int, chunk: dict[str, Any]) -> Any:
        """Row ``item`` of the open Parquet chunk, as a dict."""
        return file.row(item)

    def read_samples(self, file: Any, items: Any) -> list[Any] | None:
        """None: rows are read one by one."""
        return None
