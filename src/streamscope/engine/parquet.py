"""Parquet datasets on the read path: indexing a folder of ``.parquet`` files and opening them as chunks.

``index_parquet_dataset(url)`` writes the ``index.json`` described in :mod:`streamscope.format.parquet` over
the top-level ``.parquet`` files of a local folder or an object-store prefix (only each file's footer is
fetched); under an ``hf://datasets/...`` prefix every ``.parquet`` file below it counts, as in LitData, and the
index goes to a local folder (:mod:`streamscope.engine.hf_index`: the Hub is read-only). ``StreamingDataset(url, item_loader=ParquetLoader())`` then streams rows as dicts; remote files go
through the chunk cache like any chunk (their ``chunk_bytes`` is the file size).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from streamscope._core.errors import IndexNotFoundError, SchemaMismatchError
from streamscope.engine.reader import ChunkReader, OpenChunk
from streamscope.events import kinds
from streamscope.format.index import INDEX_FILENAME, dumps_index
from streamscope.format.parquet import (
    ParquetChunk,
    ParquetLoader,
    parquet_chunk_entry,
    parquet_config,
    parquet_footer_range,
    parquet_info_from_footer,
    require_pyarrow,
)

__all__ = ["ParquetChunkReader", "build_parquet_index", "index_parquet_dataset", "is_hf"]


def is_hf(url: object) -> bool:
    """True for ``hf://`` (Hugging Face Hub) URLs."""
    return isinstance(url, str) and url.startswith("hf://")


def _is_remote(url: str) -> bool:
    return "://" in url and not url.startswith("file://")


def _local_path(url: str) -> str:
    for prefix in ("local:", "file://"):
        if url.startswith(prefix):
            return url[len(prefix) :]
    return url


def _list_parquet(url: str, storage_options: dict[str, Any] | None) -> tuple[Any, list[tuple[str, int]]]:
    """The store and ``(name, size)`` of every top-level ``.parquet`` file under ``url``, sorted by name (under an
    ``hf://`` prefix every ``.parquet`` file below it, named by its path relative to the prefix, as LitData's Hub
    indexer lists them)."""
    from streamscope.storage import open_store

    if not _is_remote(url):
        path = _local_path(url)
        if not os.path.isdir(path):
            raise IndexNotFoundError(f"no Parquet folder at {path!r}: the directory does not exist")
        files = sorted(
            (e.name, e.stat().st_size) for e in os.scandir(path) if e.is_file() and e.name.endswith(".parquet")
        )
        return open_store(path, storage_options), files
    store = open_store(url, storage_options)
    nested = is_hf(url)
    files = sorted(
        (m.key, m.size) for m in store.list("") if (nested or "/" not in m.key) and m.key.endswith(".parquet")
    )
    return store, files


def _file_info(store: Any, name: str, size: int) -> tuple[int, list[str]]:
    """``(num_rows, column types)`` of one Parquet file, reading only its footer."""
    local = store.local_path(name)
    where = local or f"{store.url.rstrip('/')}/{name}"
    with kinds.read_footer(file=name, bytes=size):
        if local is not None:
            with open(local, "rb") as f:
                f.seek(max(size - 8, 0))
                tail = f.read(8)
                start, end = parquet_footer_range(size, tail, where)
                f.seek(start)
                footer = f.read(end - start)
        else:
            tail = store.get_range(name, max(size - 8, 0), size) if size >= 8 else b""
            start, end = parquet_footer_range(size, tail, where)
            footer = store.get_range(name, start, end)
    return parquet_info_from_footer(footer, where)


def _is_local_rank_zero() -> bool:
    try:
        return int(os.environ.get("LOCAL_RANK", "0")) == 0
    except ValueError:
        return True


def _barrier() -> None:
    try:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            dist.barrier()
    except ImportError:  # pragma: no cover - torch is a dependency
        pass


def _global_rank() -> int:
    try:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            return int(dist.get_rank())
    except ImportError:  # pragma: no cover
        pass
    try:
        return int(os.environ.get("RANK", os.environ.get("GLOBAL_RANK", "0")))
    except ValueError:
        return 0


