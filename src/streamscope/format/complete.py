"""``complete_dataset`` / ``is_complete_dataset`` (LitData 0.2.76): finish a folder of chunks that has per-writer
index files but no ``index.json``.

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

from streamscope.format.index import INDEX_FILENAME, load_partial_index, merge_indexes, natural_key, write_index

__all__ = ["complete_dataset", "has_index_shards", "is_complete_dataset"]


_SHARD = re.compile(r"^\d+(\.|-)index\.json$")


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
    shards = sorted((n for n in os.listdir(input_dir) if _SHARD.match(n)), key=natural_key)
    if not shards:
        raise FileNotFoundError(
            f"{input_dir!r} has no {INDEX_FILENAME} and no index shards ({{rank}}.{INDEX_FILENAME}): "
            f"did the writer finish?"
        )
    chunks, config = merge_indexes(load_partial_index(os.path.join(input_dir, n)) for n in shards)
    write_index(os.path.join(input_dir, INDEX_FILENAME), chunks, config)
    for name in shards:
        os.unlink(os.path.join(input_dir, name))
    return input_dir
