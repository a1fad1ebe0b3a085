"""S3 and S3-compatible stores (``s3://``, ``r2://``) over obstore or boto3.

``storage_options`` accepts LitData's boto3 spelling and obstore's:

=====================  ==================================================================================
endpoint               ``endpoint_url``, ``endpoint``, ``aws_endpoint``; env ``AWS_ENDPOINT_URL_S3``,
                       ``AWS_ENDPOINT_URL``
access key id          ``aws_access_key_id``, ``access_key_id``, ``key``; env ``AWS_ACCESS_KEY_ID``
secret key             ``aws_secret_access_key``, ``secret_access_key``, ``secret``; env
                       ``AWS_SECRET_ACCESS_KEY``
session token          ``aws_session_token``, ``session_token``, ``token``; env ``AWS_SESSION_TOKEN``
region                 ``region_name``, ``region``, ``aws_region``; env ``AWS_REGION``, ``AWS_DEFAULT_REGION``
TLS                    ``verify`` (False, or a CA bundle path), ``ca_bundle``; env ``AWS_CA_BUNDLE``,
                       ``SSL_CERT_FILE``
profile                ``profile_name`` / env ``AWS_PROFILE`` (boto3 backend)
backend                ``"obstore"``, ``"boto3"`` or ``"auto"`` (default: knob ``storage_s3_backend``)
=====================  ==================================================================================

Other keys go to the backend as they are (obstore ``S3Config`` keys, or boto3 client arguments).

Which backend runs where (``auto``): obstore in daemonic processes (PyTorch DataLoader workers, fork or
spawn), boto3 everywhere else (the training process, DDP ranks whether launched by torchrun or
``mp.spawn``). A daemonic process cannot start multiprocessing children, so obstore's runtime never gets
inherited by a fork from there, while the processes that do fork workers never start it. With
``backend="obstore"`` every process uses obstore; a forked child of a process that already started it
cannot (obstore would hang there) and switches to boto3 with a warning and a ``backend_fallback`` trace
event rather than silently.

Why a forked child must not use its parent's obstore: the child inherits the parent's epoll instance (the
same kernel object, not a copy). If the child's obstore registered sockets there, the parent's tokio IO
driver would receive events carrying pointers into the child's memory and crash (SIGSEGV in
``Driver::turn``). A before-fork hook (:mod:`streamscope.storage.obstore_backend`) notices a running runtime
by its threads (``tokio*``) even when user code or another library started it.

Exceptions to ``auto``, both for speed and both switchable by knobs:

* ``storage_s3_streaming_backend`` (default ``obstore``): the chunk downloads of an iteration (the cache's
  prefetcher, :meth:`S3Store.streaming_store`) use obstore in every process, so ``num_workers=0`` streams
  as fast as workers do. Opening a dataset and random access (``ds[i]``) keep ``auto``. Cost: DataLoader
  workers forked by this process AFTER it iterated a dataset itself use boto3 (with the warning above).
* ``storage_s3_light_get`` (default on): where boto3 would serve a store with an explicit endpoint and
  explicit keys, whole-object GETs (``index.json``) use a stdlib SigV4 client (:mod:`.sigv4`); boto3's
  client (0.1-0.3 s to build) is built only when another operation needs it. Clients are shared by the
  stores of one process that have the same bucket and options.
"""

from __future__ import annotations

import copy
import datetime
import logging
import multiprocessing
import os
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, cast

from streamscope._core import config
from streamscope._core.errors import ConfigError, StorageAuthError, StorageError
from streamscope._core.optional import install_hint
from streamscope.events import kinds
from streamscope.storage import obstore_backend as ob
from streamscope.storage import sigv4
from streamscope.storage.redact import redact, redact_options, register_secret
from streamscope.storage.remote import Backend, RemoteStore
from streamscope.storage.url import StoreURL

if TYPE_CHECKING:  # obstore is optional, and this is a stub-only name
    from obstore.store import S3Config

__all__ = ["S3Options", "S3Store", "choose_backend"]


log = logging.getLogger("streamscope.storage")

