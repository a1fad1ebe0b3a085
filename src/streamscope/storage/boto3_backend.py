"""Single attempts against S3 through boto3 (the fallback backend), with botocore's retries switched off."""

from __future__ import annotations

import datetime as _dt
import os
import threading
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
from streamscope._core.optional import require
from streamscope._core.protocols import ObjectMeta
from streamscope.storage.redact import redact

__all__ = ["Boto3Backend", "map_error"]


_AUTH_CODES = {
    "AccessDenied",
    "InvalidAccessKeyId",
    "SignatureDoesNotMatch",
    "InvalidToken",
    "ExpiredToken",
    "TokenRefreshRequired",
    "AllAccessDisabled",
    "InvalidClientTokenId",
    "UnrecognizedClientException",
}
_TRANSIENT_CODES = {"SlowDown", "InternalError", "ServiceUnavailable", "RequestTimeout", "Throttling", "503"}


def map_error(exc: BaseException, where: str, op: str) -> StorageError:
    """Translate a botocore/urllib3 exception into the streamscope error tree (message names ``where``)."""
    if isinstance(exc, StorageError):
        return exc
    from botocore import exceptions as bx

    status: int | None = None
    code: str | None = None
    err: StorageError
    if isinstance(exc, bx.ClientError):
        resp = getattr(exc, "response", {}) or {}
        code = str((resp.get("Error") or {}).get("Code") or "") or None
        status = (resp.get("ResponseMetadata") or {}).get("HTTPStatusCode")
        message = str((resp.get("Error") or {}).get("Message") or "")
        base = redact(f"{op} {where!r} failed: {code or ''} (HTTP {status}) {message}".strip())
        if code == "PreconditionFailed" or status == 412:
            err = ObjectChangedError(redact(f"{op} {where!r}: the object changed during the download (ETag mismatch)"))
        elif code in ("NoSuchBucket",):
            err = ObjectNotFoundError(redact(f"{op} {where!r} failed: the bucket does not exist (NoSuchBucket)"))
        elif code in ("NoSuchKey", "404", "NotFound") or status == 404:
            err = ObjectNotFoundError(redact(f"{op} {where!r} failed: no such object ({code or 404})"))
        elif code in _AUTH_CODES or status in (401, 403):
            err = StorageAuthError(
                redact(
                    f"{op} {where!r} was refused: {code or status} - check the credentials in storage_options / "
                    "AWS_* environment"
                )
            )
        elif code == "InvalidRange" or status == 416:
            err = InvalidRangeError(base)
        elif code in _TRANSIENT_CODES or (status is not None and (status >= 500 or status == 429)):
            err = TransientStorageError(base)
        else:
            err = StorageError(base)
    elif isinstance(exc, bx.NoCredentialsError | bx.PartialCredentialsError):
        err = StorageAuthError(redact(f"{op} {where!r}: no usable credentials ({type(exc).__name__})"))
    elif isinstance(exc, bx.SSLError):
        err = StorageError(
            redact(f"{op} {where!r}: TLS verification failed (set AWS_CA_BUNDLE or storage_options['verify']): {exc}")
        )
    elif isinstance(exc, bx.ConnectTimeoutError | bx.ReadTimeoutError):
        err = StorageTimeoutError(redact(f"{op} {where!r} timed out: {exc}"))
    elif isinstance(exc, bx.IncompleteReadError | bx.ResponseStreamingError):
        err = TruncatedBodyError(redact(f"{op} {where!r}: the response body was cut short: {exc}"))
    elif isinstance(exc, bx.EndpointConnectionError | bx.ConnectionClosedError):
        err = StorageConnectionError(redact(f"{op} {where!r}: cannot connect to the endpoint: {exc}"))
    elif type(exc).__name__ == "ResponseParserError":  # botocore.parsers, not botocore.exceptions
        err = StorageResponseError(redact(f"{op} {where!r}: the server's answer is not valid S3 XML: {exc}"))
    elif isinstance(exc, bx.HTTPClientError | ConnectionError):
        err = StorageConnectionError(redact(f"{op} {where!r}: connection dropped: {exc}"))
    elif isinstance(exc, TimeoutError):
        err = StorageTimeoutError(redact(f"{op} {where!r} timed out: {exc}"))
    else:
        err = StorageError(redact(f"{op} {where!r} failed ({type(exc).__name__}): {exc}"))
    err.status = status  # type: ignore[attr-defined]
    err.code = code  # type: ignore[attr-defined]
    err.url = where  # type: ignore[attr-defined]
    return err


# One boto3 Session per process and session arguments: a new Session loads botocore's service models again
# (0.1-0.3 s per client); clients of one Session share them.
_SESSIONS: dict[tuple[tuple[str, str], ...], tuple[int, Any]] = {}
_SESSION_LOCK = threading.Lock()
# where a Session finds profiles and credentials: a change makes a new Session
_SESSION_ENV = ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_CONFIG_FILE", "AWS_SHARED_CREDENTIALS_FILE")


def _reset_sessions_in_child() -> None:
    global _SESSION_LOCK
    _SESSION_LOCK = threading.Lock()
    _SESSIONS.clear()


os.register_at_fork(after_in_child=_reset_sessions_in_child)


def _session(session_kwargs: dict[str, Any] | None) -> Any:
    """This process's boto3 Session for ``session_kwargs`` (call with ``_SESSION_LOCK`` held)."""
    import boto3

    key = tuple(sorted((str(k), repr(v)) for k, v in (session_kwargs or {}).items())) + tuple(
        (var, os.environ.get(var, "")) for var in _SESSION_ENV
    )
    hit = _SESSIONS.get(key)
    if hit is not None and hit[0] == os.getpid():
        return hit[1]
    session = boto3.session.Session(**(session_kwargs or {}))
    _SESSIONS[key] = (os.getpid(), session)
    return session


