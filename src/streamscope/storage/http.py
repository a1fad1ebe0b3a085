"""Read-only ``http(s)://`` stores over the standard library's ``http.client``.

Keys are appended to the URL path. Supported: ``get``, ``get_range`` (``Range`` requests; a server that
ignores ``Range`` and answers 200 is sliced locally), ``head``, ``exists``, ``download_file``. Writing and
listing raise :class:`UnsupportedOperationError` (plain HTTP has no portable way to do either).

``storage_options``: ``headers`` (a dict sent with every request, e.g. ``Authorization``; values are
registered as secrets), ``verify`` (False or a CA bundle path; env ``SSL_CERT_FILE``/``AWS_CA_BUNDLE`` are
honoured too). Connections are opened per request, so the store is fork-safe by construction.
"""

from __future__ import annotations

import email.utils
import http.client
import os
import socket
import ssl
from collections.abc import Callable, Iterator, Mapping
from typing import IO, Any
from urllib.parse import quote, urlsplit

from streamscope._core import config
from streamscope._core.errors import (
    ConfigError,
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
    UnsupportedOperationError,
)
from streamscope._core.protocols import ObjectMeta
from streamscope.storage.redact import redact, register_secret
from streamscope.storage.remote import RemoteStore
from streamscope.storage.url import StoreURL

__all__ = ["HTTPStore"]


def _total(content_range: str | None) -> int | None:
    try:
        return int(str(content_range).rsplit("/", 1)[1])
    except (IndexError, ValueError):
        return None


def _status_error(status: int, reason: str, where: str, op: str) -> StorageError:
    err: StorageError
    if status == 412:
        err = ObjectChangedError(redact(f"{op} {where!r}: the object changed during the download (ETag mismatch)"))
    elif status == 404 or status == 410:
        err = ObjectNotFoundError(redact(f"{op} {where!r} failed: no such object (HTTP {status})"))
    elif status in (401, 403):
        err = StorageAuthError(redact(f"{op} {where!r} was refused (HTTP {status} {reason})"))
    elif status == 416:
        err = InvalidRangeError(redact(f"{op} {where!r}: range not satisfiable (HTTP 416)"))
    elif status >= 500 or status == 429:
        err = TransientStorageError(redact(f"{op} {where!r} failed: HTTP {status} {reason}"))
    else:
        err = StorageError(redact(f"{op} {where!r} failed: HTTP {status} {reason}"))
    err.status = status  # type: ignore[attr-defined]
    err.url = where  # type: ignore[attr-defined]
    return err


def _io_error(exc: BaseException, where: str, op: str) -> StorageError:
    err: StorageError
    if isinstance(exc, ssl.SSLCertVerificationError):
        err = StorageError(redact(f"{op} {where!r}: TLS verification failed (set SSL_CERT_FILE or verify=): {exc}"))
    elif isinstance(exc, socket.timeout | TimeoutError):
        err = StorageTimeoutError(redact(f"{op} {where!r} timed out: {exc}"))
    elif isinstance(exc, http.client.IncompleteRead):
        err = TruncatedBodyError(
            redact(f"{op} {where!r}: the response body was cut short ({len(exc.partial)} bytes received)")
        )
    elif isinstance(exc, http.client.RemoteDisconnected | ConnectionError):
        err = StorageConnectionError(redact(f"{op} {where!r}: connection dropped or refused: {exc}"))
    elif isinstance(exc, http.client.HTTPException):
        err = StorageResponseError(redact(f"{op} {where!r}: the server's answer is not valid HTTP: {exc!r}"))
    elif isinstance(exc, OSError):
        err = StorageConnectionError(redact(f"{op} {where!r}: cannot reach the server: {exc}"))
    else:
        err = StorageError(redact(f"{op} {where!r} failed ({type(exc).__name__}): {exc}"))
    err.url = where  # type: ignore[attr-defined]
    return err


