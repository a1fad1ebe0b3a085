"""Google Cloud Storage (``gs://``) and Azure Blob Storage (``azure://``, ``az://``) through obstore.

``storage_options`` are obstore's ``GCSConfig`` / ``AzureConfig`` keys (``service_account``,
``service_account_key``, ``base_url``, ``bearer_token``, ... / ``account_name``, ``account_key``,
``sas_key``, ``endpoint``, ``use_emulator``, ...), plus a few of LitData's spellings:

* GCS: ``project`` is accepted and ignored (obstore does not need it); ``token`` or ``credentials`` given
  as a path to a service-account JSON file become ``service_account``.
* Azure: ``account_url`` (``https://<account>.blob.core.windows.net``) gives ``account_name`` (or the
  ``endpoint`` for other hosts); ``credential`` given as a string becomes ``account_key``.

These backends are exercised here only up to construction, URL parsing and error mapping: no GCS or
Azure server runs in the test environment. Like S3 they are built lazily per process; in a forked child of a
process that started obstore's runtime they refuse with a clear error instead of hanging.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from streamscope._core.errors import ConfigError, StorageError
from streamscope._core.optional import missing
from streamscope.storage import obstore_backend as ob
from streamscope.storage.redact import redact, register_options
from streamscope.storage.remote import Backend, RemoteStore
from streamscope.storage.url import StoreURL


def _gcs_config(opts: dict[str, Any]) -> dict[str, Any]:
    cfg = dict(opts)
    cfg.pop("project", None)
    for alias in ("token", "credentials"):
        value = cfg.pop(alias, None)
        if isinstance(value, str) and os.path.isfile(value):
            cfg.setdefault("service_account", value)
        elif value is not None:
            raise ConfigError(f"GCS storage_options[{alias!r}] must be a path to a service-account JSON file")
    return cfg


def _azure_config(opts: dict[str, Any]) -> dict[str, Any]:
    cfg = dict(opts)
    account_url = cfg.pop("account_url", None)
    if account_url:
        host = urlsplit(str(account_url)).hostname or ""
        if host.endswith(".blob.core.windows.net"):
            cfg.setdefault("account_name", host.split(".", 1)[0])
        else:
            cfg.setdefault("endpoint", str(account_url))
    credential = cfg.pop("credential", None)
    if isinstance(credential, str):
        cfg.setdefault("account_key", credential)
    elif credential is not None:
        raise ConfigError("Azure storage_options['credential'] must be an account key string")
    return cfg


class _ObstoreCloudStore(RemoteStore):
    kind = ""

    def __init__(self, parsed: StoreURL, storage_options: Mapping[str, Any] | None = None) -> None:
        opts = dict(storage_options or {})
        register_options(opts)
        opts.pop("backend", None)
        self._config = self._translate(opts)
        super().__init__(parsed, self._build, endpoint=self._config.get("base_url") or self._config.get("endpoint"))
        if ob.obstore_available():
            try:  # validate the options now; building an obstore store does not start its runtime
                self._factory()
            except Exception as exc:
                raise ConfigError(
                    redact(f"storage_options for {parsed.url!r} are not valid ({', '.join(sorted(opts))}): {exc}")
                ) from None

    def _translate(self, opts: dict[str, Any]) -> dict[str, Any]:
        raise NotImplementedError

    def _factory(self) -> Any:
        raise NotImplementedError

    def _build(self) -> Backend:
        if not ob.obstore_available():
            raise missing("obstore", repr(self.url), "gcs" if self.kind == "gs" else "azure")
        if not ob.obstore_usable():
            raise StorageError(
                f"{self.url!r}: obstore's runtime was started in parent pid {ob.runtime_pid()} before this process "
                "was forked, and obstore cannot run in a forked child; use the 'spawn' or 'forkserver' start method"
            )
        return ob.ObstoreBackend(self._factory)

    def _client_options(self) -> dict[str, Any]:
        endpoint = self._config.get("base_url") or self._config.get("endpoint")
        return ob.client_options(endpoint if isinstance(endpoint, str) else None)


class GCSStore(_ObstoreCloudStore):
    """A Google Cloud Storage bucket (or prefix) as an ObjectStore, via obstore."""

    kind = "gs"

    def _translate(self, opts: dict[str, Any]) -> dict[str, Any]:
        return _gcs_config(opts)

    def _factory(self) -> Any:
        from obstore.store import GCSStore as ObsGCSStore

        return ObsGCSStore(
            self._parsed.bucket,
            config=self._config,
            client_options=self._client_options(),
            retry_config=ob.retry_config(),
        )


class AzureStore(_ObstoreCloudStore):
    """An Azure Blob Storage container (or prefix) as an ObjectStore, via obstore."""

    kind = "azure"

    def _translate(self, opts: dict[str, Any]) -> dict[str, Any]:
        return _azure_config(opts)

    def _factory(self) -> Any:
        from obstore.store import AzureStore as ObsAzureStore

        return ObsAzureStore(
            self._parsed.bucket,
            config=self._config,
            client_options=self._client_options(),
            retry_config=ob.retry_config(),
        )
