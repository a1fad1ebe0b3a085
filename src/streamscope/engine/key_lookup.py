"""Keyed access to optimized datasets: ``build_keys_index`` writes the keys sidecar (``engine/key_shards.py`` reads
it).

The sidecar format is in :mod:`streamscope.format.keys_store`. ``build_keys_index(input_dir, key_fn)`` reads every
sample of a local dataset in chunk order, calls ``key_fn(sample)`` and writes ``keys/shard-*.parquet`` (with the
chunk columns already filled in). ``StreamingDataset.get_by_key(key)`` (and ``ds["some-key"]``) then finds the
sample through the sidecar: for a local dataset the shard files are read in place; for a remote one only the
Parquet footer and the row groups that may hold the key are fetched with range reads.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from streamscope._core.errors import IndexNotFoundError, KeyIndexExistsError
from streamscope.engine.dataset import StreamingDataset
from streamscope.engine.dataset_index import input_path
from streamscope.engine.key_shards import has_keys_index
from streamscope.events import kinds
from streamscope.format.index import INDEX_FILENAME, load_index
from streamscope.format.keys_store import KEYS_FEATURE, normalize_key, write_keys_store
from streamscope.format.parquet import require_pyarrow

__all__ = ["build_keys_index"]


def build_keys_index(
    input_dir: Any,
    key_fn: Callable[[Any], Any],
    *,
    output_dir: str | None = None,
    overwrite: bool = False,
    verbose: bool = True,
    num_shards: int = 1,
) -> str:
    """Scan a local optimized dataset with ``key_fn`` and write ``keys/shard-*.parquet``; returns the keys dir.

    Samples are read in chunk order; sample ``i`` of that order gets ``key_fn(sample)`` (str or int, unique).

    Args:
        input_dir: local dataset folder (str or ``Dir``).
        key_fn: sample -> key.
        output_dir: where to write ``keys/`` (default: the dataset folder, whose index.json gains ``keys``).
        overwrite: replace an existing sidecar.
        verbose: show a progress bar.
        num_shards: number of hash shards.

    Raises:
        IndexNotFoundError: ``input_dir`` is not a local dataset folder.
        KeyIndexExistsError: a sidecar exists and ``overwrite`` is False.
        DuplicateKeyError: two samples get the same key.
    """
    path = input_path(input_dir)
    for prefix in ("local:", "file://"):
        if path.startswith(prefix):
            path = path[len(prefix) :]
    if "://" in path or not os.path.isdir(path):
        raise IndexNotFoundError(f"build_keys_index needs a local dataset folder, got {path!r}")
    require_pyarrow(KEYS_FEATURE, "keys")  # before reading every sample
    if not os.path.isfile(os.path.join(path, INDEX_FILENAME)):
        raise IndexNotFoundError(f"no {INDEX_FILENAME} in {path!r}: did you run optimize()?")
    dataset_dir = output_dir or path
    if has_keys_index(dataset_dir) and not overwrite:
        raise KeyIndexExistsError(
            f"a keys index already exists under {dataset_dir!r}; pass overwrite=True to replace it"
        )

    index = load_index(os.path.join(path, INDEX_FILENAME))
    loader = None
    if index["config"].get("item_loader") == "ParquetLoader":
        from streamscope.format.parquet import ParquetLoader

        loader = ParquetLoader()
    ds = StreamingDataset(path, item_loader=loader)
    reader = ds.chunk_reader()
    keys: list[str | int] = []
    chunk_indices: list[int] = []
    total = sum(int(s) for s in ds.chunk_sizes)
    bar = None
    if verbose:
        from tqdm.auto import tqdm

        bar = tqdm(total=total, desc="Building keys index", unit="sample")
    try:
        with kinds.build_keys_index(chunks=len(ds.chunks), items=total):
            for c, size in enumerate(ds.chunk_sizes):
                oc = reader.open(c)
                for i in range(int(size)):
                    keys.append(normalize_key(key_fn(ds.decode_item(oc, i))))
                    chunk_indices.append(c)
                reader.finished_with(c)
                if bar is not None:
                    bar.update(int(size))
    finally:
        reader.close()
        if bar is not None:
            bar.close()
    indices = list(range(len(keys)))
    return write_keys_store(dataset_dir, keys, indices, chunk_indices, indices, num_shards=num_shards)
