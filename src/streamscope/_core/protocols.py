"""Narrow interfaces shared across layers. Implementations live in their own layers.

``ObjectStore`` is what every storage backend (local path, s3://, gs://, azure://, http(s)://) provides;
``streamscope.storage.open_store(url, storage_options)`` returns one rooted at ``url``. Keys are relative
to that root and use ``/``. Ranges are half-open: ``get_range(key, start, end)`` returns bytes
``[start, end)``. Errors are :class:`~streamscope._core.errors.StorageError` subclasses whose messages name
the URL with credentials removed.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

__all__ = ["ObjectMeta", "ObjectStore"]


@dataclass(frozen=True)
class ObjectMeta:
    """What a store knows about one object."""

    key: str  # relative to the store's root, "/"-separated
    size: int  # bytes
    mtime: float | None = None  # unix seconds, when the store reports it
    etag: str | None = None


@runtime_checkable
class ObjectStore(Protocol):
    """A place that holds objects (files), rooted at ``url``."""

    url: str

    def get(self, key: str) -> bytes: ...

    def get_range(self, key: str, start: int, end: int) -> bytes: ...

    def head(self, key: str) -> ObjectMeta: ...

    def exists(self, key: str) -> bool: ...

    def put(self, key: str, data: bytes) -> None: ...

    def list(self, prefix: str = "") -> Iterator[ObjectMeta]: ...

    def delete(self, key: str) -> None: ...

    def download_file(self, key: str, dest: str) -> int:
        """Write the object to local path ``dest`` atomically (tmp + rename); return its size in bytes."""
        ...

    def upload_file(self, src: str, key: str) -> None:
        """Upload local file ``src`` to ``key``."""
        ...

    def local_path(self, key: str) -> str | None:
        """The object's path on local disk when the store is a local directory (read in place), else None."""
        ...

    # Async twins: same semantics (retries, length checks, tracing), awaitable without blocking the loop.

    async def get_async(self, key: str) -> bytes: ...

    async def get_range_async(self, key: str, start: int, end: int) -> bytes: ...

    async def head_async(self, key: str) -> ObjectMeta: ...

    async def download_file_async(self, key: str, dest: str) -> int: ...