_ALIASES: dict[str, tuple[str, ...]] = {
    "endpoint": ("endpoint_url", "endpoint", "aws_endpoint", "aws_endpoint_url"),
    "access_key": ("aws_access_key_id", "access_key_id", "key"),
    "secret_key": ("aws_secret_access_key", "secret_access_key", "secret"),
    "token": ("aws_session_token", "session_token", "token"),
    "region": ("region_name", "region", "aws_region"),
    "verify": ("verify",),
    "ca_bundle": ("ca_bundle", "aws_ca_bundle"),
    "profile": ("profile_name", "profile", "aws_profile"),
    "backend": ("backend",),
}
_ENV: dict[str, tuple[str, ...]] = {
    "endpoint": ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"),
    "access_key": ("AWS_ACCESS_KEY_ID",),
    "secret_key": ("AWS_SECRET_ACCESS_KEY",),
    "token": ("AWS_SESSION_TOKEN",),
    "region": ("AWS_REGION", "AWS_DEFAULT_REGION"),
    "ca_bundle": ("AWS_CA_BUNDLE", "SSL_CERT_FILE"),
    "profile": ("AWS_PROFILE",),
}
_BACKENDS = ("auto", "obstore", "boto3")
_warned_fallback = False

# Clients shared by the stores of one process that have the same bucket and options: a dataset opens its store
# more than once (index, then chunks), and building a boto3 client costs 0.1-0.3 s. Keyed with the pid that
# built them, so a forked child builds its own.
_CLIENTS: dict[tuple[Any, ...], tuple[int, Backend]] = {}
_CLIENTS_LOCK = threading.Lock()
_CLIENTS_MAX = 64


def _reset_clients_in_child() -> None:
    global _CLIENTS_LOCK
    _CLIENTS_LOCK = threading.Lock()  # a parent thread may have held it at fork time
    _CLIENTS.clear()


os.register_at_fork(after_in_child=_reset_clients_in_child)


class S3Options:
    """``storage_options`` resolved into one normalised set (explicit options win over the environment)."""

    def __init__(self, storage_options: Mapping[str, Any] | None, url: str) -> None:
        opts = dict(storage_options or {})
        self.url = url
        resolved: dict[str, Any] = {}
        for field, names in _ALIASES.items():
            for name in names:
                if name in opts:
                    value = opts.pop(name)
                    if field not in resolved and value is not None:
                        resolved[field] = value
        explicit_keys = "access_key" in resolved or "secret_key" in resolved
        for field, envs in _ENV.items():
            if explicit_keys and field in ("access_key", "secret_key", "token"):
                continue  # credentials come as a set: never mix explicit keys with an environment token
            if field not in resolved:
                for var in envs:
                    if os.environ.get(var):
                        resolved[field] = os.environ[var]
                        break
        self.endpoint: str | None = resolved.get("endpoint")
        self.access_key: str | None = resolved.get("access_key")
        self.secret_key: str | None = resolved.get("secret_key")
        self.token: str | None = resolved.get("token")
        self.region: str | None = resolved.get("region")
        self.profile: str | None = resolved.get("profile")
        verify = resolved.get("verify", True)
        self.insecure = verify is False
        ca = verify if isinstance(verify, str) else resolved.get("ca_bundle")
        self.ca_file: str | None = ca if isinstance(ca, str) and ca else None
        backend = str(resolved.get("backend") or config.get("storage_s3_backend")).lower()
        if backend not in _BACKENDS:
            raise ConfigError(f"unknown S3 backend {backend!r} for {url!r}; choose one of {', '.join(_BACKENDS)}")
        self.backend = backend
        # boto3 client arguments we pass through; every other key is an obstore S3Config key.
        self.boto3_extra: dict[str, Any] = {k: opts.pop(k) for k in ("config", "use_ssl", "api_version") if k in opts}
        self.extra = opts
        for secret in (self.access_key, self.secret_key, self.token):
            register_secret(secret)
        if self.endpoint is not None:
            if not isinstance(self.endpoint, str) or not self.endpoint.lower().startswith(("http://", "https://")):
                raise ConfigError(f"S3 endpoint must be an http(s):// URL, got {redact(self.endpoint)!r} for {url!r}")
        if self.ca_file is not None and not os.path.isfile(self.ca_file):
            raise ConfigError(f"CA bundle {self.ca_file!r} (for {url!r}) does not exist")

    def __repr__(self) -> str:
        shown = {k: v for k, v in vars(self).items() if v not in (None, {}, False)}
        for k in ("access_key", "secret_key", "token"):
            if k in shown:
                shown[k] = "***"
        return f"S3Options({redact_options(shown)})"

    def ca_pem(self) -> str | None:
        if not self.ca_file:
            return None
        with open(self.ca_file, encoding="utf-8") as f:
            return f.read()


def _may_fork_workers() -> bool:
    """False in daemonic processes (DataLoader workers): multiprocessing forbids them children."""
    return not multiprocessing.current_process().daemon


