"""GCS and Azure without their servers: construction, option translation, which client serves which
process, error mapping; requests go where the options say (a closed port or a garbage server on loopback).

The same backends against real servers (the GCS emulator, Azurite): ``test_contract.py`` and
``test_cloud_servers.py``.
"""

from __future__ import annotations

import pytest

from streamscope._core import config
from streamscope._core.errors import (
    ConfigError,
    InvalidRangeError,
    ObjectChangedError,
    ObjectNotFoundError,
    StorageAuthError,
    StorageConnectionError,
    StorageError,
    TransientStorageError,
    TruncatedBodyError,
)
from streamscope.storage import open_store
from streamscope.storage.cloud import AzureStore, GCSStore, _azure_config, _gcs_config
from tests.support.faultproxy import GarbageServer, closed_port


@pytest.fixture(autouse=True)
def _two_attempts():
    config.set_value("storage_max_attempts", 2)
    config.set_value("storage_retry_base_delay", 0.005)
    yield
    config.reset("storage_max_attempts")
    config.reset("storage_retry_base_delay")


def test_construction_and_types() -> None:
    gs = open_store("gs://my-bucket/some/prefix", {"skip_signature": True, "project": "p"})
    az = open_store("azure://container/p", {"account_name": "acct", "skip_signature": True})
    az2 = open_store("az://container", {"account_url": "https://acct.blob.core.windows.net", "credential": "a2V5"})
    assert isinstance(gs, GCSStore) and gs.url == "gs://my-bucket/some/prefix"
    assert isinstance(az, AzureStore) and az.url == "azure://container/p"
    assert isinstance(az2, AzureStore) and az2.url == "az://container"
    assert gs.local_path("x") is None


def test_option_translation(tmp_path) -> None:
    sa = tmp_path / "sa.json"
    sa.write_text("{}")
    assert _gcs_config({"project": "p", "token": str(sa)}) == {"service_account": str(sa)}
    with pytest.raises(ConfigError):
        _gcs_config({"token": {"not": "a path"}})
    assert _azure_config({"account_url": "https://acct.blob.core.windows.net", "credential": "k"}) == {
        "account_name": "acct",
        "account_key": "k",
    }
    assert _azure_config({"account_url": "http://127.0.0.1:10000/devstore/"}) == {
        "endpoint": "http://127.0.0.1:10000/devstore",
        "account_name": "devstore",  # path-style (emulator) URLs name the account first
    }


@pytest.mark.parametrize("url", ["gs://bucket-a", "azure://container-a"])
def test_unknown_option_is_a_config_error(url: str) -> None:
    with pytest.raises(ConfigError) as info:
        open_store(url, {"no_such_option": 1})
    assert "no_such_option" in str(info.value) and url in str(info.value)


def test_unreachable_gcs_and_azure_name_the_url() -> None:
    port = closed_port()
    gs = open_store("gs://my-bucket/x", {"base_url": f"http://127.0.0.1:{port}", "skip_signature": True})
    with pytest.raises(StorageConnectionError) as info:
        gs.get("k")
    assert "gs://my-bucket/x/k" in str(info.value)
    az = open_store(
        "azure://container/x", {"account_name": "acct", "endpoint": f"http://127.0.0.1:{port}", "skip_signature": True}
    )
    with pytest.raises(StorageConnectionError) as info:
        az.head("k")
    assert "azure://container/x/k" in str(info.value)


def test_gcs_not_found_maps() -> None:
    with GarbageServer(status=404, payload=b"No such object") as g:
        gs = open_store("gs://my-bucket/x", {"base_url": g.url, "skip_signature": True})
        with pytest.raises(ObjectNotFoundError) as info:
            gs.get("k")
        assert "gs://my-bucket/x/k" in str(info.value)
        assert not gs.exists("k")


# -- which client serves a process ------------------------------------------------------------------


def test_choose_client(monkeypatch) -> None:
    import multiprocessing
    from types import SimpleNamespace

    from streamscope.storage import cloud
    from streamscope.storage import obstore_backend as ob

    monkeypatch.setattr(ob, "_RUNTIME_PID", None)
    assert cloud.choose_client("auto", True) == ("alternative", None)  # may fork workers: no obstore here
    assert cloud.choose_client("auto", False) == ("obstore", None)
    assert cloud.choose_client("obstore", True) == ("obstore", None)
    assert cloud.choose_client("alternative", True) == ("alternative", None)
    monkeypatch.setattr(multiprocessing, "current_process", lambda: SimpleNamespace(daemon=True))  # a worker
    assert cloud.choose_client("auto", True) == ("obstore", None)
    monkeypatch.setattr(ob, "_RUNTIME_PID", -12345)  # "started in the parent before fork"
    name, why = cloud.choose_client("auto", True)
    assert name == "alternative" and "-12345" in why
    assert cloud.choose_client("obstore", False) == ("obstore", None)  # nothing to fall back to: caller raises
    monkeypatch.setattr(ob, "obstore_available", lambda: False)
    assert cloud.choose_client("obstore", True) == ("alternative", None)


