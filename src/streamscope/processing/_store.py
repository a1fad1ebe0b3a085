"""Where optimize()/map() publish their output: an :class:`~streamscope._core.protocols.ObjectStore`.

Workers write chunks into a per-job staging directory and publish each one with :func:`publish`: a rename
when the store is a local directory on the same filesystem (the staging directory is then inside it), else
``store.upload_file``.
"""

from __future__ import annotations

import os
from typing import Any

from streamscope._core.errors import OutputDirError
from streamscope._core.protocols import ObjectStore
from streamscope.storage import open_store

__all__ = ["check_writable", "local_root", "open_output", "publish"]


def open_output(output_dir: str, storage_options: dict[str, Any] | None = None) -> ObjectStore:
    """Return the store rooted at ``output_dir`` (a local directory or an object-store URL)."""
    return open_store(output_dir, storage_options or {})


def local_root(store: ObjectStore) -> str | None:
    """The store's root on local disk, or None for remote stores."""
    try:
        probe = store.local_path("streamscope-root-probe")  # some stores refuse the empty key
    except Exception:
        return None
    return os.path.dirname(probe) if probe else None


def check_writable(store: ObjectStore) -> None:
    """Create the output directory (local) and prove it is writable, or raise :class:`OutputDirError`."""
    root = local_root(store)
    try:
        if root is not None:
            os.makedirs(root, exist_ok=True)
        probe = f".streamscope-write-probe-{os.getpid()}"
        store.put(probe, b"")
        store.delete(probe)
    except OSError as exc:
        raise OutputDirError(f"output_dir {store.url!r} is not writable: {exc}") from exc


def publish(store: ObjectStore, src: str, key: str) -> None:
    """Move local file ``src`` to ``key`` in the store; a rename when both are on the same local disk."""
    dest = store.local_path(key) if local_root(store) is not None else None
    if dest is not None:
        try:
            os.replace(src, dest)  # staging lives inside the output dir: same filesystem, atomic
            return
        except OSError:
            pass
    store.upload_file(src, key)
    if os.path.exists(src):
        os.unlink(src)
