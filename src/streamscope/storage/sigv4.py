"""Whole-object GETs against an S3-compatible endpoint with the standard library (SigV4 signed).

Why: building a boto3 client costs 0.1-0.3 s (botocore parses its service models), and the first thing a
dataset does is read ``index.json``; obstore would be as quick but must stay out of a process that forks
DataLoader workers. So the boto3 backend of a store with an explicit endpoint and explicit credentials
serves :meth:`get` (small objects: the index) from here and builds the boto3 client only for the rest.

Scope (anything else goes to boto3): path-style addressing on an explicit ``http(s)://host[:port]`` endpoint,
static credentials (key, secret, optional session token), no proxy in the environment. Every failure is
mapped to the same error tree as boto3's (:func:`streamscope.storage.boto3_backend.map_error`).
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import hmac
import http.client
import os
import re
import ssl
import threading
import urllib.parse
from collections.abc import Callable
from typing import IO, Any

from streamscope._core import config
from streamscope._core.errors import (
    StorageConnectionError,
    StorageError,
    StorageResponseError,
    StorageTimeoutError,
    TruncatedBodyError,
)
from streamscope._core.optional import require
from streamscope._core.protocols import ObjectMeta
from streamscope.storage.redact import redact

__all__ = ["LightGetBackend", "SignedGetter", "eligible", "sign"]


_PROXY_ENV = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy")
_CODE_RE = re.compile(rb"<Code>([^<]{1,64})</Code>")
_MSG_RE = re.compile(rb"<Message>([^<]{0,300})</Message>")


def eligible(endpoint: str | None, access_key: str | None, secret_key: str | None) -> bool:
    """True when :class:`SignedGetter` can serve this store (else boto3 serves everything)."""
    if not (endpoint and access_key and secret_key) or not config.get("storage_s3_light_get"):
        return False
    if any(os.environ.get(v) for v in _PROXY_ENV):
        return False  # boto3 honours proxies; this client does not
    u = urllib.parse.urlsplit(endpoint)
    return u.scheme in ("http", "https") and bool(u.hostname) and u.path in ("", "/") and not u.query


def _hmac(key: bytes, msg: str) -> bytes:
    return hmac.new(key, msg.encode("utf-8"), hashlib.sha256).digest()


def sign(
    method: str,
    host: str,
    path: str,
    region: str,
    access_key: str,
    secret_key: str,
    token: str | None = None,
    now: _dt.datetime | None = None,
) -> dict[str, str]:
    """SigV4 headers of a body-less request to ``path`` (already URI-encoded) on ``host`` (``host[:port]``)."""
    t = now or _dt.datetime.now(_dt.timezone.utc)
    amz_date = t.strftime("%Y%m%dT%H%M%SZ")
    day = amz_date[:8]
    payload = "UNSIGNED-PAYLOAD"
    headers = {"host": host, "x-amz-content-sha256": payload, "x-amz-date": amz_date}
    if token:
        headers["x-amz-security-token"] = token
    names = sorted(headers)
    canonical = "\n".join([method, path, "", "".join(f"{n}:{headers[n]}\n" for n in names), ";".join(names), payload])
    scope = f"{day}/{region}/s3/aws4_request"
    to_sign = "\n".join(["AWS4-HMAC-SHA256", amz_date, scope, hashlib.sha256(canonical.encode()).hexdigest()])
    key = _hmac(_hmac(_hmac(_hmac(f"AWS4{secret_key}".encode(), day), region), "s3"), "aws4_request")
    signature = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
    headers["Authorization"] = (
        f"AWS4-HMAC-SHA256 Credential={access_key}/{scope}, SignedHeaders={';'.join(names)}, Signature={signature}"
    )
    return headers


class SignedGetter:
    """GET whole objects of one bucket on an explicit endpoint, one connection per request.

    Args:
        endpoint: ``http(s)://host[:port]``.
        bucket: The bucket (path-style addressing).
        region: Signing region.
        access_key, secret_key, token: Static credentials.
        ca_file: CA bundle for https, or None for the system's.
        insecure: Do not verify the server's certificate (``verify=False``).
    """

    def __init__(
        self,
        endpoint: str,
        bucket: str,
        region: str,
        access_key: str,
        secret_key: str,
        token: str | None = None,
        ca_file: str | None = None,
        insecure: bool = False,
    ) -> None:
        u = urllib.parse.urlsplit(endpoint)
        self._https = u.scheme == "https"
        self._host = u.hostname or ""
        self._port = u.port
        self._netloc = u.netloc.rsplit("@", 1)[-1]
        self._bucket = bucket
        self._region = region
        self._creds = (access_key, secret_key, token)
        self._ctx: ssl.SSLContext | None = None
        if self._https:
            self._ctx = ssl.create_default_context(cafile=ca_file)
            if insecure:
                self._ctx.check_hostname = False
                self._ctx.verify_mode = ssl.CERT_NONE

    def _connect(self) -> http.client.HTTPConnection:
        timeout = float(config.get("storage_connect_timeout"))
        conn: http.client.HTTPConnection
        if self._https:
            conn = http.client.HTTPSConnection(self._host, self._port, timeout=timeout, context=self._ctx)
        else:
            conn = http.client.HTTPConnection(self._host, self._port, timeout=timeout)
        conn.connect()
        if conn.sock is not None:
            conn.sock.settimeout(float(config.get("storage_read_timeout")))
        return conn

    def get(self, path: str, where: str) -> tuple[bytes, int | None]:
        """The whole object at ``path`` and the length the server announced."""
        from streamscope.storage.boto3_backend import map_error

        quoted = urllib.parse.quote(f"/{self._bucket}/{path}", safe="/~")
        ak, sk, token = self._creds
        try:
            conn = self._connect()
            try:
                conn.request("GET", quoted, headers=sign("GET", self._netloc, quoted, self._region, ak, sk, token))
                resp = conn.getresponse()
                body = resp.read()
                status = resp.status
                length = resp.getheader("Content-Length")
            finally:
                conn.close()
        except http.client.IncompleteRead as exc:
            raise TruncatedBodyError(
                redact(f"get {where!r}: the response body was cut short ({len(exc.partial)} bytes)")
            ) from None
        except ssl.SSLError as exc:
            raise StorageError(
                redact(f"get {where!r}: TLS failed (set AWS_CA_BUNDLE or storage_options['verify']): {exc}")
            ) from None
        except http.client.HTTPException as exc:
            raise StorageResponseError(
                redact(f"get {where!r}: the server's answer is not valid HTTP: {exc!r}")
            ) from None
        except TimeoutError as exc:
            raise StorageTimeoutError(redact(f"get {where!r} timed out: {exc}")) from None
        except ConnectionRefusedError as exc:
            raise StorageConnectionError(redact(f"get {where!r}: cannot connect to the endpoint: {exc}")) from None
        except OSError as exc:
            raise StorageConnectionError(redact(f"get {where!r}: connection dropped: {exc}")) from None
        if status != 200:
            ClientError = require("botocore.exceptions", f"reading {where!r}", "s3").ClientError  # noqa: N806

            code_m, msg_m = _CODE_RE.search(body), _MSG_RE.search(body)
            code = code_m.group(1).decode("utf-8", "replace") if code_m else str(status)
            message = msg_m.group(1).decode("utf-8", "replace") if msg_m else ""
            err = ClientError(
                {"Error": {"Code": code, "Message": message}, "ResponseMetadata": {"HTTPStatusCode": status}},
                "GetObject",
            )
            raise map_error(err, where, "get") from None
        return body, (int(length) if length is not None and length.isdigit() else None)


class LightGetBackend:
    """The boto3 backend with :meth:`get` served by a :class:`SignedGetter` (boto3 is built on first other use)."""

    name = "boto3"

    def __init__(self, getter: SignedGetter, make_boto3: Callable[[], Any]) -> None:
        self._getter = getter
        self._make = make_boto3
        self._inner: Any = None
        self._lock = threading.Lock()

    def _b(self) -> Any:
        if self._inner is None:
            with self._lock:
                if self._inner is None:
                    self._inner = self._make()
        return self._inner

    def get(self, path: str, where: str) -> tuple[bytes, int | None]:
        return self._getter.get(path, where)

    def get_range(self, path: str, start: int, end: int, where: str) -> bytes:
        return self._b().get_range(path, start, end, where)

    def head(self, path: str, where: str) -> ObjectMeta:
        return self._b().head(path, where)

    def put(self, path: str, data: bytes, where: str) -> None:
        self._b().put(path, data, where)

    def put_file(self, path: str, src: str, where: str) -> None:
        self._b().put_file(path, src, where)

    def list(self, prefix: str, where: str) -> list[ObjectMeta]:
        return self._b().list(prefix, where)

    def delete(self, path: str, where: str) -> None:
        self._b().delete(path, where)

    def download(
        self,
        path: str,
        out: IO[bytes],
        where: str,
        start: int = 0,
        if_match: str | None = None,
        on_meta: Callable[[int | None, str | None], None] | None = None,
    ) -> tuple[int, int | None]:
        return self._b().download(path, out, where, start=start, if_match=if_match, on_meta=on_meta)
