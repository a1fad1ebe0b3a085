"""Single attempts against Azure Blob Storage through azure-storage-blob (LitData's client), retries off.

obstore cannot run in a forked child of a process that started its runtime, and a process that opens a
dataset usually forks DataLoader workers next. This backend serves ``azure://`` in such processes (see
:mod:`streamscope.storage.cloud`), as boto3 does for ``s3://``; it holds plain ``requests`` connections,
rebuilt per process by :class:`~streamscope.storage.remote.RemoteStore`.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Callable, Mapping
from typing import IO, Any

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
)
from streamscope._core.protocols import ObjectMeta
from streamscope.storage.redact import redact, register_secret

__all__ = [
    "AzureBlobBackend",
    "NAME",
    "SUPPORTED",
    "available",
    "client_arguments",
    "endpoint_from_environment",
    "map_error",
]


NAME = "azure-storage-blob"
# obstore AzureConfig keys this client can be built from (see client_arguments)
SUPPORTED = frozenset({"account_name", "account_key", "sas_key", "endpoint", "use_emulator", "skip_signature"})
# the development account of Azure's storage emulators (public, documented)
_EMULATOR_ACCOUNT = "devstoreaccount1"
_EMULATOR_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="


def available() -> bool:
    """True when azure-storage-blob can be imported."""
    import importlib.util

    try:
        return importlib.util.find_spec("azure.storage.blob") is not None
    except (ImportError, ValueError):
        return False


# the environment variables obstore reads for the keys above (the first one set wins)
_ENV = {
    "account_name": ("AZURE_STORAGE_ACCOUNT_NAME",),
    "account_key": ("AZURE_STORAGE_ACCOUNT_KEY", "AZURE_STORAGE_ACCESS_KEY", "AZURE_STORAGE_MASTER_KEY"),
    "sas_key": ("AZURE_STORAGE_SAS_KEY", "AZURE_STORAGE_SAS_TOKEN"),
    "endpoint": ("AZURE_STORAGE_ENDPOINT", "AZURE_ENDPOINT"),
    "use_emulator": ("AZURE_STORAGE_USE_EMULATOR",),
}


def _from_environment(env: Mapping[str, str]) -> dict[str, Any]:
    """The AzureConfig keys obstore would take from the environment, so both clients see the same account."""
    out: dict[str, Any] = {}
    for key, names in _ENV.items():
        value = next((env[n] for n in names if env.get(n)), None)
        if value is not None:
            out[key] = value
    for secret in (out.get("account_key"), out.get("sas_key")):
        register_secret(secret)
    return out


def endpoint_from_environment() -> str | None:
    """The blob endpoint obstore would take from the environment (None when no variable names one)."""
    import os

    value = _from_environment(os.environ).get("endpoint")
    return str(value) if value else None


def client_arguments(cfg: Mapping[str, Any], container: str) -> dict[str, Any]:
    """``BlobServiceClient`` arguments (``account_url``, ``credential``) from obstore's AzureConfig keys.

    Raises:
        ConfigError: an option this client cannot take (e.g. service-principal keys: use obstore for those).
    """
    import os

    unknown = sorted(set(cfg) - SUPPORTED)
    if unknown:
        raise ConfigError(f"azure-storage-blob cannot take the storage_options {', '.join(unknown)}")
    cfg = {**_from_environment(os.environ), **cfg}
    account = cfg.get("account_name")
    endpoint = cfg.get("endpoint")
    credential: Any = None
    if cfg.get("use_emulator") and str(cfg["use_emulator"]).lower() not in ("false", "0"):
        account = account or _EMULATOR_ACCOUNT
        base = os.environ.get("AZURITE_BLOB_STORAGE_URL", "http://127.0.0.1:10000").rstrip("/")
        endpoint = endpoint or f"{base}/{account}"
        credential = {"account_name": account, "account_key": cfg.get("account_key") or _EMULATOR_KEY}
    if not account:
        raise ConfigError(f"azure://{container}: storage_options need 'account_name' (or 'account_url')")
    if credential is None and cfg.get("account_key"):
        credential = {"account_name": account, "account_key": cfg["account_key"]}
    elif credential is None and cfg.get("sas_key"):
        credential = str(cfg["sas_key"])
    elif credential is None and not cfg.get("skip_signature"):
        raise ConfigError(f"azure://{container}: azure-storage-blob needs 'account_key' or 'sas_key'")
    return {"account_url": str(endpoint or f"https://{account}.blob.core.windows.net"), "credential": credential}


def map_error(exc: BaseException, where: str, op: str) -> StorageError:
    """Translate an azure-core exception into the streamscope error tree (message names ``where``)."""
    if isinstance(exc, StorageError):
        return exc
    name = type(exc).__name__
    status = getattr(exc, "status_code", None)
    status = status if isinstance(status, int) else None
    code_obj = getattr(exc, "error_code", None)
    code = str(getattr(code_obj, "value", code_obj)) if code_obj is not None else None
    detail = redact(" ".join(str(getattr(exc, "reason", None) or str(exc).split("\n", 1)[0]).split())[:300])
    err: StorageError
    if status == 412 or name == "ResourceModifiedError":
        err = ObjectChangedError(redact(f"{op} {where!r}: the object changed during the download (ETag mismatch)"))
    elif status == 404 or name == "ResourceNotFoundError":
        if code == "ContainerNotFound":
            err = ObjectNotFoundError(
                redact(f"{op} {where!r} failed: the container does not exist (ContainerNotFound)")
            )
            err.missing_bucket = True  # type: ignore[attr-defined]
        else:
            err = ObjectNotFoundError(redact(f"{op} {where!r} failed: no such object ({code or 404})"))
        status = 404
    elif status in (401, 403) or name == "ClientAuthenticationError":
        hint = " - check the credentials in storage_options or the environment"
        err = StorageAuthError(redact(f"{op} {where!r} was refused: {code or status or name}{hint}"))
    elif status == 416 or code == "InvalidRange":
        err = InvalidRangeError(redact(f"{op} {where!r} failed: the range is not satisfiable (HTTP 416)"))
    elif status is not None and (status >= 500 or status in (408, 429)):
        err = TransientStorageError(redact(f"{op} {where!r} failed: {code or ''} (HTTP {status}) ") + detail)
    elif name == "IncompleteReadError" or "incompleteread" in detail.lower():
        err = TruncatedBodyError(redact(f"{op} {where!r}: the response body was cut short: ") + detail)
    elif "timeout" in name.lower() or "timed out" in detail.lower():
        err = StorageTimeoutError(redact(f"{op} {where!r} timed out: ") + detail)
    elif name == "ServiceRequestError":  # the request was not sent: cannot connect
        err = StorageConnectionError(redact(f"{op} {where!r}: cannot connect to the endpoint: ") + detail)
    elif name == "ServiceResponseError":  # sent, but no (complete) answer came back
        err = StorageConnectionError(redact(f"{op} {where!r}: connection dropped: ") + detail)
    elif name in ("DecodeError", "DeserializationError"):
        err = StorageResponseError(redact(f"{op} {where!r}: the server's answer is not valid Azure XML: ") + detail)
    elif status is not None:
        err = StorageError(redact(f"{op} {where!r} failed: {code or ''} (HTTP {status}) ") + detail)
    else:
        err = StorageError(redact(f"{op} {where!r} failed ({name}): ") + detail)
    err.status = status  # type: ignore[attr-defined]
    err.code = code  # type: ignore[attr-defined]
    err.url = where  # type: ignore[attr-defined]
    return err


def _mtime(value: Any) -> float | None:
    return value.timestamp() if isinstance(value, _dt.datetime) else None


def _total_size(props: Any) -> int | None:
    """The whole blob's size from a (possibly ranged) download's properties (``bytes a-b/total``)."""
    content_range = getattr(props, "content_range", None)
    if content_range:
        try:
            return int(str(content_range).rsplit("/", 1)[1])
        except (IndexError, ValueError):
            return None
    size = getattr(props, "size", None)
    return int(size) if size is not None else None


class AzureBlobBackend:
    """Single attempts against one container through a ``BlobServiceClient`` built in this process.

    Args:
        container: The container.
        arguments: ``BlobServiceClient`` arguments (:func:`client_arguments`).
    """

    name = NAME

    def __init__(self, container: str, arguments: Mapping[str, Any]) -> None:
        from azure.storage.blob import BlobServiceClient

        try:
            service = BlobServiceClient(
                **dict(arguments),
                retry_total=0,  # streamscope.storage.retry is the one policy
                connection_timeout=float(config.get("storage_connect_timeout")),
                read_timeout=float(config.get("storage_read_timeout")),
            )
        except Exception as exc:
            raise StorageError(redact(f"cannot configure a client for azure://{container}: {exc}")) from None
        self._container = service.get_container_client(container)

    def _run(self, op: str, where: str, fn: Callable[[], Any]) -> Any:
        try:
            return fn()
        except StorageError:
            raise
        except Exception as exc:
            raise map_error(exc, where, op) from None

    def get(self, path: str, where: str) -> tuple[bytes, int | None]:
        def fn() -> tuple[bytes, int | None]:
            stream = self._container.download_blob(path, max_concurrency=1)
            return stream.readall(), _total_size(stream.properties)

        return self._run("get", where, fn)

    def get_range(self, path: str, start: int, end: int, where: str) -> bytes:
        return self._run(
            "get_range",
            where,
            lambda: self._container.download_blob(path, offset=start, length=end - start, max_concurrency=1).readall(),
        )

    def head(self, path: str, where: str) -> ObjectMeta:
        def fn() -> ObjectMeta:
            props = self._container.get_blob_client(path).get_blob_properties()
            return ObjectMeta(key=path, size=int(props.size), mtime=_mtime(props.last_modified), etag=props.etag)

        return self._run("head", where, fn)

    def put(self, path: str, data: bytes, where: str) -> None:
        self._run("put", where, lambda: self._container.upload_blob(path, data, overwrite=True, max_concurrency=1))

    def put_file(self, path: str, src: str, where: str) -> None:
        def fn() -> None:
            with open(src, "rb") as f:
                self._container.upload_blob(path, f, overwrite=True, max_concurrency=1)

        self._run("upload_file", where, fn)

    def list(self, prefix: str, where: str) -> list[ObjectMeta]:
        def fn() -> list[ObjectMeta]:
            return [
                ObjectMeta(key=b.name, size=int(b.size), mtime=_mtime(b.last_modified), etag=b.etag)
                for b in self._container.list_blobs(name_starts_with=prefix or None)
            ]

        return self._run("list", where, fn)

    def delete(self, path: str, where: str) -> None:
        try:
            self._run("delete", where, lambda: self._container.delete_blob(path))
        except ObjectNotFoundError as exc:
            if getattr(exc, "missing_bucket", False):
                raise  # deleting a missing blob is not an error; a missing container is

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
            kwargs: dict[str, Any] = {"max_concurrency": 1}
            if start:
                kwargs["offset"] = start
            if if_match:
                from azure.core import MatchConditions

                kwargs.update(etag=if_match, match_condition=MatchConditions.IfNotModified)
            stream = self._container.download_blob(path, **kwargs)
            size = _total_size(stream.properties)
            if on_meta is not None:
                on_meta(size, stream.properties.etag)
            written = 0
            for block in stream.chunks():
                out.write(block)
                written += len(block)
            return written, (size - start if size is not None else None)

        return self._run("download_file", where, fn)
