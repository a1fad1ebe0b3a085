"""``optimize_hf``: convert a Hugging Face Hub dataset's Parquet files into an optimized dataset (LitData 0.2.76).

1. The dataset id is resolved to an ``hf://`` prefix that holds ``.parquet`` files, trying LitData's candidates in
   its order: ``@<revision>[/<config>][/<split>]`` when a revision is given, ``@refs/convert/parquet/<config>
   [/<split>]`` (the Hub's Parquet conversion) for ``config``, ``default`` and ``plain_text``,
   ``data/<split>-*.parquet`` and friends, then ``data/`` and the repository root.
2. Each Parquet file is one input of :func:`~streamscope.processing.functions.optimize`: a worker fetches it into
   ``<cache_dir>/hf-parquet/<md5(url)>/`` (kept, and reused when its size matches) and yields its rows as dicts
   (``columns`` projects, ``fn`` maps a row to a sample). The writer turns list and nested fields into one JSON
   leaf each and fills missing values, so every row has one ``data_format``.
3. Chunks of ``chunk_bytes`` (256 MB unless ``chunk_size`` or ``chunk_bytes`` is given).

Unlike LitData, the rows are not re-typed from the Arrow schema before writing (the writer infers the types from
the rows); ``{bytes, path}`` media columns stay dicts of bytes and str, as in LitData.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterator
from fnmatch import fnmatch
from functools import partial
from typing import Any

from streamscope._core import config as knobs
from streamscope._core.errors import IndexNotFoundError, ObjectNotFoundError
from streamscope._core.optional import require

__all__ = ["optimize_hf", "resolve_hf_dataset_url"]


def _parquet_urls(url: str, storage_options: dict[str, Any] | None) -> list[str]:
    """The ``hf://`` URLs of the ``.parquet`` files under ``url`` (a basename glob filters them); [] when the
    revision or folder does not exist. A missing repository or a refused token raises."""
    from streamscope.storage import open_store

    base, pattern = url.rstrip("/"), None
    tail = base.rsplit("/", 1)[-1]
    if tail.endswith(".parquet"):
        base, pattern = base.rsplit("/", 1)
    try:
        found = [m.key for m in open_store(base, storage_options).list("") if m.key.endswith(".parquet")]
    except ObjectNotFoundError as exc:
        if getattr(exc, "hub_code", None) in ("RevisionNotFound", "EntryNotFound"):
            return []
        raise
    if pattern is not None:
        found = [k for k in found if "/" not in k and fnmatch(k, pattern)]
    return [f"{base}/{k}" for k in sorted(found)]


def resolve_hf_dataset_url(
    name: str,
    revision: str | None = None,
    split: str | None = None,
    config: str | None = None,
    storage_options: dict[str, Any] | None = None,
) -> str:
    """The first of LitData's candidate ``hf://`` prefixes for ``name`` that holds ``.parquet`` files.

    Raises:
        IndexNotFoundError: no candidate holds one (a FileNotFoundError, as LitData's).
    """
    if name.startswith("hf://"):
        return name
    repo = name.removeprefix("datasets/")
    candidates: list[str] = []
    if revision:
        prefix = f"hf://datasets/{repo}@{revision}"
        if config and split:
            candidates.append(f"{prefix}/{config}/{split}")
        if split:
            candidates.append(f"{prefix}/{split}")
        if config:
            candidates.append(f"{prefix}/{config}")
        candidates.append(prefix)
    for cfg in [c for c in (config, "default", "plain_text") if c]:
        if split:
            candidates.append(f"hf://datasets/{repo}@refs/convert/parquet/{cfg}/{split}")
        candidates.append(f"hf://datasets/{repo}@refs/convert/parquet/{cfg}")
    if split:
        candidates += [
            f"hf://datasets/{repo}/data/{split}-*.parquet",
            f"hf://datasets/{repo}/data/{split}*.parquet",
            f"hf://datasets/{repo}/{split}-*.parquet",
        ]
    candidates += [
        f"hf://datasets/{repo}@refs/convert/parquet",
        f"hf://datasets/{repo}/data",
        f"hf://datasets/{repo}",
    ]
    for url in dict.fromkeys(candidates):
        if _parquet_urls(url, storage_options):
            return url
    raise IndexNotFoundError(
        f"No parquet files found for dataset {name!r} (revision={revision!r}, split={split!r}, config={config!r})"
    )


def _rows_of_file(
    url: str,
    columns: list[str] | None,
    transform: Callable[[dict[str, Any]], Any] | None,
    storage_options: dict[str, Any] | None,
    persist_dir: str,
) -> Iterator[Any]:
    """The rows of one Parquet file of the Hub (the optimize ``fn``: one input, many samples)."""
    from streamscope.storage import open_store

    pq = require("pyarrow.parquet", "optimize_hf (reading Parquet files)")
    folder, name = url.rsplit("/", 1)
    local = os.path.join(persist_dir, hashlib.md5(url.encode(), usedforsecurity=False).hexdigest()[:12] + "-" + name)
    store = open_store(folder, storage_options)
    if not (os.path.isfile(local) and os.path.getsize(local) == store.head(name).size):
        store.download_file(name, local)
    parquet = pq.ParquetFile(local)
    for batch in parquet.iter_batches(batch_size=8192, columns=columns):
        for row in batch.to_pylist():
            yield transform(row) if transform is not None else row


def _has_index(output_dir: str, storage_options: dict[str, Any] | None) -> bool:
    from streamscope.storage import open_store

    try:
        return open_store(output_dir, storage_options).exists("index.json")
    except ObjectNotFoundError:
        return False


def optimize_hf(
    name: str,
    output_dir: str,
    revision: str | None = None,
    split: str | None = None,
    config: str | None = None,
    chunk_size: int | None = None,
    chunk_bytes: int | str | None = None,
    fn: Callable[[dict[str, Any]], Any] | None = None,
    num_workers: int | None = None,
    columns: list[str] | None = None,
    overwrite: bool = False,
    cache_dir: str | None = None,
    storage_options: dict[str, Any] | None = None,
    **optimize_kwargs: Any,
) -> str:
    """Convert a Hugging Face Hub dataset into an optimized dataset in ``output_dir`` (see the module docstring).

    Args:
        name: the Hub id (``owner/name``) or an ``hf://datasets/...`` URL.
        output_dir: where the chunks and ``index.json`` go (local, ``s3://``, ``gs://``, ...). When it already
            has an ``index.json`` and ``overwrite`` is False, nothing is done.
        revision: a branch, tag, commit or ``refs/convert/parquet``; default: the candidates above.
        split: e.g. ``train``; default: every Parquet file found.
        config: the dataset config (subset), e.g. ``plain_text``.
        chunk_size: rows per chunk (instead of ``chunk_bytes``).
        chunk_bytes: chunk size in bytes; ``"256MB"`` when neither is given.
        fn: a picklable ``row dict -> sample``; default: the row as it is.
        num_workers: optimize workers; default ``min(files, CPUs)``.
        columns: the Parquet columns to read.
        overwrite: rebuild even when ``output_dir`` has an ``index.json``.
        cache_dir: root of the downloaded Parquet files (``<cache_dir>/hf-parquet/...``); default: the
            ``cache_dir`` knob.
        storage_options: ``token`` (else ``HF_TOKEN``) and ``endpoint`` (else ``HF_ENDPOINT``) for the Hub; also
            passed to ``optimize`` for ``output_dir``.
        **optimize_kwargs: more ``optimize`` arguments (``compression``, ``mode``, ...).

    Returns:
        ``output_dir``.

    Raises:
        IndexNotFoundError: no Parquet file for the dataset (a FileNotFoundError).
    """
    from streamscope.processing.functions import optimize

    hub_options = {k: v for k, v in (storage_options or {}).items() if k in ("token", "endpoint")}
    if not overwrite and _has_index(output_dir, storage_options):
        return output_dir
    url = resolve_hf_dataset_url(name, revision=revision, split=split, config=config, storage_options=hub_options)
    inputs = _parquet_urls(url, hub_options)
    if not inputs:
        raise IndexNotFoundError(f"No parquet files found for {name!r} (resolved {url})")
    root = cache_dir if cache_dir is not None else str(knobs.get("cache_dir"))
    persist = os.path.join(root, "hf-parquet", hashlib.md5(url.encode(), usedforsecurity=False).hexdigest())
    os.makedirs(persist, exist_ok=True)
    kwargs = dict(optimize_kwargs)
    kwargs.setdefault("mode", "overwrite" if overwrite else None)
    if chunk_size is not None:
        kwargs["chunk_size"] = chunk_size
    else:
        kwargs["chunk_bytes"] = chunk_bytes if chunk_bytes is not None else "256MB"
    out_options = {k: v for k, v in (storage_options or {}).items() if k not in ("token", "endpoint")}
    optimize(
        fn=partial(
            _rows_of_file,
            columns=columns,
            transform=fn,
            storage_options=hub_options,
            persist_dir=persist,
        ),
        inputs=inputs,
        output_dir=output_dir,
        num_workers=num_workers if num_workers is not None else min(len(inputs), os.cpu_count() or 4),
        storage_options=out_options,
        **kwargs,
    )
    return output_dir
