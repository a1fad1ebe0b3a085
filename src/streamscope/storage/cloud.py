"""Google Cloud Storage (``gs://``) and Azure Blob Storage (``azure://``, ``az://``).

**GCS** has two clients. obstore (the default) speaks GCS's XML API; google-cloud-storage (LitData's own
client, ``pip install "streamscope[gcs]"``) speaks the JSON API. ``storage_options["backend"]`` is
``"obstore"``, ``"google"`` or ``"auto"`` (default), which picks google-cloud-storage when

* an option only it understands is given (LitData's ``google.cloud.storage.Client`` arguments:
  ``credentials`` as an object, ``client_options``, ``client_info``, ...), or
* ``STORAGE_EMULATOR_HOST`` is set (the variable google-cloud-storage, and so LitData, follows to an
  emulator; obstore ignores it, and GCS emulators implement only part of the XML API), or
* obstore is not installed;

and obstore otherwise. Options both clients take: obstore's ``GCSConfig`` keys ``base_url``,
``skip_signature``, ``service_account`` (a path), ``service_account_key`` (JSON text), ``bearer_token``,
``application_credentials``; LitData's ``project`` (obstore does not need it); ``token`` or
``credentials`` as a path to a service-account JSON file, or ``token="anon"`` for anonymous access.

**Azure** goes through obstore: its ``AzureConfig`` keys (``account_name``, ``account_key``,
``sas_key``, ``endpoint``, ``use_emulator``, ...) plus LitData's ``BlobServiceClient`` spelling:
``account_url`` (``https://<account>.blob.core.windows.net``, or an emulator's
``http://host:port/<account>``) gives ``account_name`` (and the ``endpoint`` for other hosts);
``credential`` as a string is the account key (a SAS token when it looks like one: ``sig=...``), as a
mapping ``{"account_name", "account_key"}``.

Both are built lazily per process. obstore cannot run in a forked child of a process that started its
runtime; there a GCS store switches to google-cloud-storage when installed (with a warning and a
``backend_fallback`` trace event), and an Azure store refuses with a clear error instead of hanging.
The servers these are tested against: ``tests/support/gcsserver.py`` and ``tests/support/azurite.py``.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from streamscope import events as ev
from streamscope._core.errors import ConfigError, StorageError
from streamscope.storage import gcs_backend
from streamscope.storage import obstore_backend as ob
from streamscope.storage.redact import redact, register_options, register_secret
from streamscope.storage.remote import Backend, RemoteStore
from streamscope.storage.url import StoreURL

log = logging.getLogger("streamscope.storage")

_GCS_BACKENDS = ("auto", "obstore", "google")
# google.cloud.storage.Client arguments obstore has no counterpart for
_GOOGLE_ONLY = ("client_options", "client_info", "_http", "extra_headers", "use_auth_w_custom_endpoint", "api_key")
# obstore GCSConfig keys google-cloud-storage can be given too (translated in _google_kwargs)
_SHARED_GCS = (
    "base_url",
    "skip_signature",
    "service_account",
    "service_account_key",
    "bearer_token",
    "application_credentials",
)
_warned_fallback = False


def _gcs_config(opts: dict[str, Any]) -> dict[str, Any]:
    """obstore GCSConfig from ``storage_options`` (LitData's ``token``/``credentials`` paths translated)."""
    cfg = dict(opts)
    cfg.pop("project", None)
    for alias in ("token", "credentials"):
        value = cfg.pop(alias, None)
        if alias == "token" and value == "anon":
            cfg.setdefault("skip_signature", True)
        elif isinstance(value, str) and os.path.isfile(value):
            cfg.setdefault("service_account", value)
        elif value is not None:
            raise ConfigError(
                f"GCS storage_options[{alias!r}] must be a path to a service-account JSON file"
                + (" ('anon' for anonymous access)" if alias == "token" else "")
                + "; a credentials object needs the google-cloud-storage client (backend='google')"
            )
    return cfg


def _emulator_host() -> str | None:
    """``STORAGE_EMULATOR_HOST`` as a base URL, or None when it is not set."""
    host = os.environ.get("STORAGE_EMULATOR_HOST", "").strip()
    if not host:
        return None
    return host if "://" in host else f"http://{host}"


def _choose_gcs_backend(opts: Mapping[str, Any], preference: str) -> str:
    """``"obstore"`` or ``"google"`` for these options (see the module docstring)."""
    if preference != "auto":
        return preference
    credentials = opts.get("credentials")
    if any(k in opts for k in _GOOGLE_ONLY) or (credentials is not None and not isinstance(credentials, str)):
        return "google"
    if _emulator_host() is not None and "base_url" not in opts and gcs_backend.available():
        return "google"
    if not ob.obstore_available() and gcs_backend.available():
        return "google"
    return "obstore"


def _google_kwargs(opts: Mapping[str, Any]) -> tuple[dict[str, Any], tuple[str, Any] | None]:
    """``google.cloud.storage.Client`` arguments, and which credentials to build (``(kind, value)``).

    Credentials named by a path, JSON text or token are built by :func:`_google_credentials` in the process
    that builds the client, so the store stays picklable.
    """
    kwargs = {k: v for k, v in opts.items() if k not in _SHARED_GCS and k != "token"}
    unknown = sorted(set(kwargs) - {"project", "credentials", *_GOOGLE_ONLY})
    if unknown:
        raise ConfigError(
            f"storage_options {', '.join(unknown)} are not google-cloud-storage Client arguments "
            "(obstore's GCS options need backend='obstore')"
        )
    base_url = opts.get("base_url")
    if base_url:
        client_options = kwargs.get("client_options") or {}
        if not isinstance(client_options, Mapping):
            raise ConfigError("GCS storage_options: give 'base_url' or a ClientOptions object, not both")
        kwargs["client_options"] = {"api_endpoint": str(base_url), **dict(client_options)}
    token = opts.get("token")
    if token is not None and not isinstance(token, str):
        raise ConfigError("GCS storage_options['token'] must be a path to a service-account JSON file or 'anon'")
    credentials = kwargs.pop("credentials", None)
    kinds: list[tuple[str, Any]] = []
    if credentials is not None:
        kinds.append(("file", credentials) if isinstance(credentials, str) else ("object", credentials))
    if token is not None:
        kinds.append(("anonymous", None) if token == "anon" else ("file", token))
    if opts.get("skip_signature"):
        kinds.append(("anonymous", None))
    for key, kind in (
        ("service_account", "file"),
        ("service_account_key", "json"),
        ("application_credentials", "adc"),
        ("bearer_token", "bearer"),
    ):
        if opts.get(key):
            kinds.append((kind, opts[key]))
    if len({k for k, _ in kinds}) > 1 or len({id(v) if k == "object" else v for k, v in kinds}) > 1:
        raise ConfigError(
            f"GCS storage_options give more than one set of credentials ({', '.join(k for k, _ in kinds)})"
        )
    spec = kinds[0] if kinds else None
    if spec is not None and spec[0] == "object":
        kwargs["credentials"] = spec[1]
        spec = None
    elif spec is not None and spec[0] == "anonymous":
        kwargs.setdefault("project", "<none>")  # nothing to infer a project from
    elif spec is not None and spec[0] in ("file", "adc") and not os.path.isfile(str(spec[1])):
        raise ConfigError(f"GCS credentials file {spec[1]!r} does not exist")
    elif spec is not None and spec[0] == "json":
        try:
            spec = ("info", json.loads(str(spec[1])))
        except ValueError:
            raise ConfigError("GCS storage_options['service_account_key'] is not JSON text") from None
    return kwargs, spec


def _google_credentials(spec: tuple[str, Any]) -> Any:
    kind, value = spec
    if kind == "anonymous":
        from google.auth.credentials import AnonymousCredentials

        return AnonymousCredentials()
    if kind == "file":
        from google.oauth2 import service_account

        return service_account.Credentials.from_service_account_file(str(value))
    if kind == "info":
        from google.oauth2 import service_account

        return service_account.Credentials.from_service_account_info(value)
    if kind == "adc":
        import google.auth

        return google.auth.load_credentials_from_file(str(value))[0]
    from google.oauth2.credentials import Credentials

    return Credentials(token=str(value))


def _azure_config(opts: dict[str, Any]) -> dict[str, Any]:
    """obstore AzureConfig from ``storage_options`` (LitData's ``account_url``/``credential`` translated)."""
    cfg = dict(opts)
    account_url = cfg.pop("account_url", None)
    if account_url:
        parts = urlsplit(str(account_url))
        host = parts.hostname or ""
        if host.endswith(".blob.core.windows.net"):
            cfg.setdefault("account_name", host.split(".", 1)[0])
        else:
            # an emulator or a custom domain: path-style URLs carry the account as the first segment
            cfg.setdefault("endpoint", str(account_url).rstrip("/"))
            account = parts.path.strip("/").split("/", 1)[0]
            if account:
                cfg.setdefault("account_name", account)
    credential = cfg.pop("credential", None)
    if isinstance(credential, str):
        if "sig=" in credential:  # a SAS token, as azure-storage-blob tells them apart
            cfg.setdefault("sas_key", credential.lstrip("?"))
        else:
            cfg.setdefault("account_key", credential)
    elif isinstance(credential, Mapping) and {"account_name", "account_key"} <= set(credential):
        cfg.setdefault("account_name", credential["account_name"])
        cfg.setdefault("account_key", credential["account_key"])
    elif credential is not None:
        raise ConfigError(
            "Azure storage_options['credential'] must be an account key or SAS token string, or a mapping "
            "with 'account_name' and 'account_key'"
        )
    for secret in (cfg.get("account_key"), cfg.get("sas_key")):
        register_secret(secret)
    return cfg


def _invalid(url: str, opts: Mapping[str, Any], exc: BaseException) -> ConfigError:
    names = ", ".join(sorted(opts)) or "none given"
    return ConfigError(redact(f"storage_options for {url!r} are not valid ({names}): {ob._first_line(str(exc))}"))


def _forked_child_message(url: str) -> str:
    return (
        f"{url!r}: obstore's runtime was started in parent pid {ob.runtime_pid()} before this process was "
        "forked, and obstore cannot run in a forked child; use the 'spawn' or 'forkserver' start method"
    )


class GCSStore(RemoteStore):
    """A Google Cloud Storage bucket (or prefix) as an ObjectStore, via obstore or google-cloud-storage.

    Args:
        parsed: The parsed ``gs://`` URL.
        storage_options: See the module docstring.
    """

    kind = "gs"

    def __init__(self, parsed: StoreURL, storage_options: Mapping[str, Any] | None = None) -> None:
        opts = dict(storage_options or {})
        register_options(opts)
        preference = str(opts.pop("backend", None) or "auto").lower()
        if preference not in _GCS_BACKENDS:
            raise ConfigError(
                f"unknown GCS backend {preference!r} for {parsed.url!r}; choose one of {', '.join(_GCS_BACKENDS)}"
            )
        self._opts = opts
        self.backend_choice = _choose_gcs_backend(opts, preference)
        self._config: dict[str, Any] = {}
        self._google: tuple[dict[str, Any], tuple[str, Any] | None] | None = None
        super().__init__(parsed, self._build)
        if self.backend_choice == "google":
            try:
                self._google = _google_kwargs(opts)
            except ConfigError as exc:
                raise ConfigError(f"{parsed.url!r}: {exc}") from None
            return
        self._config = _gcs_config(opts)
        emulator = _emulator_host()
        if emulator is not None and "base_url" not in self._config:
            # google-cloud-storage is not installed: point obstore at the emulator the variable names
            self._config.update(base_url=emulator, skip_signature=True)
        if ob.obstore_available():
            try:  # validate the options now; building an obstore store does not start its runtime
                self._obstore_factory()
            except Exception as exc:
                raise _invalid(parsed.url, opts, exc) from None

    def _obstore_factory(self) -> Any:
        from obstore.store import GCSStore as ObsGCSStore

        base_url = self._config.get("base_url")
        return ObsGCSStore(
            self._parsed.bucket,
            config=self._config,
            client_options=ob.client_options(base_url if isinstance(base_url, str) else None),
            retry_config=ob.retry_config(),
        )

    def _google_backend(self) -> Backend:
        if not gcs_backend.available():
            raise StorageError(f'{self.url!r} needs google-cloud-storage (pip install "streamscope[gcs]")')
        if self._google is None:
            self._google = _google_kwargs(self._opts)
        kwargs, spec = self._google

        def make_client() -> Any:
            from google.cloud import storage

            args = dict(kwargs)
            if spec is not None:
                args["credentials"] = _google_credentials(spec)
            return storage.Client(**args)

        return gcs_backend.GoogleBackend(self._parsed.bucket, make_client)

    def _build(self) -> Backend:
        global _warned_fallback
        if self.backend_choice == "google":
            return self._google_backend()
        if not ob.obstore_available():
            raise StorageError(f'{self.url!r} needs obstore or google-cloud-storage (pip install "streamscope[gcs]")')
        if ob.obstore_usable():
            return ob.ObstoreBackend(self._obstore_factory)
        if not gcs_backend.available():
            raise StorageError(_forked_child_message(self.url))
        why = f"obstore's runtime was started in parent pid {ob.runtime_pid()} before fork"
        ev.instant("backend_fallback", "download", url=self.url, backend=gcs_backend.NAME, reason=why)
        if not _warned_fallback:
            _warned_fallback = True
            log.warning(
                "streamscope: using google-cloud-storage instead of obstore for %s in pid %d: %s",
                self.url,
                os.getpid(),
                why,
            )
        try:
            return self._google_backend()
        except ConfigError as exc:
            raise StorageError(
                f"{_forked_child_message(self.url)}; google-cloud-storage cannot take over: {exc}"
            ) from None


class AzureStore(RemoteStore):
    """An Azure Blob Storage container (or prefix) as an ObjectStore, via obstore.

    Args:
        parsed: The parsed ``azure://`` / ``az://`` URL.
        storage_options: See the module docstring.
    """

    kind = "azure"

    def __init__(self, parsed: StoreURL, storage_options: Mapping[str, Any] | None = None) -> None:
        opts = dict(storage_options or {})
        register_options(opts)
        backend = str(opts.pop("backend", None) or "obstore").lower()
        if backend not in ("auto", "obstore"):
            raise ConfigError(f"unknown Azure backend {backend!r} for {parsed.url!r}; the one backend is 'obstore'")
        self._config = _azure_config(opts)
        super().__init__(parsed, self._build)
        if ob.obstore_available():
            try:  # validate the options now; building an obstore store does not start its runtime
                self._factory()
            except Exception as exc:
                raise _invalid(parsed.url, opts, exc) from None

    def _factory(self) -> Any:
        from obstore.store import AzureStore as ObsAzureStore

        endpoint = self._config.get("endpoint")
        return ObsAzureStore(
            self._parsed.bucket,
            config=self._config,
            client_options=ob.client_options(endpoint if isinstance(endpoint, str) else None),
            retry_config=ob.retry_config(),
        )

    def _build(self) -> Backend:
        if not ob.obstore_available():
            raise StorageError(f"{self.url!r} needs the obstore package (pip install obstore)")
        if not ob.obstore_usable():
            raise StorageError(_forked_child_message(self.url))
        return ob.ObstoreBackend(self._factory)
