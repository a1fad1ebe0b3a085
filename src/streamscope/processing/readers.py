"""Input readers for optimize()/map(): ``reader.read(item)`` turns a work item into what ``fn`` receives.

Before the inputs are split between workers, ``reader.remap_items(inputs, num_workers)`` may replace them by
work items better suited to distribution (e.g. :class:`ParquetReader` cuts large parquet files into shards of
at most ``num_rows`` rows). Both run in the documented order: ``remap_items`` once in the main process, then
``read`` in the worker that processes the item.
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from typing import Any

from streamscope._core.errors import OptimizeInputError
from streamscope._core.optional import require
from streamscope.events import kinds


class BaseReader(ABC):
    """Interface of an optimize()/map() input reader (LitData's ``BaseReader``)."""

    def get_num_nodes(self) -> int:
        """Number of machines in the job (always 1 here unless the environment says otherwise)."""
        return int(os.getenv("DATA_OPTIMIZER_NUM_NODES", "1"))

    def get_node_rank(self) -> int:
        """Rank of this machine in the job."""
        return int(os.getenv("DATA_OPTIMIZER_NODE_RANK", "0"))

    @abstractmethod
    def remap_items(self, items: Any, num_workers: int) -> list[Any]:
        """Return the work items to distribute in place of the user's ``items``."""

    @abstractmethod
    def read(self, item: Any) -> Any:
        """Return what ``fn`` receives for one work item."""


class ParquetReader(BaseReader):
    """Reads parquet files; ``remap_items`` reshards files with more than ``num_rows`` rows.

    Shards are written once to ``{cache_folder}/{num_rows}/{start}_{end}_{basename}`` (rows ``[start, end)``)
    and reused by later runs. ``read(path)`` returns a ``pyarrow.parquet.ParquetFile`` (the previous one this
    reader opened is closed first), or, with ``columns`` or ``filters`` (LitData 0.2.76), a ``pyarrow.Table`` of
    those columns and of the rows the filters keep.

    Args:
        cache_folder: Where the shards are written.
        num_rows: Maximum number of rows per shard.
        to_pandas: Kept for LitData compatibility: ``read`` returns a ParquetFile, as LitData 0.2.68 and the
            README of 0.2.76 say (0.2.76's code returns a pandas DataFrame by default; pandas is not a dependency).
        columns: read only these columns (``read`` returns a Table).
        filters: ``pyarrow.parquet`` filters (a list of tuples or an expression) on the rows (``read`` returns a
            Table).
    """

    def __init__(
        self,
        cache_folder: str,
        num_rows: int = 65536,
        to_pandas: bool = True,
        columns: list[str] | None = None,
        filters: Any | None = None,
    ) -> None:
        require("pyarrow.parquet", "ParquetReader", "parquet")
        if not isinstance(num_rows, int) or num_rows <= 0:
            raise OptimizeInputError(f"ParquetReader num_rows must be a positive int, got {num_rows!r}")
        self.cache_folder = cache_folder
        self.num_rows = num_rows
        self.to_pandas = to_pandas
        self.columns = columns
        self.filters = filters
        self.parquet_file: Any = None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["parquet_file"] = None  # an open file does not travel to a worker process
        return state

    def read(self, filepath: str) -> Any:
        """Open ``filepath`` as a ``pyarrow.parquet.ParquetFile`` (a ``pyarrow.Table`` with columns/filters)."""
        import pyarrow.parquet as pq

        if self.parquet_file is not None:
            self.parquet_file.close()
            self.parquet_file = None
        if self.columns is not None or self.filters is not None:
            return pq.read_table(filepath, columns=self.columns, filters=self.filters, memory_map=True)
        self.parquet_file = pq.ParquetFile(filepath, memory_map=True)
        return self.parquet_file

    def remap_items(self, filepaths: list[str], num_workers: int) -> list[str]:
        """One shard path per ``num_rows`` rows of each file, in input order (files are read lazily)."""
        import pyarrow.parquet as pq

        folder = os.path.join(self.cache_folder, str(self.num_rows))
        os.makedirs(folder, exist_ok=True)
        out: list[str] = []
        for path in filepaths:
            if not os.path.isfile(path):
                raise OptimizeInputError(f"ParquetReader input {path!r} is not a local parquet file")
            total = pq.ParquetFile(path).metadata.num_rows
            table = None
            base = os.path.basename(path)
            for start in range(0, total, self.num_rows):
                end = min(start + self.num_rows, total)
                shard = os.path.join(folder, f"{start}_{end}_{base}")
                out.append(shard)
                if os.path.exists(shard):
                    continue
                if table is None:
                    table = pq.read_table(path, memory_map=True)
                tmp = f"{shard}.tmp-{os.getpid()}"
                with kinds.reshard(file=path, start=start, end=end):
                    pq.write_table(table.slice(start, end - start), tmp)
                os.replace(tmp, shard)  # a shard that exists is complete
        return out


__all__ = ["BaseReader", "ParquetReader"]