def _mtime(value: Any) -> float | None:
    return value.timestamp() if isinstance(value, _dt.datetime) else None


class Boto3Backend:
    """Single attempts against one bucket through a boto3 client built in this process.

    Args:
        bucket: The bucket.
        client_kwargs: Arguments of ``boto3.session.Session.client("s3", ...)`` (endpoint, credentials, verify).
        session_kwargs: Arguments of ``boto3.session.Session`` (e.g. ``profile_name``).
    """

    name = "boto3"

    def __init__(
        self, bucket: str, client_kwargs: dict[str, Any], session_kwargs: dict[str, Any] | None = None
    ) -> None:
        feature = f"S3 storage through boto3 (bucket {bucket!r})"
        require("boto3", feature, "s3")
        Config = require("botocore.config", feature, "s3").Config  # noqa: N806

        cfg = Config(
            connect_timeout=float(config.get("storage_connect_timeout")),
            read_timeout=float(config.get("storage_read_timeout")),
            retries={"total_max_attempts": 1, "mode": "standard"},
            max_pool_connections=32,
        )
        kwargs = dict(client_kwargs)
        user_cfg = kwargs.pop("config", None)
        if user_cfg is not None:
            cfg = cfg.merge(user_cfg)
            cfg = cfg.merge(Config(retries={"total_max_attempts": 1, "mode": "standard"}))
        self.bucket = bucket
        try:
            with _SESSION_LOCK:  # a boto3 Session is not thread-safe; its clients are
                self._client = _session(session_kwargs).client("s3", config=cfg, **kwargs)
        except Exception as exc:
            raise StorageError(redact(f"cannot configure a boto3 client for s3://{bucket}: {exc}")) from None

    def _run(self, op: str, where: str, fn: Any) -> Any:
        try:
            return fn()
        except StorageError:
            raise
        except Exception as exc:
            raise map_error(exc, where, op) from None

    def get(self, path: str, where: str) -> tuple[bytes, int | None]:
        def fn() -> tuple[bytes, int | None]:
            resp = self._client.get_object(Bucket=self.bucket, Key=path)
            data = resp["Body"].read()
            return data, resp.get("ContentLength")

        return self._run("get", where, fn)

    def get_range(self, path: str, start: int, end: int, where: str) -> bytes:
        def fn() -> bytes:
            resp = self._client.get_object(Bucket=self.bucket, Key=path, Range=f"bytes={start}-{end - 1}")
            return resp["Body"].read()

        return self._run("get_range", where, fn)

    def head(self, path: str, where: str) -> ObjectMeta:
        def fn() -> ObjectMeta:
            resp = self._client.head_object(Bucket=self.bucket, Key=path)
            return ObjectMeta(
                key=path, size=int(resp["ContentLength"]), mtime=_mtime(resp.get("LastModified")), etag=resp.get("ETag")
            )

        return self._run("head", where, fn)

    def put(self, path: str, data: bytes, where: str) -> None:
        self._run("put", where, lambda: self._client.put_object(Bucket=self.bucket, Key=path, Body=data))

    def put_file(self, path: str, src: str, where: str) -> None:
        from boto3.s3.transfer import TransferConfig

        self._run(
            "upload_file",
            where,
            lambda: self._client.upload_file(src, self.bucket, path, Config=TransferConfig(use_threads=False)),
        )

    def list(self, prefix: str, where: str) -> list[ObjectMeta]:
        def fn() -> list[ObjectMeta]:
            out: list[ObjectMeta] = []
            paginator = self._client.get_paginator("list_objects_v2")
            for page in paginator.paginate(Bucket=self.bucket, Prefix=prefix):
                for item in page.get("Contents", []) or []:
                    out.append(
                        ObjectMeta(
                            key=item["Key"],
                            size=int(item["Size"]),
                            mtime=_mtime(item.get("LastModified")),
                            etag=item.get("ETag"),
                        )
                    )
            return out

        return self._run("list", where, fn)

    def delete(self, path: str, where: str) -> None:
        self._run("delete", where, lambda: self._client.delete_object(Bucket=self.bucket, Key=path))

    def download(
        self,
        path: str,
        out: IO[bytes],
        where: str,
        start: int = 0,
        if_match: str | None = None,
        on_meta: Callable[[int | None, str | None], None] | None = None,
    ) -> tuple[int, int | None]:
        def fn() -> tuple[int, int | None]:
            kwargs: dict[str, Any] = {"Bucket": self.bucket, "Key": path}
            if start:
                kwargs["Range"] = f"bytes={start}-"
            if if_match:
                kwargs["IfMatch"] = if_match
            resp = self._client.get_object(**kwargs)
            length = resp.get("ContentLength")
            size = length if not start else _total_from_content_range(resp.get("ContentRange"))
            if on_meta is not None:
                on_meta(size, resp.get("ETag"))
            body = resp["Body"]
            written = 0
            for block in body.iter_chunks(chunk_size=256 << 10):  # small: a cut-off body loses little
                out.write(block)
                written += len(block)
            return written, length

        return self._run("download_file", where, fn)


def _total_from_content_range(value: Any) -> int | None:
    """``bytes a-b/total`` -> total."""
    try:
        return int(str(value).rsplit("/", 1)[1])
    except (IndexError, ValueError):
        return None
