"""Where optimize()/map() publish their output: one function, :func:`open_output`.

It returns an :class:`~streamscope._core.protocols.ObjectStore`. While ``streamscope.storage.open_store``
has not landed on main, :class:`_LocalDirStore` (TO BE REPLACED by the storage engineer's local adapter)
serves local directories; remote URLs then raise a clear error.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from typing import Any

from streamscope._core.errors import ObjectNotFoundError, OutputDirError, StorageError, UnsupportedURLError
from streamscope._core.protocols import ObjectMeta, ObjectStore

_UMASK = os.umask(0)
os.umask(_UMASK)


def _is_url(path: str) -> bool:
    return "://" in path and not path.startswith("file://")


def open_output(output_dir: str, storage_options: dict[str, Any] | None = None) -> ObjectStore:
    """Return a store rooted at ``output_dir`` (a local directory, or a URL once storage lands)."""
    try:
        from streamscope.storage import open_store  # type: ignore[attr-defined]
    except ImportError:
        open_store = None
    if open_store is not None:
        return open_store(output_dir, storage_options or {})  # type: ignore[no-any-return]
    if _is_url(output_dir):
        raise UnsupportedURLError(
            f"output_dir {output_dir!r}: object-storage output needs streamscope.storage, which is not installed"
        )
    path = output_dir[len("file://") :] if output_dir.startswith("file://") else output_dir
    return _LocalDirStore(path)


def local_root(store: ObjectStore) -> str | None:
    """The store's root on local disk, or None for remote stores."""
    try:
        return store.local_path("")
    except Exception:
        return None


class _LocalDirStore:
    """A local directory as an ObjectStore (interim; see module doc). Writes are atomic (tmp + rename)."""

    def __init__(self, root: str) -> None:
        self.root = os.path.abspath(os.path.expanduser(root))
        self.url = self.root

    def _p(self, key: str) -> str:
        return os.path.join(self.root, *[k for k in key.split("/") if k]) if key else self.root

    def get(self, key: str) -> bytes:
        try:
            with open(self._p(key), "rb") as f:
                return f.read()
        except FileNotFoundError:
            raise ObjectNotFoundError(f"{self._p(key)} does not exist") from None

    def get_range(self, key: str, start: int, end: int) -> bytes:
        with open(self._p(key), "rb") as f:
            f.seek(start)
            return f.read(end - start)

    def head(self, key: str) -> ObjectMeta:
        try:
            st = os.stat(self._p(key))
        except FileNotFoundError:
            raise ObjectNotFoundError(f"{self._p(key)} does not exist") from None
        return ObjectMeta(key=key, size=st.st_size, mtime=st.st_mtime)

    def exists(self, key: str) -> bool:
        return os.path.exists(self._p(key))

    def put(self, key: str, data: bytes) -> None:
        dest = self._p(key)
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(dest), prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.chmod(tmp, 0o666 & ~_UMASK)  # mkstemp makes 0600; published files get the usual mode
            os.replace(tmp, dest)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise

    def list(self, prefix: str = "") -> Iterator[ObjectMeta]:
        if not os.path.isdir(self.root):
            return
        for dirpath, _dirs, files in os.walk(self.root):
            for name in files:
                full = os.path.join(dirpath, name)
                key = os.path.relpath(full, self.root).replace(os.sep, "/")
                if key.startswith(prefix):
                    yield ObjectMeta(key=key, size=os.path.getsize(full))

    def delete(self, key: str) -> None:
        p = self._p(key)
        if os.path.isdir(p):
            shutil.rmtree(p)
        elif os.path.exists(p):
            os.unlink(p)

    def download_file(self, key: str, dest: str) -> int:
        data = self.get(key)
        tmp = f"{dest}.tmp.{os.getpid()}"
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, dest)
        return len(data)

    def upload_file(self, src: str, key: str) -> None:
        dest = self._p(key)
        try:
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            tmp = f"{dest}.tmp.{os.getpid()}"
            shutil.copyfile(src, tmp)
            os.replace(tmp, dest)
        except OSError as exc:
            raise StorageError(f"cannot publish {src!r} to {dest!r}: {exc}") from exc

    def local_path(self, key: str) -> str | None:
        return self._p(key)


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