@pytest.mark.parametrize("url", ["azure://cont/p", "gs://bkt/p"])
def test_forked_child_falls_back_or_says_how_to_fix(url: str, monkeypatch) -> None:
    from streamscope import events as ev
    from streamscope.storage import azure_backend, cloud, gcs_backend
    from streamscope.storage import obstore_backend as ob

    opts = {"account_name": "acct", "account_key": "a2V5a2V5a2V5"} if url.startswith("azure") else {"token": "anon"}
    monkeypatch.setattr(ob, "_RUNTIME_PID", -12345)
    monkeypatch.setattr(cloud, "_warned_fallback", True)  # no log line
    ev.drain()
    ev.ACTIVE.add("download")
    try:
        store = open_store(url, {**opts, "backend": "obstore"})
        with pytest.raises(StorageError) as info:
            _ = store.backend_name
        extra = "azure" if url.startswith("azure") else "gcs"
        assert "forked" in str(info.value) and f"streamscope[{extra}]" in str(info.value)
        store = open_store(url, opts)  # auto
        import multiprocessing
        from types import SimpleNamespace

        monkeypatch.setattr(multiprocessing, "current_process", lambda: SimpleNamespace(daemon=True))
        assert store.backend_name in (azure_backend.NAME, gcs_backend.NAME)
    finally:
        ev.ACTIVE.discard("download")
    assert any(e[1] == "backend_fallback" for e in ev.drain())


# -- option translation ----------------------------------------------------------------------------


def test_gcs_needs_google(monkeypatch) -> None:
    from streamscope.storage.cloud import _gcs_needs_google

    monkeypatch.delenv("STORAGE_EMULATOR_HOST", raising=False)
    assert not _gcs_needs_google({"project": "p", "skip_signature": True, "credentials": "/some/file.json"})
    assert _gcs_needs_google({"client_options": {"api_endpoint": "http://x"}})
    assert _gcs_needs_google({"credentials": object()})
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", "127.0.0.1:1")
    assert _gcs_needs_google({})
    assert not _gcs_needs_google({"base_url": "http://127.0.0.1:2"})  # an explicit endpoint wins


def test_google_kwargs(tmp_path, monkeypatch) -> None:
    from streamscope.storage.cloud import _google_kwargs

    monkeypatch.delenv("STORAGE_EMULATOR_HOST", raising=False)
    assert _google_kwargs({"base_url": "http://h:1", "skip_signature": True}) == (
        {"client_options": {"api_endpoint": "http://h:1"}, "project": "<none>"},
        ("anonymous", None),
    )
    assert _google_kwargs({"token": "anon", "project": "p"}) == ({"project": "p"}, ("anonymous", None))
    sa = tmp_path / "sa.json"
    sa.write_text("{}")
    assert _google_kwargs({"credentials": str(sa)}) == ({}, ("file", str(sa)))
    assert _google_kwargs({"service_account_key": '{"a": 1}'}) == ({}, ("info", {"a": 1}))
    creds = object()
    assert _google_kwargs({"credentials": creds, "project": "p"}) == ({"project": "p", "credentials": creds}, None)
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", "127.0.0.1:9")  # downloads need the scheme
    assert _google_kwargs({})[0] == {"client_options": {"api_endpoint": "http://127.0.0.1:9"}}
    bad = [
        ({"credentials": str(sa), "skip_signature": True}, "more than one set of credentials"),
        ({"service_account_key": "not json"}, "not JSON"),
        ({"service_account": str(tmp_path / "missing.json")}, "does not exist"),
        ({"google_service_account": "x"}, "not google-cloud-storage Client arguments"),
        ({"token": {"a": 1}}, "token"),
    ]
    for opts, words in bad:
        with pytest.raises(ConfigError, match=words):
            _google_kwargs(opts)


def test_azure_credential_spellings() -> None:
    assert _azure_config({"account_name": "a", "credential": "?sv=2022&sig=abc%3D"}) == {
        "account_name": "a",
        "sas_key": "sv=2022&sig=abc%3D",
    }
    assert _azure_config({"credential": {"account_name": "a", "account_key": "k"}}) == {
        "account_name": "a",
        "account_key": "k",
    }
    with pytest.raises(ConfigError, match="credential"):
        _azure_config({"credential": 42})


