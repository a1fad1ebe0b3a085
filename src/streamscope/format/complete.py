"""Finishing a folder of per-writer index files: ``complete_dataset`` / ``is_complete_dataset`` (LitData 0.2.76),
and the merge ``BinaryWriter.merge`` runs (:func:`merge_written_ranks`: :func:`wait_for_index_files`, then
:func:`merge_rank_indexes`).

``optimize`` merges the indexes itself; a folder written by hand (``BinaryWriter``/``Cache`` without
``merge()``) or left by an interrupted job holds ``{rank}.index.json`` files (and, from a multi-node job,
``{node}-index.json`` files). They are merged in natural order of the file names by the one index merge
(:func:`~streamscope.format.index.merge_indexes`: configs must agree but for ``types``, which are fused), the files
are removed, and ``index.json`` is written as ``optimize`` writes it. ``StreamingDataset`` does this itself for a
local folder with shards and no index, as LitData 0.2.76 does.
"""

from __future__ import annotations

import os
import re
import time
from typing import Any

from streamscope._core.errors import FormatError
from streamscope.events import kinds
from streamscope.format.index import INDEX_FILENAME, load_partial_index, merge_indexes, natural_key, write_index

__all__ = [
    "complete_dataset",
    "has_index_shards",
    "index_file_names",
    "is_complete_dataset",
    "merge_index_files",
    "merge_rank_indexes",
    "merge_written_ranks",
    "wait_for_index_files",
]


_SHARD = re.compile(r"^\d+(\.|-)index\.json$")
_WORKER_INDEX = re.compile(r"^\d+\.index\.json$")


def has_index_shards(input_dir: str) -> bool:
    """Whether ``input_dir`` holds per-writer index files to merge."""
    return os.path.isdir(input_dir) and any(_SHARD.match(n) for n in os.listdir(input_dir))


def is_complete_dataset(input_dir: str) -> bool:
    """Whether ``input_dir`` has its ``index.json`` (ready to stream)."""
    return os.path.isfile(os.path.join(input_dir, INDEX_FILENAME))


def complete_dataset(input_dir: str) -> str:
    """Merge the index shards of ``input_dir`` into ``index.json`` (nothing to do when it exists).

    Returns:
        ``input_dir``.

    Raises:
        FileNotFoundError: the folder does not exist, or holds neither ``index.json`` nor index shards.
        FormatError: a shard is unreadable, or two shards were written with configs that differ beyond ``types``
            (a :class:`~streamscope._core.errors.SchemaMismatchError` naming both).
    """
    if is_complete_dataset(input_dir):
        return input_dir
    if not os.path.isdir(input_dir):
        raise FileNotFoundError(f"dataset folder {input_dir!r} does not exist")
    if not has_index_shards(input_dir):
        raise FileNotFoundError(
            f"{input_dir!r} has no {INDEX_FILENAME} and no index shards ({{rank}}.{INDEX_FILENAME}): "
            f"did the writer finish?"
        )
    merge_index_files(input_dir)
    return input_dir


def index_file_names(input_dir: str, node_rank: int | None = None) -> list[str]:
    """The index files :func:`merge_index_files` merges, in natural order."""
    pattern = _SHARD if node_rank is None else _WORKER_INDEX
    return sorted((n for n in os.listdir(input_dir) if pattern.match(n)), key=natural_key)


def merge_index_files(
    input_dir: str,
    names: list[str] | None = None,
    *,
    node_rank: int | None = None,
    existing: dict[str, Any] | None = None,
) -> list[str]:
    """Merge the index files of ``input_dir`` (after ``existing``, an index appended to), then remove them.

    ``node_rank`` None: every ``{rank}.index.json`` and ``{node}-index.json`` into ``index.json``; else only the
    ``{rank}.index.json`` files, into ``{node_rank}-index.json`` (no ``updated_at``: a node's share, LitData's
    multi-node layout). ``names``: :func:`index_file_names` when None. Returns the names merged.

    Raises:
        FormatError: a file is unreadable, or two configs differ beyond ``types``.
    """
    names = index_file_names(input_dir, node_rank) if names is None else names
    paths = [os.path.join(input_dir, n) for n in names]
    chunks, config = merge_indexes((load_partial_index(p) for p in paths), existing)
    if node_rank is None:
        write_index(os.path.join(input_dir, INDEX_FILENAME), chunks, config)
    else:
        write_index(os.path.join(input_dir, f"{node_rank}-{INDEX_FILENAME}"), chunks, config, None)
    for path in paths:
        os.unlink(path)
    return names


def wait_for_index_files(input_dir: str, expected: int | None, timeout: float, who: str) -> bool:
    """Poll ``input_dir`` every 10 ms until it holds ``index.json`` (False: merged already) or, ``expected`` given,
    that many ``{rank}.index.json`` files (True: merge them).

    Raises:
        FormatError: neither within ``timeout`` seconds (naming what is missing; ``who`` says which writer waited).
    """
    deadline = time.monotonic() + timeout
    while True:
        names = os.listdir(input_dir)
        if INDEX_FILENAME in names:
            return False
        parts = [n for n in names if _WORKER_INDEX.match(n)]
        if expected is not None and len(parts) >= expected:
            return True
        if time.monotonic() > deadline:
            if expected is None:
                final = os.path.join(input_dir, INDEX_FILENAME)
                raise FormatError(f"{who}: {final!r} did not appear within {timeout:.0f} s")
            raise FormatError(
                f"{input_dir!r}: {len(parts)} of {expected} per-rank index files after {timeout:.0f} s "
                f"(found {sorted(parts)}); a rank that wrote no chunk writes none"
            )
        time.sleep(0.01)


def merge_rank_indexes(input_dir: str, node_rank: int | None = None, existing: dict[str, Any] | None = None) -> None:
    """:func:`merge_index_files` of :func:`index_file_names` now, traced (``index_merge``): LitData's
    ``BinaryWriter._merge_no_wait``.

    Raises:
        FormatError: a file is unreadable, or two configs differ beyond ``types``.
    """
    names = index_file_names(input_dir, node_rank)
    with kinds.index_merge(files=len(names)):
        merge_index_files(input_dir, names, node_rank=node_rank, existing=existing)


def merge_written_ranks(input_dir: str, rank: int, expected: int, timeout: float, node_rank: int | None = None) -> None:
    """LitData's ``BinaryWriter.merge``: rank 0 waits for ``expected`` ``{rank}.index.json`` files and merges them
    (:func:`merge_rank_indexes`; into ``{node_rank}-index.json`` when ``node_rank`` is given), the other ranks wait
    for ``index.json``; nothing to do when it exists.

    Raises:
        FormatError: what was waited for did not appear within ``timeout`` seconds, or the configs differ.
    """
    if rank != 0:
        wait_for_index_files(input_dir, None, timeout, f"rank {rank}")
    elif wait_for_index_files(input_dir, expected, timeout, "rank 0"):
        merge_rank_indexes(input_dir, node_rank)
