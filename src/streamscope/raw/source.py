"""Where the raw files live: a local folder or an object-store prefix.

:class:`Source` turns the ``input_dir`` the user gave into

* ``root``: the canonical string LitData calls the *storage path* (an absolute, resolved local path, or the
  URL as given without a trailing ``/``). The index records file paths as ``root + "/" + key`` and the local
  cache folder is ``md5(root)``, so both engines find each other's index.
* a lazily opened :class:`~streamscope._core.protocols.ObjectStore`, one per process: a store opened in a
  parent is never used in a forked child, and pickling drops it.

Remote URLs go through ``streamscope.storage.open_store``. Local folders use :class:`LocalFolderStore`, a
small read-mostly store; it stays until the storage layer's local adapter is on main.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from streamscope._core.errors import RawSchemeError, RawSourceNotFoundError, StorageError
from streamscope._core.protocols import ObjectMeta, ObjectStore

REMOTE_SCHEMES: tuple[str, ...] = ("s3", "gs", "azure", "az", "abfs", "r2")
"""URL schemes raw-file streaming accepts besides local paths (``file://`` is local)."""


def scheme_of(input_dir: str) -> str:
    """The URL scheme of ``input_dir`` ('' for local paths, including Windows drive letters)."""
    scheme = urlparse(input_dir).scheme
    if len(scheme) == 1 and scheme.isalpha():  # "C:\\data" parses with scheme "c"
        return ""
    return scheme.lower()


def canonical_root(input_dir: str | os.PathLike[str]) -> str:
    """LitData's storage path for ``input_dir``: the resolved absolute path, or the URL without trailing ``/``.

    Raises:
        RawSchemeError: the scheme is neither local nor one of :data:`REMOTE_SCHEMES`.
    """
    text = os.fspath(input_dir)
    scheme = scheme_of(text)
    if scheme == "file":
        text = urlparse(text).path
        scheme = ""
    if scheme == "":
        return str(Path(text).expanduser().absolute().resolve())
    if scheme not in REMOTE_SCHEMES:
        raise RawSchemeError(
            f"unsupported input_dir scheme {scheme!r} in {text!r}; supported: local paths, file://, "
            + ", ".join(f"{s}://" for s in REMOTE_SCHEMES)
        )
    return text.rstrip("/")


class LocalFolderStore:
    """An :class:`ObjectStore` over a local folder (keys are ``/``-separated paths under ``url``)."""

    def __init__(self, root: str) -> None:
        self.url = root

    def _path(self, key: str) -> str:
        return os.path.join(self.url, *key.split("/")) if key else self.url

    def get(self, key: str) -> bytes:
        """Read a whole file."""
        try:
            with open(self._path(key), "rb") as f:
                return f.read()
        except FileNotFoundError:
            raise RawSourceNotFoundError(f"file {self._path(key)!r} does not exist (any more)") from None

    def get_range(self, key: str, start: int, end: int) -> bytes:
        """Read bytes ``[start, end)`` of a file."""
        try:
            with open(self._path(key), "rb") as f:
                f.seek(start)
                return f.read(max(0, end - start))
        except FileNotFoundError:
            raise RawSourceNotFoundError(f"file {self._path(key)!r} does not exist (any more)") from None

    def head(self, key: str) -> ObjectMeta:
        """Size and mtime of a file."""
        try:
            st = os.stat(self._path(key))
        except FileNotFoundError:
            raise RawSourceNotFoundError(f"file {self._path(key)!r} does not exist (any more)") from None
        return ObjectMeta(key=key, size=st.st_size, mtime=st.st_mtime)

    def exists(self, key: str) -> bool:
        """True when ``key`` is a file."""
        return os.path.isfile(self._path(key))

    def put(self, key: str, data: bytes) -> None:
        """Write a file atomically (tmp + rename)."""
        dest = self._path(key)
        os.makedirs(os.path.dirname(dest) or ".", exist_ok=True)
        tmp = f"{dest}.tmp.{os.getpid()}.{uuid.uuid4().hex}"
        try:
            with open(tmp, "wb") as f:
                f.write(data)
            os.replace(tmp, dest)
        finally:
            if os.path.exists(tmp):
                os.remove(tmp)

    def list(self, prefix: str = "") -> Iterator[ObjectMeta]:
        """Every file under ``prefix``, depth-first in sorted order (symlinked folders are not followed)."""
        base = self._path(prefix.rstrip("/"))
        stack = [base]
        while stack:
            folder = stack.pop()
            try:
                entries = sorted(os.scandir(folder), key=lambda e: e.name, reverse=True)
            except FileNotFoundError:
                continue
            for entry in entries:
                if entry.is_dir(follow_symlinks=False):
                    stack.append(entry.path)
                elif entry.is_file():
                    rel = os.path.relpath(entry.path, self.url).replace(os.sep, "/")
                    st = entry.stat()
                    yield ObjectMeta(key=rel, size=st.st_size, mtime=st.st_mtime)

    def delete(self, key: str) -> None:
        """Remove a file (missing is fine)."""
        try:
            os.remove(self._path(key))
        except FileNotFoundError:
            pass

    def download_file(self, key: str, dest: str) -> int:
        """Copy a file to ``dest`` atomically; return its size."""
        data = self.get(key)
        LocalFolderStore(os.path.dirname(dest) or ".").put(os.path.basename(dest), data)
        return len(data)

    def upload_file(self, src: str, key: str) -> None:
        """Copy local file ``src`` to ``key``."""
        with open(src, "rb") as f:
            self.put(key, f.read())

    def local_path(self, key: str) -> str | None:
        """The file's path on disk."""
        return self._path(key)


def _open_remote(root: str, storage_options: dict[str, Any]) -> ObjectStore:
    try:
        from streamscope.storage import open_store  # type: ignore[attr-defined]
    except ImportError:  # the storage layer's open_store is not on this branch yet
        raise RawSchemeError(
            f"cannot open {root!r}: remote storage needs streamscope.storage.open_store, which is not available"
        ) from None
    return open_store(root, storage_options)


class Source:
    """One dataset's input location; opens its store lazily, once per process."""

    def __init__(self, input_dir: Any, storage_options: dict[str, Any] | None = None) -> None:
        if hasattr(input_dir, "url") and hasattr(input_dir, "path"):  # a Dir (ours or LitData's): URL first
            input_dir = input_dir.url or input_dir.path
        if not isinstance(input_dir, (str, os.PathLike)):
            raise RawSchemeError(f"input_dir must be a path, URL or Dir, got {type(input_dir).__name__}")
        self.input_dir = os.fspath(input_dir)
        self.root = canonical_root(self.input_dir)
        self.scheme = scheme_of(self.root)
        self.is_remote = self.scheme != ""
        self.storage_options = dict(storage_options or {})
        self._store: ObjectStore | None = None
        self._store_pid: int | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_store"] = None
        state["_store_pid"] = None
        return state

    def store(self) -> ObjectStore:
        """This process's store for the source (never one inherited across fork)."""
        pid = os.getpid()
        if self._store is None or self._store_pid != pid:
            if self.is_remote:
                self._store = _open_remote(self.root, self.storage_options)
            else:
                self._store = LocalFolderStore(self.root)
            self._store_pid = pid
        return self._store

    def check_exists(self) -> None:
        """Raise :class:`RawSourceNotFoundError` when a local input folder is missing or not a folder."""
        if self.is_remote:
            return
        if not os.path.exists(self.root):
            raise RawSourceNotFoundError(f"input_dir {self.root!r} does not exist")
        if not os.path.isdir(self.root):
            raise RawSourceNotFoundError(f"input_dir {self.root!r} is not a folder")

    def path_of(self, key: str) -> str:
        """The full path/URL the index records for ``key``."""
        if self.is_remote:
            return f"{self.root}/{key}"
        return os.path.join(self.root, *key.split("/"))

    def key_of(self, path: str) -> str:
        """The store key of an index path; raises when the path is not under this source."""
        if self.is_remote:
            prefix = self.root + "/"
            if path.startswith(prefix):
                return path[len(prefix) :]
        else:
            prefix = self.root.rstrip(os.sep) + os.sep
            if path.startswith(prefix):
                return path[len(prefix) :].replace(os.sep, "/")
        raise RawSourceNotFoundError(f"indexed file {path!r} is not under input_dir {self.root!r}")

    def list_files(self) -> Iterator[ObjectMeta]:
        """Every object under the source (keys relative to the root)."""
        self.check_exists()
        try:
            yield from self.store().list("")
        except RawSourceNotFoundError:
            raise
        except StorageError as exc:
            raise RawSourceNotFoundError(f"cannot list input_dir {self.root!r}: {exc}") from exc
