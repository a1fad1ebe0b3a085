"""The protocol methods every network store shares: retries, length checks, tracing, per-process clients.

A network store is a :class:`RemoteStore` plus a :class:`Backend` that performs single attempts (obstore,
boto3, or plain HTTP). ``RemoteStore`` turns keys into object paths, runs each attempt through
:func:`streamscope.storage.retry.call`, checks that the bytes received match what the server announced,
and publishes downloaded files atomically.

Clients are built lazily per process: the backend is cached together with the pid that built it and
rebuilt when the pid changes (a fork), and it is dropped when the store is pickled (spawn).

Every error of a store with an explicit endpoint (``endpoint_url`` of an S3-compatible server, an emulator's
address) names it, as ``scheme://host:port`` right after the object's URL: "get 's3://b/ds/index.json' at
endpoint http://10.0.0.5:9000: cannot connect ...". The object's ``s3://`` URL alone does not say which
server was unreachable. One place (:meth:`RemoteStore._call`) does it for every backend and operation.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from typing import IO, Any, Protocol, TypeVar
from urllib.parse import urlsplit

from streamscope._core.errors import (
    InvalidRangeError,
    ObjectChangedError,
    ObjectNotFoundError,
    StorageError,
    TruncatedBodyError,
    UnsupportedURLError,
)
from streamscope._core.protocols import ObjectMeta
from streamscope.storage import retry
from streamscope.storage.async_twins import AsyncTwins
from streamscope.storage.local import _silent_unlink, tmp_path_for
from streamscope.storage.redact import redact
from streamscope.storage.url import StoreURL, join_key, normalize_key

__all__ = ["Backend", "RemoteStore", "endpoint_label"]


T = TypeVar("T")
_DEFAULT_PORTS = {"http": 80, "https": 443}


def endpoint_label(endpoint: str | None) -> str | None:
    """``scheme://host:port`` of an endpoint URL (the port filled in from the scheme); no credentials, path or
    query. None when there is no endpoint or it is not a URL."""
    if not endpoint or not isinstance(endpoint, str):
        return None
    try:
        parts = urlsplit(endpoint.strip())
        host, port = parts.hostname, parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    if not scheme or not host:
        return None
    port = port or _DEFAULT_PORTS.get(scheme)
    host = f"[{host}]" if ":" in host else host
    return f"{scheme}://{host}" + (f":{port}" if port else "")


class Backend(Protocol):
    """Single attempts against one bucket; every failure is a mapped :class:`StorageError`.

    Paths are full object paths inside the bucket; ``where`` is the redacted URL used in messages.
    """

    name: str

    def get(self, path: str, where: str) -> tuple[bytes, int | None]:
        """Whole object and the size the server announced (None if it did not)."""
        ...

    def get_range(self, path: str, start: int, end: int, where: str) -> bytes: ...

    def head(self, path: str, where: str) -> ObjectMeta: ...

    def put(self, path: str, data: bytes, where: str) -> None: ...

    def put_file(self, path: str, src: str, where: str) -> None: ...

    def list(self, prefix: str, where: str) -> list[ObjectMeta]:
        """Objects whose full path starts with the string ``prefix``."""
        ...

    def delete(self, path: str, where: str) -> None: ...

    def download(
        self,
        path: str,
        out: IO[bytes],
        where: str,
        start: int = 0,
        if_match: str | None = None,
        on_meta: Callable[[int | None, str | None], None] | None = None,
    ) -> tuple[int, int | None]:
        """Stream bytes ``[start, end of object)`` into ``out``, only if the ETag still is ``if_match``.

        Calls ``on_meta(object size, etag)`` once the response headers arrived (before the body), and
        returns (bytes written, bytes the server announced for this response).
        """
        ...


class RemoteStore(AsyncTwins):
    """An :class:`~streamscope._core.protocols.ObjectStore` over a network :class:`Backend`.

    Args:
        parsed: The store's URL.
        make_backend: Builds a backend in the calling process (called lazily, once per pid).
    """

    read_only = False

    def __init__(self, parsed: StoreURL, make_backend: Callable[[], Backend], endpoint: str | None = None) -> None:
        self._parsed = parsed
        self.url: str = parsed.url
        #: ``scheme://host:port`` of an explicit endpoint, named in every error (None: the service's default)
        self.endpoint: str | None = endpoint_label(endpoint)
        self._make_backend = make_backend
        self._backend_obj: Backend | None = None
        self._backend_pid = -1
        self._lock = threading.Lock()
        self._lock_pid = os.getpid()

    # -- process-local client ----------------------------------------------------------------------

    def _backend(self) -> Backend:
        pid = os.getpid()
        b = self._backend_obj
        if b is not None and self._backend_pid == pid:
            return b
        if self._lock_pid != pid:  # a lock inherited through fork may be held by a thread that is gone
            self._lock = threading.Lock()
            self._lock_pid = pid
        with self._lock:
            if self._backend_obj is None or self._backend_pid != pid:
                self._backend_obj = self._make_backend()
                self._backend_pid = pid
            return self._backend_obj

    @property
    def backend_name(self) -> str:
        """Which client serves this store in this process (e.g. ``obstore``, ``boto3``, ``http``)."""
        return self._backend().name

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_backend_obj"] = None
        state["_backend_pid"] = -1
        state["_lock"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()
        self._lock_pid = os.getpid()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.url!r})"

    # -- helpers -----------------------------------------------------------------------------------

    def _path(self, key: str) -> str:
        return join_key(self._parsed.prefix, key, self.url)

    def _where(self, key: str) -> str:
        return f"{self.url.rstrip('/')}/{normalize_key(key, self.url)}"

    def _rel(self, path: str) -> str:
        prefix = self._parsed.prefix
        return path[len(prefix) + 1 :] if prefix else path

    def _call(self, op: str, where: str, attempt: Callable[[dict[str, Any]], T], **fields: Any) -> T:
        """:func:`retry.call`, with the endpoint named in the error it raises (see the module doc)."""
        try:
            return retry.call(op, where, attempt, **fields)
        except StorageError as exc:
            named = self._at_endpoint(exc, where)
            if named is exc:
                raise
            raise named from exc.__cause__

    def _at_endpoint(self, exc: StorageError, where: str) -> StorageError:
        """``exc`` with this store's endpoint named after ``where`` in its message (same class and attributes)."""
        ep = self.endpoint
        msg = str(exc)
        if ep is None or where.startswith(ep):
            return exc
        quoted = repr(where)
        label = f"{quoted} at endpoint {ep}"
        if label in msg:
            return exc
        msg = msg.replace(quoted, label, 1) if quoted in msg else f"{msg} (endpoint {ep})"
        try:
            named = type(exc)(redact(msg))
        except Exception:  # a subclass with another signature: keep it, with the message replaced
            exc.args = (redact(msg),)
            return exc
        named.__dict__.update(exc.__dict__)
        return named

    # -- ObjectStore -------------------------------------------------------------------------------

    def get(self, key: str) -> bytes:
        """The whole object; retried on transient errors; a short body is an error, never a result."""
        path, where = self._path(key), self._where(key)

        def attempt(f: dict[str, Any]) -> bytes:
            data, announced = self._backend().get(path, where)
            f["bytes"] = len(data)
            if announced is not None and announced != len(data):
                raise TruncatedBodyError(f"got {len(data)} of {announced} bytes from {where!r}")
            return data

        return self._call("get", where, attempt)

    def get_range(self, key: str, start: int, end: int) -> bytes:
        """Bytes ``[start, end)``; the range must lie inside the object."""
        path, where = self._path(key), self._where(key)
        if start < 0 or end < start:
            raise InvalidRangeError(f"invalid byte range [{start}, {end}) for {where!r}")
        if start == end:
            size = self.head(key).size
            if end > size:
                raise InvalidRangeError(f"byte range [{start}, {end}) reaches past the end of {where!r} ({size} bytes)")
            return b""

        def attempt(f: dict[str, Any]) -> bytes:
            data = self._backend().get_range(path, start, end, where)
            f["bytes"] = len(data)
            if len(data) != end - start:
                if len(data) < end - start:
                    size = self._backend().head(path, where).size
                    if size < end:
                        raise InvalidRangeError(
                            f"byte range [{start}, {end}) reaches past the end of {where!r} ({size} bytes)"
                        )
                raise TruncatedBodyError(
                    f"got {len(data)} of {end - start} bytes of range [{start}, {end}) from {where!r}"
                )
            return data

        return self._call("get_range", where, attempt, start=start, end=end)

    def head(self, key: str) -> ObjectMeta:
        """Size (and mtime/etag when known) of the object."""
        path, where = self._path(key), self._where(key)

        def attempt(f: dict[str, Any]) -> ObjectMeta:
            meta = self._backend().head(path, where)
            return ObjectMeta(key=normalize_key(key), size=meta.size, mtime=meta.mtime, etag=meta.etag)

        return self._call("head", where, attempt)

    def exists(self, key: str) -> bool:
        """True when the object exists."""
        try:
            self.head(key)
        except ObjectNotFoundError:
            return False
        return True

    def put(self, key: str, data: bytes) -> None:
        """Write the object (a single atomic PUT)."""
        path, where = self._path(key), self._where(key)

        def attempt(f: dict[str, Any]) -> None:
            self._backend().put(path, data, where)
            f["bytes"] = len(data)

        self._call("put", where, attempt)

    def upload_file(self, src: str, key: str) -> None:
        """Upload local file ``src`` to ``key``."""
        path, where = self._path(key), self._where(key)
        if not os.path.isfile(src):
            raise ObjectNotFoundError(f"cannot upload {src!r} to {where!r}: no such file")

        def attempt(f: dict[str, Any]) -> None:
            self._backend().put_file(path, src, where)
            f["bytes"] = os.path.getsize(src)

        self._call("upload_file", where, attempt)

    def list(self, prefix: str = "") -> Iterator[ObjectMeta]:
        """Every object whose key starts with ``prefix`` (plain string prefix), sorted by key."""
        prefix = prefix.lstrip("/")
        if any(seg in (".", "..") for seg in prefix.split("/")):
            raise UnsupportedURLError(f"list prefix {prefix!r} is not a plain relative prefix (store {self.url})")
        base = self._parsed.prefix
        full = f"{base}/{prefix}" if base else prefix
        if base and not prefix:
            full = f"{base}/"
        where = self.url.rstrip("/") + (f"/{prefix}" if prefix else "/")

        def attempt(f: dict[str, Any]) -> list[ObjectMeta]:
            found = self._backend().list(full, where)
            f["items"] = len(found)
            return found

        found = self._call("list", where, attempt)
        out = [ObjectMeta(key=self._rel(m.key), size=m.size, mtime=m.mtime, etag=m.etag) for m in found]
        out.sort(key=lambda m: m.key)
        return iter(out)

    def delete(self, key: str) -> None:
        """Delete the object; deleting a missing object is not an error."""
        path, where = self._path(key), self._where(key)

        def attempt(f: dict[str, Any]) -> None:
            self._backend().delete(path, where)

        self._call("delete_object", where, attempt)

    def download_file(self, key: str, dest: str) -> int:
        """Stream the object to ``dest`` through a temporary file; publish it only when complete.

        A retry after a cut-off body resumes where the bytes stopped (a ranged GET with ``If-Match`` on the
        ETag of the first response), so a reset near the end of a large chunk does not fetch it again; if
        the object changed meanwhile, the download starts over.
        """
        path, where = self._path(key), self._where(key)
        os.makedirs(os.path.dirname(os.path.abspath(dest)), exist_ok=True)
        tmp = tmp_path_for(dest)
        progress: dict[str, Any] = {"done": 0, "size": None, "etag": None}

        def on_meta(size: int | None, etag: str | None) -> None:
            if progress["done"] == 0:
                progress["size"], progress["etag"] = size, etag

        def attempt(f: dict[str, Any]) -> int:
            start = progress["done"]
            size = progress["size"]
            f["offset"] = start
            written = 0
            try:
                if start and size is not None and start >= size:
                    pass  # every byte arrived before the last attempt failed
                else:
                    with open(tmp, "ab" if start else "wb") as out:
                        written, _announced = self._backend().download(
                            path, out, where, start=start, if_match=progress["etag"] if start else None, on_meta=on_meta
                        )
            except ObjectChangedError:
                progress.update(done=0, size=None, etag=None)
                raise
            except StorageError:
                resumable = progress["size"] is not None and progress["etag"] and os.path.exists(tmp)
                progress["done"] = os.path.getsize(tmp) if resumable else 0
                f["bytes"] = max(0, progress["done"] - start)
                raise
            except OSError as exc:
                progress["done"] = 0
                raise StorageError(
                    f"cannot write {dest!r} while downloading {where!r}: {exc.strerror or exc}"
                ) from None
            f["bytes"] = written
            total = start + written
            size = progress["size"]
            if size is not None and total != size:
                progress["done"] = total if total < size and progress["etag"] else 0
                raise TruncatedBodyError(f"got {total} of {size} bytes from {where!r}")
            os.replace(tmp, dest)
            return total

        try:
            return self._call("download_file", where, attempt)
        finally:
            _silent_unlink(tmp)

    def local_path(self, key: str) -> str | None:
        """Network objects have no local path."""
        return None
