"""index.json: byte-exact writing, merging of per-rank partial indexes, validated loading.

``index.json`` is ``json.dumps({"chunks": [...], "config": {...}, "updated_at": "<time.time()>"}, sort_keys=True)``
on one line with no trailing newline; per-rank partial files ``{rank}.index.json`` have no ``updated_at``.
"""

from __future__ import annotations

import json
import os
import re
import time
from typing import Any

from streamscope._core.errors import FormatError

__all__ = [
    "INDEX_FILENAME",
    "adapt_mds",
    "dumps_index",
    "load_index",
    "merge_partial_indexes",
    "natural_key",
    "partial_index_files",
    "write_index",
    "write_partial_index",
]


INDEX_FILENAME = "index.json"
_PARTIAL_RE = re.compile(r"^(\d+)\.index\.json$")
_DIGITS = re.compile(r"(\d+)")
_NOW = object()
_CHUNK_KEYS = ("chunk_bytes", "chunk_size", "filename")


def natural_key(name: str) -> list[Any]:
    """Sort key comparing digit runs as numbers: ``2.index.json`` < ``10.index.json``."""
    return [int(part) if part.isdigit() else part.lower() for part in _DIGITS.split(name)]


def dumps_index(chunks: list[dict[str, Any]], config: dict[str, Any], updated_at: str | None) -> str:
    """The exact text of an index file (``updated_at`` omitted when None)."""
    obj: dict[str, Any] = {"chunks": chunks, "config": config}
    if updated_at is not None:
        obj["updated_at"] = updated_at
    return json.dumps(obj, sort_keys=True)


def _write_text_atomic(path: str, text: str) -> None:
    tmp = f"{path}.tmp.{os.getpid()}"
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def write_index(path: str, chunks: list[dict[str, Any]], config: dict[str, Any], updated_at: Any = _NOW) -> None:
    """Write ``index.json`` atomically; ``updated_at`` defaults to ``str(time.time())``."""
    stamp = str(time.time()) if updated_at is _NOW else updated_at
    _write_text_atomic(path, dumps_index(chunks, config, stamp))


def write_partial_index(dir: str, rank: int, chunks: list[dict[str, Any]], config: dict[str, Any]) -> str:
    """Write ``{dir}/{rank}.index.json`` (chunks + config, no updated_at); returns its path."""
    path = os.path.join(dir, f"{rank}.{INDEX_FILENAME}")
    _write_text_atomic(path, dumps_index(chunks, config, None))
    return path


def partial_index_files(dir: str) -> list[str]:
    """Per-rank partial index file names in ``dir``, in natural order."""
    return sorted((n for n in os.listdir(dir) if _PARTIAL_RE.match(n)), key=natural_key)


def merge_partial_indexes(
    dir: str, existing: dict[str, Any] | None = None, *, delete_partials: bool = False
) -> dict[str, Any]:
    """Concatenate the chunks of every ``{rank}.index.json`` in ``dir`` in natural order.

    Args:
        dir: directory holding the partial files.
        existing: an index being appended to; its chunks come first and its config must match.
        delete_partials: remove the partial files after a successful merge.

    Returns:
        ``{"chunks": [...], "config": {...}}`` (no updated_at).

    Raises:
        FormatError: a partial file is unreadable, or configs differ (naming both files).
    """
    names = partial_index_files(dir)
    chunks: list[dict[str, Any]] = list(existing["chunks"]) if existing else []
    config: dict[str, Any] | None = existing["config"] if existing else None
    config_from = "the existing index" if existing else ""
    for name in names:
        part = load_index(os.path.join(dir, name))
        if config is None:
            config, config_from = part["config"], name
        elif part["config"] != config:
            diff = sorted(k for k in set(config) | set(part["config"]) if config.get(k) != part["config"].get(k))
            raise FormatError(f"index config of {name!r} differs from {config_from!r} in {diff}")
        chunks.extend(part["chunks"])
    if config is None:
        raise FormatError(f"no partial index files (N.index.json) in {dir!r} to merge")
    if delete_partials:
        for name in names:
            os.unlink(os.path.join(dir, name))
    return {"chunks": chunks, "config": config}


