"""GCS and Azure via obstore: construction, URL parsing, option translation and clear errors.

No GCS or Azure server runs here, so these tests stop at what can be checked locally: options are
validated at construction, requests go where the options say (a closed port or a garbage server on
loopback), and failures are the right StorageError naming the gs:// / azure:// URL.
"""

from __future__ import annotations

import pytest

from streamscope._core import config
from streamscope._core.errors import ConfigError, ObjectNotFoundError, StorageConnectionError
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