def build_parquet_index(
    pq_dir_url: str, storage_options: dict[str, Any] | None = None, num_workers: int = 4
) -> dict[str, Any]:
    """The index (``{"chunks", "config"}``) of the top-level ``.parquet`` files under ``pq_dir_url``.

    Raises:
        IndexNotFoundError: the folder does not exist or holds no ``.parquet`` file.
        SchemaMismatchError: two files have different column types.
    """
    require_pyarrow()
    store, files = _list_parquet(pq_dir_url, storage_options)
    if not files:
        raise IndexNotFoundError(
            f"no .parquet files at {pq_dir_url!r}"
            + ("" if is_hf(pq_dir_url) else " (only top-level files are indexed; point at the folder holding them)")
        )
    workers = max(1, min(int(num_workers or 1), len(files)))
    if workers == 1:
        infos = [_file_info(store, n, s) for n, s in files]
    else:
        with ThreadPoolExecutor(max_workers=workers) as pool:
            infos = list(pool.map(lambda f: _file_info(store, f[0], f[1]), files))
    data_format: list[str] | None = None
    first = ""
    chunks = []
    for (name, size), (rows, types) in zip(files, infos):
        if data_format is None:
            data_format, first = types, name
        elif types != data_format:
            raise SchemaMismatchError(
                f"Parquet file {name!r} has column types {types} but {first!r} has {data_format} "
                f"(all files of a dataset must share one schema)"
            )
        chunks.append(parquet_chunk_entry(name, size, rows))
    return {"chunks": chunks, "config": parquet_config(data_format or [])}


def index_parquet_dataset(
    pq_dir_url: str,
    cache_dir: str | None = None,
    storage_options: dict | None = None,
    num_workers: int = 4,
) -> None:
    """Write ``index.json`` over the ``.parquet`` files of a folder so ``StreamingDataset`` can stream them.

    Local folders get ``<folder>/index.json`` (or ``<cache_dir>/index.json`` when ``cache_dir`` is given: pass it
    as ``index_path``); object-store prefixes get ``<url>/index.json`` (written by global rank 0). An
    ``hf://datasets/...`` prefix (read-only) gets ``<cache_dir>/index.json``, or without ``cache_dir`` the folder
    ``StreamingDataset(url)`` looks in (:func:`streamscope.engine.hf_index.hf_index_dir`). In a distributed job
    only local rank 0 indexes, then every process waits at a barrier.

    Args:
        pq_dir_url: local folder, ``s3://``/``gs://``/... or ``hf://datasets/...`` prefix holding the files.
        cache_dir: local folder for the index instead of the dataset folder (local and ``hf://`` datasets).
        storage_options: object-store options (endpoint, credentials; ``token`` for ``hf://``).
        num_workers: threads that read file footers.
    """
    if is_hf(pq_dir_url):
        from streamscope.engine.hf_index import hf_index_dir

        out = cache_dir if cache_dir is not None else hf_index_dir(pq_dir_url)
        if _is_local_rank_zero():
            _write_index(build_parquet_index(pq_dir_url, storage_options, num_workers), out)
        _barrier()
        return
    if _is_local_rank_zero():
        index = build_parquet_index(pq_dir_url, storage_options, num_workers)
        import time

        text = dumps_index(index["chunks"], index["config"], str(time.time()))
        if _is_remote(pq_dir_url):
            if _global_rank() == 0:
                from streamscope.storage import open_store

                open_store(pq_dir_url, storage_options).put(INDEX_FILENAME, text.encode("utf-8"))
        else:
            _write_text(text, cache_dir if cache_dir is not None else _local_path(pq_dir_url))
    _barrier()


def _write_index(index: dict[str, Any], out_dir: str) -> str:
    """Write ``index`` as ``out_dir/index.json`` (atomically); its path."""
    import time

    return _write_text(dumps_index(index["chunks"], index["config"], str(time.time())), out_dir)


def _write_text(text: str, out_dir: str) -> str:
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, INDEX_FILENAME)
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)
    return path


class ParquetChunkReader(ChunkReader):
    """A :class:`ChunkReader` whose chunks are Parquet files (opened with pyarrow, not mmapped item tables)."""

    def __init__(
        self,
        chunks: Sequence[dict[str, Any]],
        local_dir: str | None,
        cache: Any,
        depth: Any,
        loader: ParquetLoader,
        knobs: Any = None,
    ) -> None:
        super().__init__(chunks, local_dir, cache, depth, knobs)
        self._loader = loader

    def _open_file(self, chunk: int, path: str, num_items: int) -> OpenChunk:
        """The opened Parquet file of ``chunk`` (the reader fetches, leases and evicts as for any chunk)."""
        pc: ParquetChunk = self._loader.open_chunk(path, num_items, chunk)
        return OpenChunk(chunk, pc, None)  # type: ignore[arg-type]