def adapt_mds(index: dict[str, Any]) -> dict[str, Any]:
    """Turn a MosaicML MDS index (``shards``) into a chunks index (LitData's adaptation)."""
    shards = index["shards"]
    if not shards:
        raise FormatError("MDS index has no shards")
    chunks = [
        {
            "chunk_bytes": s["zip_data"]["bytes"] if s.get("zip_data") else s["raw_data"]["bytes"],
            "chunk_size": s["samples"],
            "column_sizes": s["column_sizes"],
            "dim": None,
            "filename": s["zip_data"]["basename"] if s.get("zip_data") else s["raw_data"]["basename"],
        }
        for s in shards
    ]
    names = shards[0]["column_names"]
    spec = [
        1,
        {
            "type": "builtins.dict",
            "context": json.dumps(names),
            "children_spec": [{"type": None, "context": None, "children_spec": []} for _ in names],
        },
    ]
    out = dict(index)
    out["chunks"] = chunks
    out["config"] = {
        "chunk_bytes": sum(c["chunk_bytes"] for c in chunks),
        "chunk_size": sum(c["chunk_size"] for c in chunks),
        "compression": shards[0].get("compression"),
        "data_format": shards[0]["column_encodings"],
        "format": shards[0].get("format"),
        "data_spec": json.dumps(spec),
        "encryption": None,
    }
    return out


def load_index(path_or_bytes: str | bytes | os.PathLike[str]) -> dict[str, Any]:
    """Read and validate an index (a path, a directory holding index.json, or the file's bytes).

    Raises:
        FormatError: not JSON, or missing/ill-typed ``chunks``/``config`` fields (naming the file and entry).
    """
    if isinstance(path_or_bytes, (bytes, bytearray, memoryview)):
        name = "<index bytes>"
        raw = bytes(path_or_bytes)
    else:
        name = os.fspath(path_or_bytes)
        if os.path.isdir(name):
            name = os.path.join(name, INDEX_FILENAME)
        with open(name, "rb") as f:
            raw = f.read()
    try:
        obj = json.loads(raw)
    except (UnicodeDecodeError, ValueError) as exc:
        raise FormatError(f"index {name!r} is not valid JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise FormatError(f"index {name!r} must hold a JSON object, got {type(obj).__name__}")
    if "chunks" not in obj and "shards" in obj:
        try:
            obj = adapt_mds(obj)
        except (KeyError, TypeError) as exc:
            raise FormatError(f"MDS index {name!r} lacks field {exc}") from None
    chunks, config = obj.get("chunks"), obj.get("config")
    if not isinstance(chunks, list):
        raise FormatError(f"index {name!r} has no `chunks` list")
    # what optimize() writes when fn returned no sample (LitData too)
    if chunks == [] and "config" in obj and config is None:
        raise FormatError(
            f"No chunks found in the {name!r} file: the dataset is empty (optimize()'s fn returned no sample)"
        )
    if not isinstance(config, dict):
        raise FormatError(f"index {name!r} has no `config` object")
    for i, c in enumerate(chunks):
        if not isinstance(c, dict):
            raise FormatError(f"index {name!r} chunks[{i}] is not an object")
        for k in _CHUNK_KEYS:
            if k not in c:
                raise FormatError(f"index {name!r} chunks[{i}] lacks `{k}`")
        # a relative path of plain names: LitData's index of a Hub dataset names files below its prefix
        # ("data/train-0.parquet"); nothing may climb out of the dataset's folder
        fn = c["filename"]
        if not isinstance(fn, str) or "\\" in fn or any(p in ("", ".", "..") for p in fn.split("/")):
            raise FormatError(f"index {name!r} chunks[{i}] has a bad filename {c['filename']!r}")
        for k in ("chunk_bytes", "chunk_size"):
            v = c[k]
            if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                raise FormatError(f"index {name!r} chunks[{i}].{k} must be a non-negative int, got {v!r}")
        c.setdefault("dim", None)
    fmt = config.get("data_format")
    if fmt is not None and not (isinstance(fmt, list) and all(isinstance(x, str) for x in fmt)):
        raise FormatError(f"index {name!r} config.data_format must be a list of strings, got {fmt!r}")
    return obj