def test_azure_blob_client_arguments(monkeypatch) -> None:
    from streamscope.storage.azure_backend import client_arguments

    assert client_arguments({"account_name": "a", "account_key": "k"}, "c") == {
        "account_url": "https://a.blob.core.windows.net",
        "credential": {"account_name": "a", "account_key": "k"},
    }
    assert client_arguments({"account_name": "a", "sas_key": "sv=1&sig=2", "endpoint": "http://h/a"}, "c") == {
        "account_url": "http://h/a",
        "credential": "sv=1&sig=2",
    }
    monkeypatch.setenv("AZURITE_BLOB_STORAGE_URL", "http://127.0.0.1:7")
    emulator = client_arguments({"use_emulator": True}, "c")
    assert emulator["account_url"] == "http://127.0.0.1:7/devstoreaccount1"
    assert emulator["credential"]["account_name"] == "devstoreaccount1"
    for cfg, words in (
        ({"account_key": "k"}, "account_name"),
        ({"account_name": "a"}, "account_key"),
        ({"account_name": "a", "client_secret": "s"}, "client_secret"),
    ):
        with pytest.raises(ConfigError, match=words):
            client_arguments(cfg, "c")


@pytest.mark.parametrize("url", ["gs://bkt", "azure://cont"])
def test_unknown_backend_is_a_config_error(url: str) -> None:
    with pytest.raises(ConfigError, match="backend"):
        open_store(url, {"backend": "boto3"})


# -- error mapping of LitData's clients --------------------------------------------------------------


def _google_errors() -> list[tuple[BaseException, type]]:
    pytest.importorskip("google.cloud.storage")
    import requests
    from google.api_core import exceptions as gx
    from google.auth.exceptions import DefaultCredentialsError
    from google.resumable_media.common import DataCorruption

    return [
        (gx.NotFound("no such object"), ObjectNotFoundError),
        (gx.Forbidden("denied"), StorageAuthError),
        (gx.PreconditionFailed("generation"), ObjectChangedError),
        (gx.RequestRangeNotSatisfiable("range"), InvalidRangeError),
        (gx.ServiceUnavailable("later"), TransientStorageError),
        (gx.TooManyRequests("slow down"), TransientStorageError),
        (DataCorruption(None, "checksum mismatch"), TruncatedBodyError),
        (requests.exceptions.ChunkedEncodingError("cut"), TruncatedBodyError),
        (requests.exceptions.ConnectionError("Failed to establish a new connection"), StorageConnectionError),
        (DefaultCredentialsError("none found"), StorageAuthError),
    ]


def _azure_errors() -> list[tuple[BaseException, type]]:
    pytest.importorskip("azure.storage.blob")
    from azure.core import exceptions as ax

    def http(cls: type, status: int, code: str) -> BaseException:
        exc = cls(message=code)
        exc.status_code, exc.error_code = status, code
        return exc

    return [
        (http(ax.ResourceNotFoundError, 404, "BlobNotFound"), ObjectNotFoundError),
        (http(ax.HttpResponseError, 403, "AuthorizationFailure"), StorageAuthError),
        (http(ax.ResourceModifiedError, 412, "ConditionNotMet"), ObjectChangedError),
        (http(ax.HttpResponseError, 416, "InvalidRange"), InvalidRangeError),
        (http(ax.HttpResponseError, 503, "ServerBusy"), TransientStorageError),
        (ax.ServiceRequestError("Connection refused"), StorageConnectionError),
        (ax.IncompleteReadError("cut"), TruncatedBodyError),
    ]


@pytest.mark.parametrize("client", ["google", "azure"])
def test_error_mapping(client: str) -> None:
    from streamscope.storage import azure_backend, gcs_backend

    cases = _google_errors() if client == "google" else _azure_errors()
    mapper = gcs_backend.map_error if client == "google" else azure_backend.map_error
    for exc, expected in cases:
        err = mapper(exc, "gs://b/k", "get")
        assert type(err) is expected, (exc, err)
        assert "gs://b/k" in str(err)


def test_credentials_from_obstore_environment_variables(monkeypatch) -> None:
    """Both clients of a scheme find the account obstore would find in the environment."""
    from streamscope.storage.azure_backend import client_arguments
    from streamscope.storage.cloud import _google_kwargs
    from streamscope.storage.redact import MASK, redact

    monkeypatch.delenv("STORAGE_EMULATOR_HOST", raising=False)
    monkeypatch.setenv("AZURE_STORAGE_ACCOUNT_NAME", "envacct")
    monkeypatch.setenv("AZURE_STORAGE_ACCESS_KEY", "ZW52aXJvbm1lbnQta2V5")
    assert client_arguments({}, "c") == {
        "account_url": "https://envacct.blob.core.windows.net",
        "credential": {"account_name": "envacct", "account_key": "ZW52aXJvbm1lbnQta2V5"},
    }
    assert client_arguments({"account_key": "b3B0aW9uLWtleQ=="}, "c")["credential"]["account_key"] == "b3B0aW9uLWtleQ=="
    monkeypatch.setenv("GOOGLE_SERVICE_ACCOUNT_KEY", '{"type": "service_account", "private_key": "pk-from-env"}')
    assert _google_kwargs({}) == ({}, ("info", {"type": "service_account", "private_key": "pk-from-env"}))
    assert _google_kwargs({"token": "anon"})[1] == ("anonymous", None)  # explicit options win
    assert redact("key ZW52aXJvbm1lbnQta2V5") == f"key {MASK}"  # the environment's key was registered
