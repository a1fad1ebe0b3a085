"""Publishing ``index.json`` at the end of ``optimize()``: the workers' chunk lists (single node) or the nodes'
``{rank}-index.json`` files (several machines) joined after the dataset appended to by the one index merge of the
format layer (:func:`streamscope.format.index.merge_indexes`), written in its exact text
(:func:`streamscope.format.index.dumps_index`) and put LAST, so that until then no index a reader would accept
exists.
"""

from __future__ import annotations

import json
import os
import shutil
import time
import warnings
from typing import Any

from streamscope._core.errors import OptimizeError
from streamscope._core.protocols import ObjectStore
from streamscope.events import kinds
from streamscope.format.index import INDEX_FILENAME, IndexPart, dumps_index, merge_indexes
from streamscope.processing._store import local_root
from streamscope.processing.nodes import NODES_DIR, NodeGroup, node_index_key
from streamscope.processing.output_files import chunk_files

__all__ = ["merge_nodes", "publish_index", "remove_nodes_dir"]


def publish_index(
    store: ObjectStore, parts: list[IndexPart], existing: dict[str, Any] | None, n_inputs: int
) -> list[dict[str, Any]]:
    """Merge ``parts`` (in rank order) after ``existing`` and publish ``index.json``; return its chunk list.

    Raises:
        SchemaMismatchError: two parts' configs cannot be fused (LitData's sentence first).
    """
    with kinds.index_merge(workers=len(parts)):
        chunks, config = merge_indexes(parts, existing)
        if not chunks:  # LitData writes this index too (its StreamingDataset then refuses it); say so
            warnings.warn(
                f"optimize(): fn returned no sample for any of the {n_inputs} inputs; {store.url!r} gets an "
                "index.json that lists no chunk (a StreamingDataset cannot read it; mode='append' can add to it)",
                UserWarning,
                stacklevel=2,
            )
        store.put(INDEX_FILENAME, dumps_index(chunks, config, str(time.time())).encode())
    return chunks


def merge_nodes(
    store: ObjectStore,
    group: NodeGroup,
    existing: dict[str, Any] | None,
    existing_raw: bytes | None,
    n_inputs: int,
) -> bool:
    """The node that saw every node done: merge their ``{rank}-index.json`` (after the dataset appended to) into
    ``index.json``, remove chunk files no entry names (leftovers of earlier runs); False when another node that
    finished at the same moment has already merged.

    Raises:
        OptimizeError: a node is marked done but its ``{rank}-index.json`` is missing.
    """
    if _index_moved(store, existing_raw):
        return False
    parts: list[IndexPart] = []
    for r in range(group.node.num_nodes):
        try:
            rec = json.loads(store.get(node_index_key(r)))
        except FileNotFoundError:
            if _index_moved(store, existing_raw):
                return False  # the other merger published and removed the node files
            raise OptimizeError(
                f"optimize(): node {r} is marked done in {store.url}/{NODES_DIR}/ but "
                f"{store.url}/{node_index_key(r)} is missing; rerun node {r}"
            ) from None
        parts.append((f"node {r}", list(rec.get("chunks") or []), rec.get("config")))
    chunks = publish_index(store, parts, existing, n_inputs)
    named = {c["filename"] for c in chunks}
    for key, _rank, _idx in chunk_files(store):
        if key not in named:
            store.delete(key)
    return True


def remove_nodes_dir(store: ObjectStore) -> None:
    """Remove the node claims folder (``.nodes/``) of a local output."""
    root = local_root(store)
    if root is not None:
        shutil.rmtree(os.path.join(root, NODES_DIR), ignore_errors=True)


def _index_moved(store: ObjectStore, at_start: bytes | None) -> bool:
    """index.json is no longer what this node saw when it started: another node has merged already."""
    try:
        now = store.get(INDEX_FILENAME)
    except FileNotFoundError:
        now = None
    return now != at_start