class _HTTPBackend:
    name = "http"

    def __init__(self, scheme: str, netloc: str, headers: dict[str, str], ctx: ssl.SSLContext | None) -> None:
        self.scheme = scheme
        self.netloc = netloc
        self.headers = headers
        self.ctx = ctx

    def _conn(self) -> http.client.HTTPConnection:
        parts = urlsplit(f"//{self.netloc}")
        host, port = parts.hostname or "", parts.port
        timeout = float(config.get("storage_read_timeout"))
        if self.scheme == "https":
            return http.client.HTTPSConnection(host, port, timeout=timeout, context=self.ctx)
        return http.client.HTTPConnection(host, port, timeout=timeout)

    def _request(
        self, method: str, path: str, where: str, op: str, headers: dict[str, str] | None = None
    ) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
        conn = self._conn()
        try:
            conn.timeout = float(config.get("storage_connect_timeout"))
            conn.connect()
            if conn.sock is not None:
                conn.sock.settimeout(float(config.get("storage_read_timeout")))
            conn.request(method, "/" + quote(path, safe="/~-._"), headers={**self.headers, **(headers or {})})
            resp = conn.getresponse()
        except Exception as exc:
            conn.close()
            raise _io_error(exc, where, op) from None
        if resp.status >= 400:
            try:
                resp.read(65536)
            except Exception:
                pass
            conn.close()
            raise _status_error(resp.status, resp.reason, where, op)
        return conn, resp

    def _read_all(self, conn: http.client.HTTPConnection, resp: http.client.HTTPResponse, where: str, op: str) -> bytes:
        try:
            return resp.read()
        except Exception as exc:
            raise _io_error(exc, where, op) from None
        finally:
            conn.close()

    @staticmethod
    def _length(resp: http.client.HTTPResponse) -> int | None:
        raw = resp.getheader("Content-Length")
        try:
            return int(raw) if raw is not None else None
        except ValueError:
            return None

    def get(self, path: str, where: str) -> tuple[bytes, int | None]:
        conn, resp = self._request("GET", path, where, "get")
        announced = self._length(resp)
        return self._read_all(conn, resp, where, "get"), announced

    def get_range(self, path: str, start: int, end: int, where: str) -> bytes:
        conn, resp = self._request("GET", path, where, "get_range", {"Range": f"bytes={start}-{end - 1}"})
        data = self._read_all(conn, resp, where, "get_range")
        if resp.status == 200:  # server ignored Range
            return data[start:end]
        return data

    def head(self, path: str, where: str) -> ObjectMeta:
        conn, resp = self._request("HEAD", path, where, "head")
        conn.close()
        size = self._length(resp)
        if size is None:
            raise StorageResponseError(redact(f"head {where!r}: the server did not send Content-Length"))
        lm = resp.getheader("Last-Modified")
        mtime = None
        if lm:
            try:
                mtime = email.utils.parsedate_to_datetime(lm).timestamp()
            except (TypeError, ValueError):
                mtime = None
        return ObjectMeta(key=path, size=size, mtime=mtime, etag=resp.getheader("ETag"))

    def download(
        self,
        path: str,
        out: IO[bytes],
        where: str,
        start: int = 0,
        if_match: str | None = None,
        on_meta: Callable[[int | None, str | None], None] | None = None,
    ) -> tuple[int, int | None]:
        headers: dict[str, str] = {}
        if start:
            headers["Range"] = f"bytes={start}-"
        if if_match:
            headers["If-Match"] = if_match
        conn, resp = self._request("GET", path, where, "download_file", headers)
        announced = self._length(resp)
        skip = 0
        if start and resp.status == 200:  # the server ignored Range: drop what we already have
            skip = start
            announced = announced - start if announced is not None else None
        if on_meta is not None:
            total = self._length(resp) if resp.status == 200 else _total(resp.getheader("Content-Range"))
            on_meta(total, resp.getheader("ETag"))
        written = 0
        try:
            while True:
                block = resp.read(1 << 20)
                if not block:
                    break
                if skip:
                    cut = min(skip, len(block))
                    block, skip = block[cut:], skip - cut
                out.write(block)
                written += len(block)
        except OSError as exc:
            if isinstance(exc, StorageError):
                raise
            raise _io_error(exc, where, "download_file") from None
        except http.client.HTTPException as exc:
            raise _io_error(exc, where, "download_file") from None
        finally:
            conn.close()
        return written, announced

    def _read_only(self, op: str, where: str) -> UnsupportedOperationError:
        return UnsupportedOperationError(f"{op} {where!r}: http(s) stores are read-only and cannot list")

    def put(self, path: str, data: bytes, where: str) -> None:
        raise self._read_only("put", where)

    def put_file(self, path: str, src: str, where: str) -> None:
        raise self._read_only("upload_file", where)

    def list(self, prefix: str, where: str) -> list[ObjectMeta]:
        raise self._read_only("list", where)

    def delete(self, path: str, where: str) -> None:
        raise self._read_only("delete", where)


class HTTPStore(RemoteStore):
    """A read-only store over plain HTTP(S); see the module docstring."""

    read_only = True

    def __init__(self, parsed: StoreURL, storage_options: Mapping[str, Any] | None = None) -> None:
        opts = dict(storage_options or {})
        headers = opts.pop("headers", None) or {}
        if not isinstance(headers, Mapping):
            raise ConfigError(f"storage_options['headers'] must be a mapping (store {parsed.url!r})")
        self._headers = {str(k): str(v) for k, v in headers.items()}
        for value in self._headers.values():
            register_secret(value)
            if " " in value:
                register_secret(value.split(" ", 1)[1])
        verify = opts.pop("verify", True)
        unknown = sorted(set(opts) - {"backend"})
        if unknown:
            raise ConfigError(
                f"unknown storage_options for {parsed.url!r}: {', '.join(unknown)} (known: headers, verify)"
            )
        self._insecure = verify is False
        ca = verify if isinstance(verify, str) else (os.environ.get("SSL_CERT_FILE") or os.environ.get("AWS_CA_BUNDLE"))
        if ca and not os.path.isfile(ca):
            raise ConfigError(f"CA bundle {ca!r} (for {parsed.url!r}) does not exist")
        self._ca = ca
        super().__init__(parsed, self._build)

    def _build(self) -> _HTTPBackend:
        ctx: ssl.SSLContext | None = None
        if self._parsed.scheme == "https":
            ctx = ssl.create_default_context(cafile=self._ca) if self._ca else ssl.create_default_context()
            if self._insecure:
                ctx.check_hostname = False
                ctx.verify_mode = ssl.CERT_NONE
        return _HTTPBackend(self._parsed.scheme, self._parsed.bucket, self._headers, ctx)

    def list(self, prefix: str = "") -> Iterator[ObjectMeta]:
        """Plain HTTP cannot list: raises :class:`UnsupportedOperationError`."""
        raise UnsupportedOperationError(f"list {self.url!r}: http(s) stores are read-only and cannot list")
