"""Google Cloud Storage (``gs://``) and Azure Blob Storage (``azure://``, ``az://``).

Each scheme has two clients: obstore, and the client LitData uses (google-cloud-storage,
azure-storage-blob; extras ``gcs`` and ``azure``). ``storage_options["backend"]`` chooses: ``"obstore"``,
``"google"`` (GCS) / ``"azure-storage-blob"`` (Azure), or ``"auto"`` (default), which works like S3's
(:mod:`streamscope.storage.s3`): LitData's client in processes that may fork DataLoader workers, obstore in
the workers (daemonic processes) and wherever LitData's client is not installed or cannot take the options.
obstore's runtime does not survive ``fork``: a forked child of a process that started it switches to
LitData's client (a warning and a ``backend_fallback`` trace event), or, without it, fails with a clear error.

**GCS.** ``auto`` uses google-cloud-storage in every process when

* an option only it understands is given (LitData's ``google.cloud.storage.Client`` arguments:
  ``credentials`` as an object, ``client_options``, ``client_info``, ...), or
* ``STORAGE_EMULATOR_HOST`` is set (the variable google-cloud-storage, and so LitData, follows to an
  emulator; obstore speaks GCS's XML API, which emulators implement in part, and ignores the variable).

Options both clients take: obstore's ``GCSConfig`` keys ``base_url``, ``skip_signature``,
``service_account`` (a path), ``service_account_key`` (JSON text), ``bearer_token``,
``application_credentials``; LitData's ``project`` (obstore does not need it); ``token`` or
``credentials`` as a path to a service-account JSON file, or ``token="anon"`` for anonymous access.

**Azure.** obstore's ``AzureConfig`` keys (``account_name``, ``account_key``, ``sas_key``, ``endpoint``,
``use_emulator``, ...) plus LitData's ``BlobServiceClient`` spelling: ``account_url``
(``https://<account>.blob.core.windows.net``, or an emulator's ``http://host:port/<account>``) gives
``account_name`` (and the ``endpoint`` for other hosts); ``credential`` as a string is the account key (a
SAS token when it holds ``sig=``), as a mapping ``{"account_name", "account_key"}``. azure-storage-blob
is built from account keys, SAS tokens or the emulator; other credentials (service principals, managed
identity) are obstore's alone.

The servers these are tested against: ``tests/support/gcsserver.py`` and ``tests/support/azurite.py``.
"""

from __future__ import annotations

import json
import logging
import multiprocessing
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import urlsplit

from streamscope._core.errors import ConfigError, MissingDependencyError, StorageError
from streamscope.events import kinds
from streamscope.storage import azure_backend, gcs_backend
from streamscope.storage import obstore_backend as ob
from streamscope.storage.redact import redact, register_options, register_secret
from streamscope.storage.remote import Backend, RemoteStore
from streamscope.storage.url import StoreURL

if TYPE_CHECKING:  # obstore is optional, and these are stub-only names
    from obstore.store import AzureConfig, GCSConfig

__all__ = ["AzureStore", "GCSStore", "choose_client"]


log = logging.getLogger("streamscope.storage")

