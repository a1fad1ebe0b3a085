"""User-registered downloaders by URL prefix (LitData's ``register_downloader``), served as object stores.

``register_downloader("myproto://", MyDownloader)`` makes :func:`streamscope.storage.open_store` return a
read-only :class:`DownloaderStore` for every URL starting with ``myproto://``, so ``StreamingDataset`` and the
chunk cache fetch through ``MyDownloader.download_file(remote_path, local_path)``, as LitData's reader does.
A downloader class follows LitData's interface: constructed as ``cls(remote_dir, cache_dir, chunks,
storage_options, session_options=...)``; ``download_file`` must create ``local_path``; ``download_bytes`` is
optional (the default downloads the file and slices it).

The built-in schemes (``s3://``, ``gs://``, ``azure://``, ``r2://``, ``hf://``, ``local:``) count as registered:
registering one of them needs ``overwrite=True`` (then the user class serves that scheme), as in LitData.

Publishing is atomic here even when the user's ``download_file`` is not: it writes to a private temporary path
that is renamed into place once complete.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
from collections.abc import Iterator, Mapping
from multiprocessing.util import Finalize
from typing import Any

from streamscope._core.errors import ObjectNotFoundError, StorageError
from streamscope._core.protocols import ObjectMeta
from streamscope.events import kinds
from streamscope.storage.redact import redact_url

__all__ = [
    "BUILTIN_PREFIXES",
    "AzureDownloader",
    "Downloader",
    "DownloaderStore",
    "GCPDownloader",
    "HFDownloader",
    "LocalDownloader",
    "LocalDownloaderWithCache",
    "R2Downloader",
    "S3Downloader",
    "StoreDownloader",
    "get_downloader",
    "has_custom",
    "register_downloader",
    "registered_downloaders",
    "store_for",
    "unregister_downloader",
]

_LOCK = threading.Lock()
_CUSTOM: dict[str, type] = {}  # prefix -> user downloader class (registration order)
_REMOVED: set[str] = set()  # built-in prefixes unregistered by the user


class Downloader:
    """Base class of chunk downloaders (LitData's ``litdata.streaming.downloader.Downloader`` interface).

    Args:
        remote_dir: the dataset's URL.
        cache_dir: the local directory chunks are downloaded to.
        chunks: index.json chunk entries (for ``download_chunk_from_index``).
        storage_options: backend options.
    """

    def __init__(
        self,
        remote_dir: str,
        cache_dir: str,
        chunks: list[dict[str, Any]],
        storage_options: dict | None = None,
        **kwargs: Any,
    ) -> None:
        self._remote_dir = remote_dir
        self._cache_dir = cache_dir
        self._chunks = chunks
        self._storage_options = storage_options or {}

    def download_chunk_from_index(self, chunk_index: int) -> None:
        """Download chunk ``chunk_index`` of ``chunks`` into ``cache_dir``."""
        name = self._chunks[chunk_index]["filename"]
        # the download kind's fields (chunk, url), as the chunk cache's downloads (the file was once `file=name`)
        with kinds.download(chunk=chunk_index, url=redact_url(os.path.join(self._remote_dir, name))):
            self.download_file(os.path.join(self._remote_dir, name), os.path.join(self._cache_dir, name))

    def download_chunk_bytes_from_index(self, chunk_index: int, offset: int, length: int) -> bytes:
        """``length`` bytes at ``offset`` of chunk ``chunk_index``."""
        name = self._chunks[chunk_index]["filename"]
        remote, local = os.path.join(self._remote_dir, name), os.path.join(self._cache_dir, name)
        return self.download_bytes(remote, offset, length, local)

    def download_file(self, remote_chunkpath: str, local_chunkpath: str) -> None:
        """Create ``local_chunkpath`` with the content of ``remote_chunkpath`` (subclasses implement it)."""
        raise NotImplementedError(f"{type(self).__name__} does not implement download_file")

    def download_bytes(self, remote_chunkpath: str, offset: int, length: int, local_chunkpath: str) -> bytes:
        """Bytes ``[offset, offset+length)``; by default the whole file is downloaded first."""
        if not os.path.exists(local_chunkpath):
            self.download_file(remote_chunkpath, local_chunkpath)
        with open(local_chunkpath, "rb") as f:
            f.seek(offset)
            return f.read(length)

    def download_fileobj(self, remote_filepath: str, fileobj: Any) -> None:
        """Write the remote file into ``fileobj`` (through a temporary local file by default)."""
        with tempfile.TemporaryDirectory(prefix="streamscope-dl-") as tmp:
            local = os.path.join(tmp, "obj")
            self.download_file(remote_filepath, local)
            with open(local, "rb") as f:
                shutil.copyfileobj(f, fileobj)


class StoreDownloader(Downloader):
    """A :class:`Downloader` over streamscope's own store for a URL (what ``get_downloader`` gives for built-ins)."""

    def __init__(
        self,
        remote_dir: str,
        cache_dir: str,
        chunks: list[dict[str, Any]],
        storage_options: dict | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(remote_dir, cache_dir, chunks, storage_options)
        from streamscope.storage import open_store  # noqa: PLC0415

        self._store = open_store(remote_dir, self._storage_options, kwargs.get("session_options"))

    def _key(self, remote_path: str) -> str:
        root = str(self._remote_dir).rstrip("/")
        if not remote_path.startswith(root + "/"):
            raise StorageError(f"{remote_path!r} is not under {self._store.url!r}")
        return remote_path[len(root) + 1 :]

    def download_file(self, remote_chunkpath: str, local_chunkpath: str) -> None:
        """Copy the object to ``local_chunkpath`` (atomic)."""
        if os.path.exists(local_chunkpath):
            return
        self._store.download_file(self._key(remote_chunkpath), local_chunkpath)

    def download_bytes(self, remote_chunkpath: str, offset: int, length: int, local_chunkpath: str) -> bytes:
        """A ranged read."""
        return self._store.get_range(self._key(remote_chunkpath), offset, offset + length)


class S3Downloader(StoreDownloader):
    """``s3://`` through streamscope's S3 client (LitData's class name)."""


class R2Downloader(StoreDownloader):
    """``r2://`` (Cloudflare R2, S3-compatible) through streamscope's S3 client."""


class GCPDownloader(StoreDownloader):
    """``gs://`` through streamscope's Google Cloud Storage backend."""


class AzureDownloader(StoreDownloader):
    """``azure://`` through streamscope's Azure Blob backend."""


class HFDownloader(StoreDownloader):
    """``hf://datasets/...`` through streamscope's Hugging Face Hub store (``storage_options``: ``token``,
    ``endpoint``; the ``hf`` extra)."""


class LocalDownloader(Downloader):
    """Copies a file of the local filesystem into the cache (atomic; nothing to do when it is already there)."""

    def download_file(self, remote_filepath: str, local_filepath: str) -> None:
        """Copy ``remote_filepath`` to ``local_filepath`` unless they are the same file or the copy exists."""
        if not os.path.exists(remote_filepath):
            raise FileNotFoundError(f"The provided remote_path doesn't exist: {remote_filepath}")
        if remote_filepath == local_filepath or os.path.exists(local_filepath):
            return
        tmp = f"{local_filepath}.tmp.{os.getpid()}.{threading.get_ident()}"
        try:
            shutil.copyfile(remote_filepath, tmp)
            os.replace(tmp, local_filepath)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)


class LocalDownloaderWithCache(LocalDownloader):
    """``local:/path``: a local directory read as if it were remote (chunks copied into the cache)."""

    def download_file(self, remote_filepath: str, local_filepath: str) -> None:
        """Copy the file named after the ``local:`` prefix."""
        if remote_filepath.startswith("local:"):
            remote_filepath = remote_filepath[len("local:") :]
        super().download_file(remote_filepath, local_filepath)


# what get_downloader builds for the built-in schemes (LitData's classes, by name)
_BUILTIN_CLASSES: dict[str, type[Downloader]] = {
    "s3://": S3Downloader,
    "gs://": GCPDownloader,
    "azure://": AzureDownloader,
    "hf://": HFDownloader,
    "local:": LocalDownloaderWithCache,
    "r2://": R2Downloader,
}
BUILTIN_PREFIXES = tuple(_BUILTIN_CLASSES)


def register_downloader(prefix: str, downloader_cls: type, overwrite: bool = False) -> None:
    """Serve URLs starting with ``prefix`` with ``downloader_cls`` (LitData's signature).

    Raises:
        ValueError: ``prefix`` is already registered (a built-in scheme included) and ``overwrite`` is False.
    """
    if not isinstance(prefix, str) or not prefix:
        raise ValueError(f"prefix must be a non-empty string, got {prefix!r}")
    if not isinstance(downloader_cls, type):
        raise ValueError(f"downloader_cls must be a class, got {downloader_cls!r}")
    with _LOCK:
        taken = prefix in _CUSTOM or (prefix in BUILTIN_PREFIXES and prefix not in _REMOVED)
        if taken and not overwrite:
            raise ValueError(f"Downloader with prefix {prefix} already registered.")
        _CUSTOM[prefix] = downloader_cls
        _REMOVED.discard(prefix)


def unregister_downloader(prefix: str) -> None:
    """Forget the downloader of ``prefix`` (a built-in scheme falls back to streamscope's own backend).

    Raises:
        KeyError: nothing is registered for ``prefix`` (as LitData's ``del``).
    """
    with _LOCK:
        if prefix in _CUSTOM:
            del _CUSTOM[prefix]
        elif prefix in BUILTIN_PREFIXES and prefix not in _REMOVED:
            _REMOVED.add(prefix)
        else:
            raise KeyError(prefix)


def registered_downloaders() -> dict[str, type]:
    """The user-registered classes by prefix (a copy)."""
    with _LOCK:
        return dict(_CUSTOM)


def has_custom() -> bool:
    """True when any user downloader is registered (a dict check: ``open_store`` calls it every time)."""
    return bool(_CUSTOM)


def _custom_for(url: str) -> type | None:
    with _LOCK:
        for prefix, cls in _CUSTOM.items():
            if url.startswith(prefix):
                return cls
    return None


def get_downloader(
    remote_dir: str,
    cache_dir: str,
    chunks: list[dict[str, Any]],
    storage_options: dict | None = None,
    session_options: dict | None = None,
) -> Downloader:
    """The downloader for ``remote_dir``: a registered class for its prefix, else the built-in scheme's class
    (``S3Downloader`` for ``s3://``, ...), else a :class:`StoreDownloader` over streamscope's store."""
    url = str(remote_dir)
    cls = _custom_for(url)
    if cls is None:
        with _LOCK:
            cls = next((c for p, c in _BUILTIN_CLASSES.items() if url.startswith(p) and p not in _REMOVED), None)
    if cls is None:
        cls = StoreDownloader
    return cls(remote_dir, cache_dir, chunks, storage_options, session_options=session_options)


class DownloaderStore:
    """A read-only object store backed by a user downloader class (what ``open_store`` returns for its prefix).

    Args:
        url: the dataset URL (the downloader's ``remote_dir``).
        downloader_cls: the registered class.
        storage_options: passed to the downloader.
        session_options: passed to the downloader.
    """

    def __init__(
        self,
        url: str,
        downloader_cls: type,
        storage_options: Mapping[str, Any] | None = None,
        session_options: Mapping[str, Any] | None = None,
    ) -> None:
        self.url = url.rstrip("/")
        self._cls = downloader_cls
        self._storage_options = dict(storage_options or {})
        self._session_options = dict(session_options or {})
        self._downloader: Any = None
        self._pid = -1

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_downloader"] = None  # rebuilt in each process, like the built-in clients
        state["_pid"] = -1
        return state

    def _dl(self) -> Any:
        if self._downloader is None or self._pid != os.getpid():
            scratch = tempfile.mkdtemp(prefix="streamscope-dl-")
            # The user class gets a cache_dir (LitData's signature) it rarely writes to; removed when this store is
            # collected or its process ends. multiprocessing's Finalize, not atexit: DataLoader workers leave through
            # os._exit, after multiprocessing has run its finalizers.
            Finalize(self, shutil.rmtree, args=(scratch,), kwargs={"ignore_errors": True}, exitpriority=0)
            self._downloader = self._cls(
                self.url, scratch, [], self._storage_options, session_options=self._session_options
            )
            self._pid = os.getpid()
        return self._downloader

    def _remote(self, key: str) -> str:
        return f"{self.url}/{key.lstrip('/')}"

    def download_file(self, key: str, dest: str) -> int:
        """Fetch ``key`` with the user downloader into ``dest`` atomically; returns its size."""
        os.makedirs(os.path.dirname(dest) or ".", exist_ok=True)
        tmp = f"{dest}.dl.{os.getpid()}.{threading.get_ident()}"
        with kinds.download(
            url=redact_url(self._remote(key))
        ) as f:  # the object's URL (once `key=`, `url=` the store's)
            try:
                self._dl().download_file(self._remote(key), tmp)
                if not os.path.exists(tmp):
                    raise ObjectNotFoundError(
                        f"{self._cls.__name__}.download_file({self._remote(key)!r}, ...) created no file"
                    )
                os.replace(tmp, dest)
            except FileNotFoundError as exc:
                if isinstance(exc, ObjectNotFoundError):
                    raise
                raise ObjectNotFoundError(f"{self._remote(key)!r}: {exc}") from exc
            finally:
                if os.path.exists(tmp):
                    os.unlink(tmp)
            size = os.path.getsize(dest)
            f["bytes"] = size
        return size

    def get(self, key: str) -> bytes:
        """The whole object."""
        with tempfile.TemporaryDirectory(prefix="streamscope-dl-") as tmp:
            path = os.path.join(tmp, "obj")
            self.download_file(key, path)
            with open(path, "rb") as f:
                return f.read()

    def get_range(self, key: str, start: int, end: int) -> bytes:
        """Bytes ``[start, end)`` (through the downloader's ``download_bytes``)."""
        with tempfile.TemporaryDirectory(prefix="streamscope-dl-") as tmp:
            return bytes(self._dl().download_bytes(self._remote(key), start, end - start, os.path.join(tmp, "obj")))

    def head(self, key: str) -> ObjectMeta:
        """Size of ``key`` (downloads it: LitData downloaders have no metadata call)."""
        return ObjectMeta(key, len(self.get(key)))

    def exists(self, key: str) -> bool:
        """True when the downloader can fetch ``key``."""
        try:
            self.get(key)
        except (ObjectNotFoundError, FileNotFoundError):
            return False
        return True

    def local_path(self, key: str) -> str | None:
        """None: objects are always downloaded."""
        return None

    def _read_only(self, what: str) -> StorageError:
        return StorageError(f"{self.url!r} is served by {self._cls.__name__} (a downloader): it cannot {what}")

    def put(self, key: str, data: bytes) -> None:  # noqa: D102
        raise self._read_only("write")

    def upload_file(self, src: str, key: str) -> None:  # noqa: D102
        raise self._read_only("write")

    def delete(self, key: str) -> None:  # noqa: D102
        raise self._read_only("delete")

    def list(self, prefix: str = "") -> Iterator[ObjectMeta]:  # noqa: D102
        raise self._read_only("list")

    async def get_async(self, key: str) -> bytes:  # noqa: D102
        import asyncio  # noqa: PLC0415

        return await asyncio.to_thread(self.get, key)

    async def get_range_async(self, key: str, start: int, end: int) -> bytes:  # noqa: D102
        import asyncio  # noqa: PLC0415

        return await asyncio.to_thread(self.get_range, key, start, end)

    async def head_async(self, key: str) -> ObjectMeta:  # noqa: D102
        import asyncio  # noqa: PLC0415

        return await asyncio.to_thread(self.head, key)

    async def download_file_async(self, key: str, dest: str) -> int:  # noqa: D102
        import asyncio  # noqa: PLC0415

        return await asyncio.to_thread(self.download_file, key, dest)


def store_for(
    url: str, storage_options: Mapping[str, Any] | None, session_options: Mapping[str, Any] | None
) -> DownloaderStore | None:
    """A :class:`DownloaderStore` when a user downloader is registered for ``url``'s prefix, else None."""
    cls = _custom_for(url)
    return None if cls is None else DownloaderStore(url, cls, storage_options, session_options)
