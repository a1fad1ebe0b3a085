"""Read-only ``hf://datasets/<owner>/<name>[@<revision>]/<path>`` stores: Hugging Face Hub dataset repositories.

Requests go through ``huggingface_hub`` (the ``hf`` extra): its HTTP client (redirects to the Hub's file CDN
followed, the ``Authorization`` header dropped on a redirect to another host), its endpoint, its token and its
request headers. Each call is one attempt; :mod:`streamscope.storage.retry` is the only retry policy (the
helpers of ``huggingface_hub`` that retry on their own, ``hf_hub_download`` and ``HfFileSystem``, are not used).

Hub API used (the endpoint is ``storage_options["endpoint"]``, else ``HF_ENDPOINT``, else huggingface.co):

* files: ``GET``/``HEAD {endpoint}/datasets/<owner>/<name>/resolve/<revision>/<path>`` (``Range`` for
  ``get_range``, ``If-Match`` when a cut-off download resumes); the size is ``X-Linked-Size`` or
  ``Content-Length``, the ETag ``X-Linked-ETag`` or ``ETag``.
* listing: ``GET {endpoint}/api/datasets/<owner>/<name>/tree/<revision>/<folder>?recursive=true&expand=false``,
  every page (the ``Link: rel="next"`` header). A missing folder lists nothing; a missing repository or
  revision is an error.

The revision is ``main`` unless the URL names one (``@v1.0``, ``@<commit sha>``, ``@refs/convert/parquet``).

``storage_options``: ``token`` (a string; ``False`` sends none), ``endpoint``. Without ``token`` the token is
``huggingface_hub``'s: ``HF_TOKEN`` (read when the store's client is built in each process), else the token
saved by ``hf auth login``. The token is sent only as ``Authorization: Bearer ...``; it is registered as a secret,
so no error, trace event or log line of streamscope shows it, and it is not part of the store's URL or repr.

``put``, ``upload_file`` and ``delete`` raise :class:`UnsupportedOperationError` (write with
``huggingface_hub.HfApi`` instead).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Mapping
from typing import IO, Any
from urllib.parse import quote

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
    UnsupportedOperationError,
)
from streamscope._core.optional import require
from streamscope._core.protocols import ObjectMeta
from streamscope.storage.redact import redact, register_secret
from streamscope.storage.remote import RemoteStore
from streamscope.storage.url import StoreURL

__all__ = ["DEFAULT_ENDPOINT", "HFStore"]

DEFAULT_ENDPOINT = "https://huggingface.co"
_FEATURE = "hf:// datasets (Hugging Face Hub)"
_KNOWN_OPTIONS = ("token", "endpoint")


def _why(code: str | None, status: int) -> str:
    if code == "RepoNotFound" or (code is None and status == 401):
        return "no such dataset repository, or it is private or gated and no valid token was sent (set HF_TOKEN)"
    if code == "RevisionNotFound":
        return "no such revision in the repository"
    if code == "EntryNotFound":
        return "no such file in the repository"
    if code == "GatedRepo":
        return "the dataset is gated: accept its conditions on the Hub with the account of HF_TOKEN"
    return "no such object"


def _status_error(status: int, code: str | None, message: str | None, where: str, op: str) -> StorageError:
    """The streamscope error of an HTTP answer ``status`` (``code``: the Hub's ``X-Error-Code``)."""
    detail = f" ({message})" if message else ""
    err: StorageError
    if status == 412:
        err = ObjectChangedError(redact(f"{op} {where!r}: the file changed during the download (ETag mismatch)"))
    elif status == 404 or code in ("RepoNotFound", "RevisionNotFound", "EntryNotFound"):
        err = ObjectNotFoundError(redact(f"{op} {where!r} failed: {_why(code, status)} (HTTP {status})"))
    elif status in (401, 403):
        err = StorageAuthError(redact(f"{op} {where!r} was refused (HTTP {status}){detail}: {_why(code, status)}"))
    elif status == 416:
        err = InvalidRangeError(redact(f"{op} {where!r}: range not satisfiable (HTTP 416)"))
    elif status >= 500 or status in (408, 429):
        err = TransientStorageError(redact(f"{op} {where!r} failed: HTTP {status}{detail}"))
    else:
        err = StorageError(redact(f"{op} {where!r} failed: HTTP {status}{detail}"))
    err.status = status  # type: ignore[attr-defined]
    err.url = where  # type: ignore[attr-defined]
    err.hub_code = code  # type: ignore[attr-defined]
    return err


def _io_error(exc: BaseException, where: str, op: str) -> StorageError:
    """The streamscope error of a client exception (httpx's classes, matched by name: huggingface_hub 1.x uses
    httpx, 2.x httpx2)."""
    names = {c.__name__ for c in type(exc).__mro__}
    err: StorageError
    if "TimeoutException" in names:
        err = StorageTimeoutError(redact(f"{op} {where!r} timed out: {exc}"))
    elif "RemoteProtocolError" in names or "NetworkError" in names:
        err = StorageConnectionError(redact(f"{op} {where!r}: connection dropped or refused: {exc}"))
    elif "OfflineModeIsEnabled" in names:
        err = StorageError(redact(f"{op} {where!r}: HF_HUB_OFFLINE is set, the Hub cannot be reached"))
    elif "TransportError" in names:
        err = StorageError(redact(f"{op} {where!r}: the request failed ({type(exc).__name__}): {exc}"))
    else:
        err = StorageError(redact(f"{op} {where!r} failed ({type(exc).__name__}): {exc}"))
    err.url = where  # type: ignore[attr-defined]
    return err


def _int(value: str | None) -> int | None:
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


class _HFBackend:
    """Single attempts against one dataset repository at one revision."""

    name = "huggingface_hub"

    def __init__(self, repo_id: str, revision: str, endpoint: str, headers: dict[str, str]) -> None:
        utils = require("huggingface_hub.utils", _FEATURE, "hf")
        self._session = utils.get_session()
        client_module = sys.modules[type(self._session).__module__.split(".")[0]]
        self._timeout = client_module.Timeout(
            float(config.get("storage_read_timeout")), connect=float(config.get("storage_connect_timeout"))
        )
        self.repo_id = repo_id
        self.revision = revision
        self.endpoint = endpoint
        self._headers = headers
        rev = quote(revision, safe="")
        self._resolve = f"{endpoint}/datasets/{repo_id}/resolve/{rev}/"
        self._tree = f"{endpoint}/api/datasets/{repo_id}/tree/{rev}"

    # -- one request --------------------------------------------------------------------------------------

    def _open(self, method: str, url: str, where: str, op: str, headers: dict[str, str] | None = None) -> Any:
        """The streamed response of one request (the caller closes it); an HTTP error status raises."""
        try:
            resp = self._session.send(
                self._session.build_request(
                    method, url, headers={**self._headers, **(headers or {})}, timeout=self._timeout
                ),
                stream=True,
                follow_redirects=True,
            )
        except Exception as exc:
            raise _io_error(exc, where, op) from None
        if resp.status_code >= 400:
            resp.close()
            raise _status_error(
                resp.status_code, resp.headers.get("X-Error-Code"), resp.headers.get("X-Error-Message"), where, op
            )
        return resp

    def _body(self, resp: Any, where: str, op: str) -> bytes:
        try:
            return bytes(resp.read())
        except Exception as exc:
            raise _io_error(exc, where, op) from None
        finally:
            resp.close()

    def _file_url(self, path: str) -> str:
        return self._resolve + quote(path, safe="/")

    # -- Backend --------------------------------------------------------------------------------------------

    def get(self, path: str, where: str) -> tuple[bytes, int | None]:
        resp = self._open("GET", self._file_url(path), where, "get")
        return self._body(resp, where, "get"), _int(resp.headers.get("Content-Length"))

    def get_range(self, path: str, start: int, end: int, where: str) -> bytes:
        resp = self._open("GET", self._file_url(path), where, "get_range", {"Range": f"bytes={start}-{end - 1}"})
        data = self._body(resp, where, "get_range")
        return data[start:end] if resp.status_code == 200 else data  # 200: the server ignored Range

    def head(self, path: str, where: str) -> ObjectMeta:
        resp = self._open("HEAD", self._file_url(path), where, "head")
        resp.close()
        size = _int(resp.headers.get("X-Linked-Size") or resp.headers.get("Content-Length"))
        if size is None:
            raise StorageResponseError(redact(f"head {where!r}: the Hub sent no file size"))
        etag = resp.headers.get("X-Linked-ETag") or resp.headers.get("ETag")
        return ObjectMeta(key=path, size=size, etag=etag)

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
        resp = self._open("GET", self._file_url(path), where, "download_file", headers)
        announced = _int(resp.headers.get("Content-Length"))
        skip = 0
        if start and resp.status_code == 200:  # the server ignored Range: drop what we already have
            skip = start
            announced = announced - start if announced is not None else None
        if on_meta is not None:
            total = (
                _int(resp.headers.get("Content-Length"))
                if resp.status_code == 200
                else _int(str(resp.headers.get("Content-Range", "")).rsplit("/", 1)[-1])
            )
            on_meta(total, resp.headers.get("ETag"))
        written = 0
        try:
            for block in resp.iter_bytes(1 << 20):
                if skip:
                    cut = min(skip, len(block))
                    block, skip = block[cut:], skip - cut
                out.write(block)
                written += len(block)
        except OSError:
            raise  # writing the local file failed: RemoteStore says so
        except Exception as exc:
            raise _io_error(exc, where, "download_file") from None
        finally:
            resp.close()
        return written, announced

    def list(self, prefix: str, where: str) -> list[ObjectMeta]:
        """Files whose path starts with ``prefix``: the recursive tree of the folder holding the prefix."""
        folder = prefix.rsplit("/", 1)[0] if "/" in prefix else ""
        url: str | None = self._tree + (f"/{quote(folder, safe='')}" if folder else "") + "?recursive=true&expand=false"
        found: list[ObjectMeta] = []
        while url is not None:
            try:
                resp = self._open("GET", url, where, "list")
            except ObjectNotFoundError as exc:
                if folder and getattr(exc, "hub_code", None) == "EntryNotFound":  # the folder does not exist
                    return []
                raise
            body = self._body(resp, where, "list")
            try:
                entries = json.loads(body)
                for e in entries:
                    if e.get("type") == "file" and str(e["path"]).startswith(prefix):
                        lfs = e.get("lfs") or {}
                        found.append(
                            ObjectMeta(
                                key=str(e["path"]), size=int(e["size"]), etag=f'"{lfs.get("oid") or e.get("oid")}"'
                            )
                        )
            except (ValueError, KeyError, TypeError, AttributeError) as exc:
                raise StorageResponseError(
                    redact(f"list {where!r}: the Hub's tree answer is not valid ({exc})")
                ) from None
            nxt = resp.links.get("next", {}).get("url")
            url = str(nxt) if nxt else None
        return found

    def _read_only(self, op: str, where: str) -> UnsupportedOperationError:
        return UnsupportedOperationError(
            f"{op} {where!r}: hf:// stores are read-only (upload to the Hub with huggingface_hub.HfApi)"
        )

    def put(self, path: str, data: bytes, where: str) -> None:
        raise self._read_only("put", where)

    def put_file(self, path: str, src: str, where: str) -> None:
        raise self._read_only("upload_file", where)

    def delete(self, path: str, where: str) -> None:
        raise self._read_only("delete", where)


class HFStore(RemoteStore):
    """A read-only store over one Hugging Face Hub dataset repository; see the module docstring."""

    read_only = True

    def __init__(self, parsed: StoreURL, storage_options: Mapping[str, Any] | None = None) -> None:
        opts = dict(storage_options or {})
        opts.pop("backend", None)
        unknown = sorted(set(opts) - set(_KNOWN_OPTIONS))
        if unknown:
            raise ConfigError(
                f"unknown storage_options for {parsed.url!r}: {', '.join(unknown)} (known: {', '.join(_KNOWN_OPTIONS)})"
            )
        token = opts.get("token")
        if token is not None and token is not False and not isinstance(token, str):
            raise ConfigError(f"storage_options['token'] for {parsed.url!r} must be a string or False")
        register_secret(token)
        self._token: str | bool | None = token
        endpoint = opts.get("endpoint")
        if endpoint is not None and not isinstance(endpoint, str):
            raise ConfigError(f"storage_options['endpoint'] for {parsed.url!r} must be a URL string")
        self._endpoint_opt: str | None = endpoint
        #: the options this store was opened with (to open the same store again; not shown by repr)
        self.storage_options: dict[str, Any] = {k: opts[k] for k in _KNOWN_OPTIONS if k in opts}
        repo, _, revision = parsed.bucket.partition("@")
        self.repo_id = repo
        self.revision = revision or "main"
        explicit = endpoint or os.environ.get("HF_ENDPOINT")
        super().__init__(parsed, self._build, endpoint=explicit.rstrip("/") if explicit else None)

    def _endpoint(self) -> str:
        return (self._endpoint_opt or os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")

    def _build(self) -> _HFBackend:
        hub = require("huggingface_hub", _FEATURE, "hf")
        utils = require("huggingface_hub.utils", _FEATURE, "hf")
        token: str | bool | None = self._token
        if token is None:
            token = hub.get_token()  # HF_TOKEN, else the saved login
        if isinstance(token, str):
            register_secret(token)
        headers = dict(utils.build_hf_headers(token=token if token else False))
        # the real file size in Content-Length: a compressed answer would not match the object or its ranges
        headers["Accept-Encoding"] = "identity"
        return _HFBackend(self.repo_id, self.revision, self._endpoint(), headers)

    def __repr__(self) -> str:
        return f"HFStore({self.url!r})"