# accepted spellings of storage_options["backend"] -> the client
_GCS_BACKENDS = {"auto": "auto", "obstore": "obstore", "google": "google", "google-cloud-storage": "google"}
_AZURE_BACKENDS = {"auto": "auto", "obstore": "obstore", "azure-storage-blob": "azure", "azure": "azure"}
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
# obstore's credential variables google-cloud-storage does not read (GOOGLE_APPLICATION_CREDENTIALS it does)
_GOOGLE_ENV = (
    ("GOOGLE_SERVICE_ACCOUNT", "file"),
    ("GOOGLE_SERVICE_ACCOUNT_PATH", "file"),
    ("GOOGLE_SERVICE_ACCOUNT_KEY", "json"),
    ("GOOGLE_BEARER_TOKEN", "bearer"),
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


def _gcs_needs_google(opts: Mapping[str, Any]) -> bool:
    """True when only google-cloud-storage can serve these options (see the module docstring)."""
    credentials = opts.get("credentials")
    if any(k in opts for k in _GOOGLE_ONLY) or (credentials is not None and not isinstance(credentials, str)):
        return True
    return _emulator_host() is not None and "base_url" not in opts and gcs_backend.available()


def choose_client(preference: str, alternative_ok: bool) -> tuple[str, str | None]:
    """``("obstore" | "alternative", why)`` for this process; ``why`` says why obstore was wanted but not used.

    Args:
        preference: ``"auto"``, ``"obstore"`` or ``"alternative"`` (LitData's client).
        alternative_ok: LitData's client is installed and can take the store's options.
    """
    if preference == "alternative" and alternative_ok:
        return "alternative", None
    if not ob.obstore_available():
        return ("alternative", None) if alternative_ok else ("obstore", None)
    if preference == "auto" and alternative_ok and not multiprocessing.current_process().daemon:
        return "alternative", None  # this process may fork DataLoader workers: keep obstore's runtime out
    if not ob.obstore_usable() and alternative_ok:
        return "alternative", f"obstore's runtime was started in parent pid {ob.runtime_pid()} before fork"
    return "obstore", None


def _note_fallback(url: str, client: str, why: str) -> None:
    global _warned_fallback
    kinds.backend_fallback(url=url, backend=client, reason=why)
    if not _warned_fallback:
        _warned_fallback = True
        log.warning("streamscope: using %s instead of obstore for %s in pid %d: %s", client, url, os.getpid(), why)


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
    # google-cloud-storage reads STORAGE_EMULATOR_HOST itself, but its downloads need the scheme in it
    base_url = opts.get("base_url") or _emulator_host() or os.environ.get("GOOGLE_BASE_URL")
    client_options = kwargs.get("client_options") or {}
    if base_url and isinstance(client_options, Mapping):
        kwargs["client_options"] = {"api_endpoint": str(base_url), **dict(client_options)}
    elif opts.get("base_url"):
        raise ConfigError("GCS storage_options: give 'base_url' or a ClientOptions object, not both")
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
    if not kinds:  # as obstore: its environment variables, which google-cloud-storage does not read
        for var, kind in _GOOGLE_ENV:
            if os.environ.get(var):
                kinds.append((kind, os.environ[var]))
                register_secret(os.environ[var])
                break
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
    # google-auth ships py.typed but leaves these constructors unannotated: hence the no-untyped-call ignores
    kind, value = spec
    if kind == "anonymous":
        from google.auth.credentials import AnonymousCredentials

        return AnonymousCredentials()  # type: ignore[no-untyped-call]
    if kind == "file":
        from google.oauth2 import service_account

        return service_account.Credentials.from_service_account_file(str(value))  # type: ignore[no-untyped-call]
    if kind == "info":
        from google.oauth2 import service_account

        return service_account.Credentials.from_service_account_info(value)  # type: ignore[no-untyped-call]
    if kind == "adc":
        import google.auth

        return google.auth.load_credentials_from_file(str(value))[0]  # type: ignore[no-untyped-call]
    from google.oauth2.credentials import Credentials

    return Credentials(token=str(value))  # type: ignore[no-untyped-call]


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


def _obstore_client(url: str, alternative: str, extra: str) -> None:
    """Raise when obstore cannot serve ``url`` in this process (missing, or forked from a process using it)."""
    if not ob.obstore_available():
        raise MissingDependencyError(
            f'{url!r} needs obstore or {alternative}, neither is installed: pip install "streamscope[{extra}]"',
            name="obstore",
        )
    if not ob.obstore_usable():
        raise StorageError(
            f"{url!r}: obstore's runtime was started in parent pid {ob.runtime_pid()} before this process was "
            f"forked, and obstore cannot run in a forked child; install {alternative} (pip install "
            f"\"streamscope[{extra}]\"), which then serves such processes, or use the 'spawn' start method"
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
        asked = str(opts.pop("backend", None) or "auto").lower()
        if asked not in _GCS_BACKENDS:
            raise ConfigError(
                f"unknown GCS backend {asked!r} for {parsed.url!r}; choose one of {', '.join(_GCS_BACKENDS)}"
            )
        self.preference = _GCS_BACKENDS[asked]
        if self.preference == "auto" and _gcs_needs_google(opts):
            self.preference = "google"
        self._config: dict[str, Any] = {}
        self._google: tuple[dict[str, Any], tuple[str, Any] | None] | None = None
        endpoint = opts.get("base_url") or _emulator_host() or os.environ.get("GOOGLE_BASE_URL")
        super().__init__(parsed, self._build, endpoint=endpoint if isinstance(endpoint, str) else None)
        if self.preference != "obstore" and gcs_backend.available():
            try:
                self._google = _google_kwargs(opts)
            except ConfigError as exc:
                if self.preference == "google":
                    raise ConfigError(f"{parsed.url!r}: {exc}") from None
        if self.preference == "google":
            if not gcs_backend.available():
                raise ConfigError(f'{parsed.url!r} needs google-cloud-storage (pip install "streamscope[gcs]")')
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

        base_url = self._config.get("base_url") or os.environ.get("GOOGLE_BASE_URL")
        return ObsGCSStore(
            self._parsed.bucket,
            config=cast("GCSConfig", self._config),  # the user's keys: obstore checks them here
            client_options=ob.client_options(base_url if isinstance(base_url, str) else None),
            retry_config=ob.retry_config(),
        )

    def _build(self) -> Backend:
        google = self._google
        pref = "alternative" if self.preference == "google" else self.preference
        name, why = choose_client(pref, google is not None)
        if name == "obstore":
            _obstore_client(self.url, gcs_backend.NAME, "gcs")
            return ob.ObstoreBackend(self._obstore_factory)
        assert google is not None
        if why is not None:
            _note_fallback(self.url, gcs_backend.NAME, why)
        kwargs, spec = google

        def make_client() -> Any:
            from google.cloud import storage

            args = dict(kwargs)
            if spec is not None:
                args["credentials"] = creds = _google_credentials(spec)
                # bucket operations need no project; without one the client would look for default credentials
                args.setdefault("project", getattr(creds, "project_id", None) or "<none>")
            return storage.Client(**args)

        return gcs_backend.GoogleBackend(self._parsed.bucket, make_client)


class AzureStore(RemoteStore):
    """An Azure Blob Storage container (or prefix) as an ObjectStore, via obstore or azure-storage-blob.

    Args:
        parsed: The parsed ``azure://`` / ``az://`` URL.
        storage_options: See the module docstring.
    """

    kind = "azure"

    def __init__(self, parsed: StoreURL, storage_options: Mapping[str, Any] | None = None) -> None:
        opts = dict(storage_options or {})
        register_options(opts)
        asked = str(opts.pop("backend", None) or "auto").lower()
        if asked not in _AZURE_BACKENDS:
            raise ConfigError(
                f"unknown Azure backend {asked!r} for {parsed.url!r}; choose one of {', '.join(_AZURE_BACKENDS)}"
            )
        self.preference = _AZURE_BACKENDS[asked]
        self._config = _azure_config(opts)
        self._arguments: dict[str, Any] | None = None
        endpoint = self._config.get("endpoint") or azure_backend.endpoint_from_environment()
        super().__init__(parsed, self._build, endpoint=endpoint if isinstance(endpoint, str) else None)
        if self.preference != "obstore" and azure_backend.available():
            try:
                self._arguments = azure_backend.client_arguments(self._config, parsed.bucket)
            except ConfigError as exc:
                if self.preference == "azure":
                    raise ConfigError(f"{parsed.url!r}: {exc}") from None
        if self.preference == "azure" and not azure_backend.available():
            raise ConfigError(f'{parsed.url!r} needs azure-storage-blob (pip install "streamscope[azure]")')
        if ob.obstore_available():
            try:  # validate the options now; building an obstore store does not start its runtime
                self._factory()
            except Exception as exc:
                raise _invalid(parsed.url, opts, exc) from None

    def _factory(self) -> Any:
        from obstore.store import AzureStore as ObsAzureStore

        # obstore takes the endpoint from the environment too; plain http must then be allowed here as well
        endpoint = self._config.get("endpoint") or azure_backend.endpoint_from_environment()
        return ObsAzureStore(
            self._parsed.bucket,
            config=cast("AzureConfig", self._config),  # the user's keys: obstore checks them here
            client_options=ob.client_options(endpoint if isinstance(endpoint, str) else None),
            retry_config=ob.retry_config(),
        )

    def _build(self) -> Backend:
        pref = "alternative" if self.preference == "azure" else self.preference
        name, why = choose_client(pref, self._arguments is not None)
        if name == "obstore":
            _obstore_client(self.url, azure_backend.NAME, "azure")
            return ob.ObstoreBackend(self._factory)
        assert self._arguments is not None
        if why is not None:
            _note_fallback(self.url, azure_backend.NAME, why)
        return azure_backend.AzureBlobBackend(self._parsed.bucket, self._arguments)
