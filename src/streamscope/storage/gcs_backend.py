"""Single attempts against Google Cloud Storage through google-cloud-storage (the JSON API), retries off.

This is LitData's own GCS client: ``storage_options`` are ``google.cloud.storage.Client`` arguments
(``project``, ``credentials``, ``client_options``, ...), and ``STORAGE_EMULATOR_HOST`` points it at an
emulator with anonymous access, as it does for LitData. obstore's GCS client speaks the XML API instead,
which GCS emulators implement only in part; :mod:`streamscope.storage.cloud` picks between the two.

Clients hold a ``requests`` session: :class:`~streamscope.storage.remote.RemoteStore` builds one per
process, so a forked DataLoader worker never shares its parent's connections.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Callable
from typing import IO, Any

from streamscope._core import config
from streamscope._core.errors import (
    InvalidRangeError,
    ObjectChangedError,
    ObjectNotFoundError,
    StorageAuthError,
    StorageConnectionError,
    StorageError,
    StorageResponseError,
    StorageTimeoutError,
    TransientStorageError,
    TruncatedBodyError,
)
from streamscope._core.protocols import ObjectMeta
from streamscope.storage.redact import redact

__all__ = ["GoogleBackend", "NAME", "available", "map_error"]


NAME = "google-cloud-storage"


def available() -> bool:
    """True when google-cloud-storage can be imported."""
    import importlib.util

    try:
        return importlib.util.find_spec("google.cloud.storage") is not None
    except (ImportError, ValueError):
        return False


def _status_of(exc: BaseException) -> int | None:
    code = getattr(exc, "code", None)  # google.api_core.exceptions.GoogleAPICallError
    if isinstance(code, int):
        return code
    response = getattr(exc, "response", None)  # google.resumable_media.common.InvalidResponse
    status = getattr(response, "status_code", None)
    return status if isinstance(status, int) else None


def _short(exc: BaseException) -> str:
    return redact(" ".join(str(exc).split())[:600])


def map_error(exc: BaseException, where: str, op: str) -> StorageError:
    """Translate a google-cloud-storage / google-auth / requests exception into the streamscope error tree."""
    if isinstance(exc, StorageError):
        return exc
    name = type(exc).__name__
    module = type(exc).__module__ or ""
    status = _status_of(exc)
    detail = _short(exc)
    lowered = detail.lower()
    err: StorageError
    if status == 412 or name == "PreconditionFailed":
        err = ObjectChangedError(
            redact(f"{op} {where!r}: the object changed during the download (generation mismatch)")
        )
    elif status == 404 or name == "NotFound":
        if "bucket does not exist" in lowered or "no such bucket" in lowered:
            err = ObjectNotFoundError(redact(f"{op} {where!r} failed: the bucket does not exist (404)"))
            err.missing_bucket = True  # type: ignore[attr-defined]
        else:
            err = ObjectNotFoundError(redact(f"{op} {where!r} failed: no such object (404)"))
        status = 404
    elif status in (401, 403) or name in ("Forbidden", "Unauthorized"):
        err = StorageAuthError(
            redact(
                f"{op} {where!r} was refused: HTTP {status} - check the credentials in storage_options or the environment"
            )
        )
    elif module.startswith("google.auth"):  # DefaultCredentialsError, RefreshError, TransportError
        err = StorageAuthError(
            redact(
                f"{op} {where!r}: no usable Google credentials ({name}: {detail}) - pass storage_options "
                "'credentials' or 'service_account', or ask for anonymous access (skip_signature) for public buckets and emulators"
            )
        )
    elif status == 416:
        err = InvalidRangeError(redact(f"{op} {where!r} failed: the range is not satisfiable (HTTP 416)"))
    elif status is not None and (status >= 500 or status == 429 or status == 408):
        err = TransientStorageError(redact(f"{op} {where!r} failed (HTTP {status}): ") + detail)
    elif name == "DataCorruption" or name == "ChunkedEncodingError" or "incompleteread" in lowered:
        err = TruncatedBodyError(redact(f"{op} {where!r}: the response body was cut short or damaged: ") + detail)
    elif name in ("ConnectTimeout", "ReadTimeout", "Timeout") or isinstance(exc, TimeoutError):
        err = StorageTimeoutError(redact(f"{op} {where!r} timed out: ") + detail)
    elif name == "SSLError" or "certificate" in lowered:
        err = StorageError(redact(f"{op} {where!r}: TLS verification failed: ") + detail)
    elif name == "ConnectionError" and ("refused" in lowered or "failed to establish" in lowered):
        err = StorageConnectionError(redact(f"{op} {where!r}: cannot connect to the endpoint: ") + detail)
    elif name == "ConnectionError" or isinstance(exc, ConnectionError):
        err = StorageConnectionError(redact(f"{op} {where!r}: connection dropped: ") + detail)
    elif name in ("InvalidResponse", "JSONDecodeError", "ValueError") and module.startswith(
        ("google", "requests", "json")
    ):
        err = StorageResponseError(redact(f"{op} {where!r}: the server's answer is not valid GCS JSON: ") + detail)
    elif status is not None:
        err = StorageError(redact(f"{op} {where!r} failed (HTTP {status}): ") + detail)
    else:
        err = StorageError(redact(f"{op} {where!r} failed ({name}): ") + detail)
    err.status = status  # type: ignore[attr-defined]
    err.code = None  # type: ignore[attr-defined]
    err.url = where  # type: ignore[attr-defined]
    return err


def _meta(blob: Any, key: str) -> ObjectMeta:
    updated = blob.updated
    mtime = updated.timestamp() if isinstance(updated, _dt.datetime) else None
    return ObjectMeta(key=key, size=int(blob.size or 0), mtime=mtime, etag=blob.etag)


class _Counting:
    """A file-like wrapper that counts what is written through it (the download's progress)."""

    def __init__(self, out: IO[bytes]) -> None:
        self._out = out
        self.written = 0

    def write(self, data: bytes) -> int:
        self._out.write(data)
        self.written += len(data)
        return len(data)

    def flush(self) -> None:
        self._out.flush()


class GoogleBackend:
    """Single attempts against one bucket through a ``google.cloud.storage.Client`` built in this process.

    Args:
        bucket: The bucket.
        make_client: Builds the client (called once, here).
    """

    name = NAME

    def __init__(self, bucket: str, make_client: Callable[[], Any]) -> None:
        try:
            self._client = make_client()
        except StorageError:
            raise
        except Exception as exc:
            raise map_error(exc, f"gs://{bucket}", "configure a client for") from None
        self._bucket = self._client.bucket(bucket)
        self._timeout = (float(config.get("storage_connect_timeout")), float(config.get("storage_read_timeout")))

    def _run(self, op: str, where: str, fn: Callable[[], Any]) -> Any:
        try:
            return fn()
        except StorageError:
            raise
        except Exception as exc:
            raise map_error(exc, where, op) from None

    def get(self, path: str, where: str) -> tuple[bytes, int | None]:
        # checksum="auto": the library compares the body with the object's crc32c/md5, so a cut-off or
        # damaged body is an error here rather than wrong bytes
        def fn() -> tuple[bytes, int | None]:
            return self._bucket.blob(path).download_as_bytes(retry=None, timeout=self._timeout), None

        return self._run("get", where, fn)

    def get_range(self, path: str, start: int, end: int, where: str) -> bytes:
        def fn() -> bytes:
            blob = self._bucket.blob(path)
            return blob.download_as_bytes(start=start, end=end - 1, retry=None, timeout=self._timeout)

        return self._run("get_range", where, fn)

    def head(self, path: str, where: str) -> ObjectMeta:
        def fn() -> ObjectMeta:
            blob = self._bucket.get_blob(path, retry=None, timeout=self._timeout)
            if blob is None:
                raise ObjectNotFoundError(redact(f"head {where!r} failed: no such object (404)"))
            return _meta(blob, path)

        return self._run("head", where, fn)

    def put(self, path: str, data: bytes, where: str) -> None:
        self._run(
            "put",
            where,
            lambda: self._bucket.blob(path).upload_from_string(
                data, content_type="application/octet-stream", retry=None, timeout=self._timeout
            ),
        )

    def put_file(self, path: str, src: str, where: str) -> None:
        self._run(
            "upload_file",
            where,
            lambda: self._bucket.blob(path).upload_from_filename(
                src, content_type="application/octet-stream", retry=None, timeout=self._timeout
            ),
        )

    def list(self, prefix: str, where: str) -> list[ObjectMeta]:
        def fn() -> list[ObjectMeta]:
            blobs = self._client.list_blobs(self._bucket, prefix=prefix or None, retry=None, timeout=self._timeout)
            return [_meta(b, b.name) for b in blobs if str(b.name).startswith(prefix)]

        return self._run("list", where, fn)

    def delete(self, path: str, where: str) -> None:
        try:
            self._run("delete", where, lambda: self._bucket.blob(path).delete(retry=None, timeout=self._timeout))
        except ObjectNotFoundError as exc:
            if getattr(exc, "missing_bucket", False):
                raise  # deleting a missing object is not an error; a missing bucket is

    def download(
        self,
        path: str,
        out: IO[bytes],
        where: str,
        start: int = 0,
        if_match: str | None = None,
        on_meta: Callable[[int | None, str | None], None] | None = None,
    ) -> tuple[int, int | None]:
        """The JSON API gives the object's size and generation in a metadata request; the media request
        that follows is pinned to that generation, so a replaced object fails (412) instead of mixing bytes."""

        def fn() -> tuple[int, int | None]:
            blob = self._bucket.get_blob(path, retry=None, timeout=self._timeout)
            if blob is None:
                raise ObjectNotFoundError(redact(f"download_file {where!r} failed: no such object (404)"))
            if if_match is not None and blob.etag != if_match:
                raise ObjectChangedError(redact(f"download_file {where!r}: the object changed during the download"))
            size = int(blob.size or 0)
            if on_meta is not None:
                on_meta(size, blob.etag)
            counter = _Counting(out)
            if start < size:
                blob.download_to_file(
                    counter,
                    start=start or None,
                    if_generation_match=blob.generation,
                    checksum="auto" if not start else None,
                    retry=None,
                    timeout=self._timeout,
                )
            return counter.written, size - start

        return self._run("download_file", where, fn)