def choose_backend(preference: str) -> tuple[str, str | None]:
    """Which backend to use in this process, and why it differs from the preference (None if it does not)."""
    if not ob.obstore_available():
        return "boto3", None if preference != "obstore" else "obstore is not installed"
    if preference == "boto3":
        return "boto3", None
    if preference == "auto" and _may_fork_workers():
        return "boto3", None
    if not ob.obstore_usable():
        return "boto3", f"obstore's runtime was started in parent pid {ob.runtime_pid()} before fork"
    return "obstore", None


class S3Store(RemoteStore):
    """An S3 bucket (or prefix) as an ObjectStore.

    Args:
        parsed: The parsed ``s3://`` or ``r2://`` URL.
        storage_options: See the module docstring.
    """

    def __init__(self, parsed: StoreURL, storage_options: Mapping[str, Any] | None = None) -> None:
        self.options = S3Options(storage_options, parsed.url)
        if parsed.scheme == "r2" and not self.options.endpoint:
            raise ConfigError(
                f"{parsed.url!r}: r2:// needs storage_options['endpoint_url'] "
                "(https://<account id>.r2.cloudflarestorage.com) and R2 credentials"
            )
        super().__init__(parsed, self._build, endpoint=self.options.endpoint)
        if self.options.extra:
            self._validate_extra()

    def streaming_store(self) -> S3Store:
        """The store for the chunk downloads of an iteration (the cache's prefetcher) in this process.

        With ``backend="auto"`` (the default) this is a twin store that prefers the client named by the
        ``storage_s3_streaming_backend`` knob (obstore): a process that iterates a dataset itself
        (``num_workers=0``) then downloads as fast as DataLoader workers do. Index reads and random access
        (``ds[i]``) keep the ``auto`` choice, so merely opening a dataset never starts obstore's runtime in a
        process that will fork workers. An explicit ``backend`` in ``storage_options`` is kept as is.
        """
        pref = str(config.get("storage_s3_streaming_backend")).lower()
        if pref not in _BACKENDS:
            raise ConfigError(
                f"unknown storage_s3_streaming_backend {pref!r} for {self.url!r}; choose one of {', '.join(_BACKENDS)}"
            )
        if self.options.backend != "auto" or pref == "auto":
            return self
        twin = copy.copy(self)
        twin.options = copy.copy(self.options)
        twin.options.backend = pref
        twin._make_backend = twin._build  # the original's bound method would build with the original options
        twin._backend_obj = None
        twin._backend_pid = -1
        twin._lock = threading.Lock()
        twin._lock_pid = os.getpid()
        return twin

    def _validate_extra(self) -> None:
        """Reject unknown storage_options now, not at the first request (building an obstore store is
        fork-safe: it does not start obstore's runtime)."""
        keys = ", ".join(sorted(self.options.extra))
        if not ob.obstore_available():
            raise ConfigError(
                f"storage_options {keys} for {self.url!r} are obstore settings, but obstore is missing: "
                + install_hint("obstore")
            )
        try:
            self._obstore_factory(resolve_credentials=False)()
        except Exception as exc:
            raise ConfigError(redact(f"storage_options for {self.url!r} are not valid ({keys}): {exc}")) from None

    def _build(self) -> Backend:
        global _warned_fallback
        name, why = choose_backend(self.options.backend)
        if why is not None:  # obstore wanted (explicitly, or by "auto" in a DataLoader worker) but not usable
            kinds.backend_fallback(url=self.url, backend=name, reason=why)
            if not _warned_fallback:
                _warned_fallback = True
                log.warning(
                    "streamscope: using boto3 instead of obstore for %s in pid %d: %s", self.url, os.getpid(), why
                )
        key = self._client_key(name)
        if key is None:
            return self._obstore_backend() if name == "obstore" else self._boto3_backend()
        pid = os.getpid()
        with _CLIENTS_LOCK:
            hit = _CLIENTS.get(key)
            if hit is not None and hit[0] == pid:
                return hit[1]
        backend = self._obstore_backend() if name == "obstore" else self._boto3_backend()
        with _CLIENTS_LOCK:
            hit = _CLIENTS.get(key)
            if hit is not None and hit[0] == pid:
                return hit[1]  # another thread built one meanwhile: share it
            if len(_CLIENTS) >= _CLIENTS_MAX:
                _CLIENTS.clear()
            _CLIENTS[key] = (pid, backend)
        return backend

    def _client_key(self, name: str) -> tuple[Any, ...] | None:
        """What makes two stores' clients interchangeable in one process; None when unsure (no sharing)."""
        o = self.options
        if o.boto3_extra:
            return None  # a botocore Config object: not compared, not shared
        try:
            extra = tuple(sorted((k, repr(v)) for k, v in o.extra.items()))
        except TypeError:
            return None
        return (
            name,
            self._parsed.bucket,
            o.endpoint,
            o.access_key,
            o.secret_key,
            o.token,
            o.region,
            o.profile,
            o.insecure,
            o.ca_file,
            extra,
        )

    def _obstore_backend(self) -> Backend:
        return ob.ObstoreBackend(self._obstore_factory())

    def _obstore_factory(self, resolve_credentials: bool = True) -> Any:
        o = self.options
        bucket = self._parsed.bucket

        def factory() -> Any:
            from obstore.store import S3Store as ObsS3Store

            cfg: dict[str, Any] = {}
            if o.endpoint:
                cfg["endpoint"] = o.endpoint
            if o.region:
                cfg["region"] = o.region
            elif o.endpoint:
                cfg["region"] = "us-east-1"
            if o.access_key:
                cfg["access_key_id"] = o.access_key
            if o.secret_key:
                cfg["secret_access_key"] = o.secret_key
            if o.token:
                cfg["token"] = o.token
            cfg.update(o.extra)
            provider = None
            if resolve_credentials and not (o.access_key and o.secret_key):
                # profiles, SSO, shared credentials files: obstore's own chain does not read them; boto3 does
                provider = _boto3_credentials(o.profile)
            return ObsS3Store(
                bucket,
                config=cast("S3Config", cfg),  # o.extra holds the user's keys: obstore checks them here
                client_options=ob.client_options(o.endpoint, o.ca_pem(), o.insecure),
                retry_config=ob.retry_config(),
                credential_provider=provider,
            )

        return factory

    def _boto3_backend(self) -> Backend:
        from streamscope.storage.boto3_backend import Boto3Backend

        o = self.options
        kwargs: dict[str, Any] = dict(o.boto3_extra)
        if o.extra:
            log.info("storage_options %s of %s apply to obstore only; boto3 ignores them", sorted(o.extra), self.url)
        if o.endpoint:
            kwargs["endpoint_url"] = o.endpoint
        if o.region:
            kwargs["region_name"] = o.region
        elif o.endpoint:
            kwargs["region_name"] = "us-east-1"
        if o.access_key:
            kwargs["aws_access_key_id"] = o.access_key
        if o.secret_key:
            kwargs["aws_secret_access_key"] = o.secret_key
        if o.token:
            kwargs["aws_session_token"] = o.token
        if o.insecure:
            kwargs["verify"] = False
        elif o.ca_file:
            kwargs["verify"] = o.ca_file
        session = {"profile_name": o.profile} if o.profile else None
        if not o.boto3_extra and not o.profile and sigv4.eligible(o.endpoint, o.access_key, o.secret_key):
            assert o.endpoint and o.access_key and o.secret_key
            getter = sigv4.SignedGetter(
                o.endpoint,
                self._parsed.bucket,
                o.region or "us-east-1",
                o.access_key,
                o.secret_key,
                o.token,
                ca_file=o.ca_file,
                insecure=o.insecure,
            )
            bucket = self._parsed.bucket
            return sigv4.LightGetBackend(getter, lambda: Boto3Backend(bucket, kwargs, session))
        try:
            return Boto3Backend(self._parsed.bucket, kwargs, session)
        except StorageError:
            raise
        except Exception as exc:  # pragma: no cover - defensive
            raise StorageError(redact(f"cannot configure a boto3 client for {self.url!r}: {exc}")) from None


def _boto3_credentials(profile: str | None) -> Any:
    """An obstore credential provider backed by boto3's credential chain (profiles, SSO, shared files,
    container and instance roles), refreshed as boto3 refreshes them; None when boto3 finds nothing."""
    try:
        import boto3
    except ImportError:
        return None
    try:
        creds = boto3.session.Session(profile_name=profile).get_credentials()
    except Exception as exc:
        raise StorageAuthError(redact(f"cannot load AWS credentials (profile {profile!r}): {exc}")) from None
    if creds is None:
        return None

    def provider() -> dict[str, Any]:
        frozen = creds.get_frozen_credentials()
        for secret in (frozen.access_key, frozen.secret_key, frozen.token):
            register_secret(secret)
        return {
            "access_key_id": frozen.access_key,
            "secret_access_key": frozen.secret_key,
            "token": frozen.token,
            # ask again in a while: boto3 refreshes temporary credentials behind get_frozen_credentials()
            "expires_at": datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(minutes=10),
        }

    return provider
