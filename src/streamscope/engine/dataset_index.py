"""Where a StreamingDataset's data lives, and its index.

The input forms LitData accepts (a path, a URL, a ``Dir``, ``local:/dir``, ``dir/pattern.parquet``) become one
path or URL; the index is read from ``index_path``, a local folder (finished first when LitData 0.2.76 would
finish it: per-writer index files merged, a folder of Parquet files indexed) or a remote prefix (copied into the
dataset's cache directory, where the chunks go too).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any

from streamscope._core.errors import DatasetError, IndexNotFoundError, ObjectNotFoundError
from streamscope.cache.chunk_cache import dataset_cache_dir

__all__ = ["KeyLayout", "filter_parquet_chunks", "input_path", "is_remote", "read_index", "split_parquet_input"]

#: The chunk sizes of the whole index and the positions of the chunks a ``.parquet`` pattern keeps: the keys/
#: sidecar addresses the whole index, keyed access maps back through this.
KeyLayout = tuple[list[int], list[int]]


def is_remote(path: str) -> bool:
    """True when chunks are fetched through a store into the cache: object-store URLs, and ``local:`` folders
    (LitData's "a local folder read as remote storage"); plain paths and ``file://`` are read in place."""
    return path.startswith("local:") or ("://" in path and not path.startswith("file://"))


def input_path(input_dir: Any) -> str:
    """A path or URL from a str, a ``Dir``-like object (``.url`` wins over ``.path``) or an os.PathLike.

    A ``local:`` URL is made absolute (``local:/abs/dir``): it names the cache directory, and a DataLoader
    worker started elsewhere must name the same one.
    """
    if isinstance(input_dir, (str, os.PathLike)):
        text = os.fspath(input_dir)
    elif getattr(input_dir, "url", None):
        text = str(input_dir.url)
    elif getattr(input_dir, "path", None):
        text = str(input_dir.path)
    else:
        raise DatasetError(f"input_dir must be a path, a URL or a Dir, got {input_dir!r}")
    if text.startswith("local:") and len(text) > len("local:"):
        text = "local:" + os.path.abspath(os.path.expanduser(text[len("local:") :]))
    return text


def split_parquet_input(input_dir: str) -> tuple[str, str | None]:
    """``dir/pattern.parquet`` input: ``(dir, pattern)``; any other input: ``(input_dir, None)``."""
    if input_dir.endswith(".parquet"):
        head, pattern = input_dir.rstrip("/").rsplit("/", 1) if "/" in input_dir else ("", "")
        if not pattern:
            raise DatasetError(f"input_dir {input_dir!r} ends with .parquet but names no folder")
        return head or ".", pattern
    return input_dir, None


def filter_parquet_chunks(
    chunks: list[dict[str, Any]], pattern: str | None, input_dir: str
) -> tuple[list[dict[str, Any]], KeyLayout | None]:
    """The chunks whose file name matches the ``.parquet`` input pattern (all when there is none), and the
    layout keyed access needs to address them (None when every chunk is kept)."""
    if pattern is None:
        return chunks, None
    from fnmatch import fnmatch

    positions = [i for i, c in enumerate(chunks) if fnmatch(c["filename"], pattern)]
    if not positions:
        raise DatasetError(f"no chunk of {input_dir!r} matches {pattern!r}")
    return [chunks[i] for i in positions], ([int(c["chunk_size"]) for c in chunks], positions)


def read_index(
    input_dir: str,
    *,
    remote: bool,
    index_path: str | None,
    parquet_pattern: str | None,
    open_store: Callable[[], Any],
    cache_root: str,
) -> tuple[str, dict[str, Any]]:
    """The loaded index of the dataset at ``input_dir``, and ``input_dir`` as the dataset keeps it (a local
    ``file://`` URL becomes its path).

    Raises:
        IndexNotFoundError: no index where one is looked for (a FileNotFoundError).
        DatasetError: ``index_path`` names a remote file.
    """
    from streamscope.format.index import load_index

    if index_path is not None:
        if is_remote(index_path):
            raise DatasetError(f"index_path must be a local file, got {index_path!r}")
        if not os.path.isfile(index_path):
            raise IndexNotFoundError(f"index file {index_path!r} (index_path) does not exist")
        return input_dir, load_index(index_path)
    if not remote:
        local = input_dir[len("file://") :] if input_dir.startswith("file://") else input_dir
        path = os.path.join(local, "index.json")
        if not os.path.isfile(path):
            if not os.path.isdir(local):  # LitData's sentence first
                raise IndexNotFoundError(
                    f"The provided dataset path `{local}` does not exist. No dataset at {path!r}: the directory "
                    "does not exist (optimize() writes one)"
                )
            from streamscope.format.complete import complete_dataset, has_index_shards

            # LitData 0.2.76 finishes such a folder itself: per-writer index files are merged, and a folder of
            # Parquet files is indexed
            if has_index_shards(local):
                complete_dataset(local)
            elif parquet_pattern or any(n.endswith(".parquet") for n in os.listdir(local)):
                from streamscope.engine.parquet import index_parquet_dataset

                index_parquet_dataset(local)
            else:
                raise IndexNotFoundError(f"no dataset at {path!r}: it has no index.json (optimize() writes one)")
        return local, load_index(path)
    store = open_store()
    try:
        data = store.get("index.json")
    except ObjectNotFoundError:
        if input_dir.startswith("hf://"):  # a Hub Parquet dataset: its index is kept locally (engine/hf_index.py)
            from streamscope.engine.hf_index import index_hf_dataset

            folder = index_hf_dataset(input_dir, cache_root, getattr(store, "storage_options", None))
            return input_dir, load_index(os.path.join(folder, "index.json"))
        raise IndexNotFoundError(f"no dataset at {input_dir.rstrip('/')}/index.json: it has no index.json") from None
    index = json.loads(data)
    cdir = dataset_cache_dir(cache_root, input_dir, index.get("updated_at"))
    os.makedirs(cdir, exist_ok=True)
    tmp = os.path.join(cdir, f"index.json.tmp.{os.getpid()}")
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, os.path.join(cdir, "index.json"))
    return input_dir, load_index(os.path.join(cdir, "index.json"))
