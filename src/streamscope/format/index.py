"""index.json: byte-exact writing, THE index merge, validated loading.

``index.json`` is ``json.dumps({"chunks": [...], "config": {...}, "updated_at": "<time.time()>"}, sort_keys=True)``
on one line with no trailing newline; per-rank partial files ``{rank}.index.json`` have no ``updated_at``.

The merge rule (:func:`merge_indexes`, the only place that joins chunk lists: ``optimize`` single- and
multi-node, ``complete_dataset``, ``BinaryWriter.merge`` and :func:`merge_partial_indexes` all call it) is
LitData 0.2.76's: the chunk lists are concatenated in the order given (the dataset appended to first); the configs
must agree on everything but ``types``, and their ``types`` (the inferred schema) are fused. LitData 0.2.68's
configs have no ``types``, so for them the rule is 0.2.68's: identical configs. A part without chunks adds
nothing and is not compared (a worker that wrote no sample has no schema to agree on).
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Iterable
from typing import Any

from streamscope._core.errors import FormatError, SchemaMismatchError
from streamscope.format.writer import config_body, fuse_configs

__all__ = [
    "INDEX_FILENAME",
    "IndexPart",
    "adapt_mds",
    "dumps_index",
    "load_index",
    "load_partial_index",
    "merge_indexes",
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


def dumps_index(chunks: list[dict[str, Any]], config: dict[str, Any] | None, updated_at: str | None) -> str:
    """The exact text of an index file (``updated_at`` omitted when None; ``config`` None: no chunk at all, what
    LitData writes too when ``fn`` returned no sample)."""
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


def write_index(path: str, chunks: list[dict[str, Any]], config: dict[str, Any] | None, updated_at: Any = _NOW) -> None:
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


IndexPart = tuple[str, list[dict[str, Any]], dict[str, Any] | None]
"""One index to merge: ``(name, chunks, config)``; the name is what an error says (a file, "worker 3", "node 1")."""


def merge_indexes(
    parts: Iterable[IndexPart], existing: dict[str, Any] | None = None, *, existing_name: str = "the existing dataset"
) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """The chunk list and config of ``existing`` (an index appended to: its chunks first) followed by ``parts``, by
    the rule of the module docstring.

    Returns:
        ``(chunks, config)``; config None when neither ``existing`` nor any part has a config (no chunk at all).

    Raises:
        SchemaMismatchError: two configs differ beyond ``types`` (LitData's sentence first, then both names and
            the keys that differ). It is a :class:`FormatError`.
    """
    chunks: list[dict[str, Any]] = []
    config: dict[str, Any] | None = None
    config_from = ""
    if existing:
        chunks.extend(existing["chunks"])
        config, config_from = existing["config"], existing_name
    for name, p_chunks, p_config in parts:
        if not p_chunks:
            continue
        if p_config is None:
            raise FormatError(f"index {name!r} lists chunks but has no config")
        if config is None:
            config, config_from = p_config, name
        else:
            fused = fuse_configs(config, p_config)
            if fused is None:
                a, b = config_body(config), config_body(p_config)
                keys = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
                diff = ", ".join(f"{k}: {b.get(k)!r} != {a.get(k)!r}" for k in keys)[:500]
                raise SchemaMismatchError(  # LitData's sentence first
                    f"The config isn't consistent between chunks: {name!r} differs from {config_from!r} in {keys} "
                    f"({diff})"
                )
            config = fused
        chunks.extend(p_chunks)
    return chunks, config


def load_partial_index(path: str) -> IndexPart:
    """A partial index file as a :data:`IndexPart` named by its file name. A file listing no chunk may have a null
    config (a node of ``optimize`` whose workers wrote nothing): it is an empty part, not an error.

    Raises:
        FormatError: unreadable, or not an index (see :func:`load_index`).
    """
    name = os.path.basename(path)
    with open(path, "rb") as f:
        raw = f.read()
    try:
        obj = json.loads(raw)
    except (UnicodeDecodeError, ValueError):
        obj = None  # load_index names the problem
    if isinstance(obj, dict) and obj.get("chunks") == [] and obj.get("config") is None:
        return name, [], None
    part = load_index(path)
    return name, part["chunks"], part["config"]


def merge_partial_indexes(
    dir: str, existing: dict[str, Any] | None = None, *, delete_partials: bool = False
) -> dict[str, Any]:
    """Merge every ``{rank}.index.json`` in ``dir`` in natural order (:func:`merge_indexes`).

    Args:
        dir: directory holding the partial files.
        existing: an index being appended to; its chunks come first and its config must agree.
        delete_partials: remove the partial files after a successful merge.

    Returns:
        ``{"chunks": [...], "config": {...}}`` (no updated_at).

    Raises:
        FormatError: a partial file is unreadable, or configs differ (naming both files), or there is none.
    """
    names = partial_index_files(dir)
    chunks, config = merge_indexes(
        (load_partial_index(os.path.join(dir, n)) for n in names), existing, existing_name="the existing index"
    )
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
