"""Where the raw files live: a local folder or an object-store prefix.

:class:`Source` turns the ``input_dir`` the user gave into

* ``root``: the canonical string LitData calls the *storage path* (an absolute, resolved local path, or the
  URL as given without a trailing ``/``). The index records file paths as ``root + "/" + key`` and the local
  cache folder is ``md5(root)``, so both engines find each other's index.
* ``local:/dir`` is a local folder read as remote storage (its meaning for optimized datasets): files are
  fetched through the store like an object-store prefix, and ``cache_files`` copies them into the cache.
  LitData's raw dataset refuses the scheme; its root is ``local:`` + the resolved absolute path.
* a lazily opened :class:`~streamscope._core.protocols.ObjectStore`, one per process: a store opened in a
  parent is never used in a forked child, and pickling drops it.

Every access goes through ``streamscope.storage.open_store`` (its retry policy, error mapping and tracing);
raw adds only the hot path for fast local files (:meth:`~streamscope.raw.fetch.Fetcher.fetch_now`).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from streamscope._core.errors import RawSchemeError, RawSourceNotFoundError, StorageError
from streamscope._core.protocols import ObjectMeta, ObjectStore
from streamscope.storage import open_store

__all__ = ["REMOTE_SCHEMES", "Source", "canonical_root", "scheme_of"]


REMOTE_SCHEMES: tuple[str, ...] = ("s3", "gs", "azure", "az", "r2", "hf")
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
    if scheme == "local":
        folder = text[len("local:") :]
        if not folder:
            raise RawSchemeError(f"input_dir {text!r} names no folder after 'local:'")
        return "local:" + str(Path(folder).expanduser().absolute().resolve())
    if scheme not in REMOTE_SCHEMES:
        raise RawSchemeError(
            f"unsupported input_dir scheme {scheme!r} in {text!r}; supported: local paths, file://, local:, "
            + ", ".join(f"{s}://" for s in REMOTE_SCHEMES)
        )
    return text.rstrip("/")


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
        self._data_store: ObjectStore | None = None
        self.prefer_obstore = False

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_store"] = None
        state["_store_pid"] = None
        state["_data_store"] = None
        state["prefer_obstore"] = False
        return state

    def store(self) -> ObjectStore:
        """This process's store for the source (never one inherited across fork)."""
        pid = os.getpid()
        if self._store is None or self._store_pid != pid:
            self._store = open_store(self.root, self.storage_options)
            self._store_pid = pid
            self._data_store = None
        return self._store

    def can_prefer_obstore(self) -> bool:
        """True when data reads of this source may switch the main process to the obstore S3 backend."""
        return self.scheme in ("s3", "r2") and "backend" not in self.storage_options

    def data_store(self) -> ObjectStore:
        """The store for file reads: :meth:`store`, or once :attr:`prefer_obstore` is set, an obstore one.

        The storage layer keeps obstore out of the main process by default (a process that started obstore
        cannot fork workers that use it). A main process that streams data itself (``num_workers=0``) gets
        the faster client once ``prefer_obstore`` is set; workers it forks later fall back to boto3 (the
        storage layer warns and traces ``backend_fallback``).
        """
        base = self.store()
        if not self.prefer_obstore:
            return base
        if self._data_store is None:
            self._data_store = open_store(self.root, {**self.storage_options, "backend": "obstore"})
        return self._data_store

    def check_exists(self) -> None:
        """Raise :class:`RawSourceNotFoundError` when a local input folder is missing or not a folder."""
        if self.is_remote and self.scheme != "local":
            return
        folder = self.root[len("local:") :] if self.scheme == "local" else self.root
        if not os.path.exists(folder):
            raise RawSourceNotFoundError(f"input_dir {self.root!r} does not exist")
        if not os.path.isdir(folder):
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
        except StorageError as exc:
            raise RawSourceNotFoundError(f"cannot list input_dir {self.root!r}: {exc}") from exc
