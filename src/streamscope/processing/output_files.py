"""What optimize()/map() keep in order in the output folder besides the dataset: leftover chunk files of failed
runs, the checkpoint records (``.checkpoints/``), an old dataset replaced by ``mode="overwrite"``, the next chunk
number of each worker for ``mode="append"``, and the per-job staging directories the workers write into.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import socket
import tempfile
from collections.abc import Callable
from typing import Any

from streamscope._core import config as cfg
from streamscope._core.errors import OutputDirError
from streamscope._core.protocols import ObjectStore
from streamscope.events import kinds
from streamscope.processing._store import local_root
from streamscope.processing.worker import CHECKPOINT_DIR, checkpoint_key

__all__ = [
    "CKPT_CONFIG",
    "chunk_files",
    "delete_checkpoints",
    "existing_config",
    "load_json",
    "make_staging",
    "next_chunk_indexes",
    "remove_chunks",
    "wipe_dataset",
]


CKPT_CONFIG = f"{CHECKPOINT_DIR}/config.json"
_CHUNK_RE = re.compile(r"^chunk-(\d+)-(\d+)(\.[^/]+)?\.bin$")
_NODE_INDEX_RE = re.compile(r"^\d+-index\.json$")
_STAGING_PREFIX = ".streamscope-staging-"


def existing_config(store: ObjectStore) -> dict[str, Any] | None:
    """The ``config`` of the store's ``index.json`` (None when unreadable: the append itself reports it)."""
    try:
        config = json.loads(store.get("index.json")).get("config")
    except (ValueError, AttributeError):
        return None
    return config if isinstance(config, dict) else None


def load_json(store: ObjectStore, key: str) -> Any:
    """The JSON object at ``key``, or None when there is none."""
    if not store.exists(key):
        return None
    return json.loads(store.get(key))


def chunk_files(store: ObjectStore) -> list[tuple[str, int, int]]:
    """``(key, rank, index)`` of every ``chunk-R-I[.comp].bin`` at the top of the store."""
    out = []
    for meta in store.list(""):
        if "/" in meta.key:
            continue
        m = _CHUNK_RE.match(meta.key)
        if m:
            out.append((meta.key, int(m.group(1)), int(m.group(2))))
    return out


def remove_chunks(store: ObjectStore, which: Callable[[int, int], bool]) -> None:
    """Delete the chunk files whose ``(rank, index)`` ``which`` selects."""
    for key, rank, idx in chunk_files(store):
        if which(rank, idx):
            store.delete(key)


def delete_checkpoints(store: ObjectStore, ranks: range | None = None) -> None:
    """Delete every object under ``.checkpoints/`` (config last, so a half-deleted set is never resumable);
    ``ranks``: only those workers' records (a node of a multi-node job; the others' belong to other nodes)."""
    if ranks is not None:
        for w in ranks:
            store.delete(checkpoint_key(w))
        return
    keys = [m.key for m in store.list(CHECKPOINT_DIR + "/")]
    for key in sorted(keys, key=lambda k: k == CKPT_CONFIG):
        store.delete(key)
    root = local_root(store)
    if root is not None and os.path.isdir(os.path.join(root, CHECKPOINT_DIR)):
        shutil.rmtree(os.path.join(root, CHECKPOINT_DIR), ignore_errors=True)


def wipe_dataset(store: ObjectStore, ranks: range | None = None) -> None:
    """``mode="overwrite"``: remove the old dataset. ``ranks``: a node of a multi-node job removes only its own
    workers' files (another node may have published its share already); the merge removes what is left."""
    with kinds.overwrite(url=store.url):
        if store.exists("index.json"):
            store.delete("index.json")
        remove_chunks(store, (lambda r, k: True) if ranks is None else (lambda r, k: r in ranks))
        delete_checkpoints(store, ranks)
        if ranks is None:
            for meta in store.list(""):
                if "/" not in meta.key and _NODE_INDEX_RE.match(meta.key):
                    store.delete(meta.key)  # a multi-node job's per-node leftovers


def next_chunk_indexes(existing: dict[str, Any] | None, workers: int) -> list[int]:
    """Each worker's first chunk number: after its chunks in the index appended to (``existing``), else 0."""
    starts = [0] * workers
    if existing:
        for c in existing.get("chunks", []):
            m = _CHUNK_RE.match(c["filename"])
            if m and int(m.group(1)) < workers:
                r = int(m.group(1))
                starts[r] = max(starts[r], int(m.group(2)) + 1)
    return starts


def make_staging(store: ObjectStore) -> str:
    """A new staging directory for this job's workers: inside the output folder when it is local (publishing is
    then a rename), else under the ``optimize_staging_dir`` knob or the system's temporary directory.

    Raises:
        OutputDirError: it cannot be created.
    """
    parent = str(cfg.get("optimize_staging_dir")) or local_root(store) or tempfile.gettempdir()
    try:
        os.makedirs(parent, exist_ok=True)
        _remove_stale_staging(parent)
        return tempfile.mkdtemp(prefix=f"{_STAGING_PREFIX}{os.getpid()}-h{_host_tag()}-", dir=parent)
    except OSError as exc:
        raise OutputDirError(f"cannot create a staging directory under {parent!r}: {exc}") from exc


def _remove_stale_staging(parent: str) -> None:
    """Remove staging dirs left by jobs whose main process no longer exists (e.g. it was SIGKILLed).

    Only this host's: several nodes of a multi-node job may stage in one shared output folder, and a pid says
    nothing about another host's processes."""
    mine = _host_tag()
    for name in os.listdir(parent):
        if not name.startswith(_STAGING_PREFIX):
            continue
        pid_text, _, rest = name[len(_STAGING_PREFIX) :].partition("-")
        if not pid_text.isdigit():
            continue
        if re.match(r"^h[0-9a-f]{8}-", rest) and rest[1:9] != mine:
            continue  # another host's
        try:
            os.kill(int(pid_text), 0)
        except ProcessLookupError:
            shutil.rmtree(os.path.join(parent, name), ignore_errors=True)
        except OSError:
            pass


def _host_tag() -> str:
    return hashlib.sha1(socket.gethostname().encode(), usedforsecurity=False).hexdigest()[:8]
