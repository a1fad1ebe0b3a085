"""The index of a Hugging Face Hub Parquet dataset (``hf://datasets/<owner>/<name>[@<revision>]/<path>``).

The Hub is read-only, so the ``index.json`` that :func:`~streamscope.engine.parquet.index_parquet_dataset` builds
over the repository's ``.parquet`` files (each file's footer read with two ranged GETs; every ``.parquet`` file
below the prefix, named by its path relative to it) is kept on local disk, where LitData 0.2.76 keeps it:
``<root>/hf-index/<md5(url)>/index.json``, ``root`` being the ``cache_dir`` given, else streamscope's cache
directory (knob ``cache_dir``). Once written it is reused (LitData's behaviour): remove the folder after the
repository's files change (or pin a commit: ``hf://datasets/owner/name@<sha>/...`` is another URL, so another
index).

``StreamingDataset("hf://datasets/...")`` reads the index in this order: an ``index.json`` in the repository
itself (a dataset ``optimize()`` wrote and someone uploaded), ``<cache_dir>/index.json`` (the layout of
``index_parquet_dataset(url, cache_dir)``), the folder above, else it indexes the files now; the rows are then
streamed with the ``ParquetLoader`` the index names, each file fetched through the chunk cache.
"""

from __future__ import annotations

import hashlib
import os
from typing import Any

from streamscope._core import config
from streamscope._core.errors import UnsupportedURLError
from streamscope.format.index import INDEX_FILENAME

__all__ = ["existing_hf_index", "hf_index_dir", "index_hf_dataset"]


def hf_index_dir(dataset_url: str, cache_dir: str | None = None) -> str:
    """The folder that holds the index of ``dataset_url``: ``<cache_dir or the cache_dir knob>/hf-index/<md5>``."""
    root = cache_dir if cache_dir is not None else str(config.get("cache_dir"))
    digest = hashlib.md5(dataset_url.rstrip("/").encode("utf-8"), usedforsecurity=False).hexdigest()
    return os.path.join(root, "hf-index", digest)


def existing_hf_index(dataset_url: str, cache_dir: str | None = None) -> str | None:
    """The folder of an index already on disk for ``dataset_url`` (``<cache_dir>/index.json`` first), else None."""
    for folder in ([cache_dir] if cache_dir is not None else []) + [hf_index_dir(dataset_url, cache_dir)]:
        if os.path.isfile(os.path.join(folder, INDEX_FILENAME)):
            return folder
    return None


def index_hf_dataset(
    dataset_url: str,
    cache_dir: str | None = None,
    storage_options: dict[str, Any] | None = None,
) -> str:
    """Index the ``.parquet`` files of a Hub dataset (LitData's ``index_hf_dataset``); the folder holding the index.

    Args:
        dataset_url: ``hf://datasets/<owner>/<name>[@<revision>][/<path>]``.
        cache_dir: the root of the index folder (see the module docstring); an ``index.json`` directly in it is
            reused as well.
        storage_options: ``token`` (else ``HF_TOKEN``), ``endpoint`` (else ``HF_ENDPOINT``).

    Raises:
        UnsupportedURLError: ``dataset_url`` is not an ``hf://`` URL (a ValueError, as LitData's).
        IndexNotFoundError: no ``.parquet`` file under the URL.
        ObjectNotFoundError: no such repository or revision (the message names the URL, never the token).
    """
    if not isinstance(dataset_url, str) or not dataset_url.startswith("hf://"):
        raise UnsupportedURLError(
            f"Invalid Hugging Face dataset URL: {dataset_url!r}; it must start with 'hf://' (hf://datasets/owner/name)"
        )
    found = existing_hf_index(dataset_url, cache_dir)
    if found is not None:
        return found
    from streamscope.engine.parquet import index_parquet_dataset

    out = hf_index_dir(dataset_url, cache_dir)
    index_parquet_dataset(dataset_url, out, storage_options)
    return out
