"""``gs://`` and ``azure://`` specifics on real servers (the GCS emulator, Azurite): LitData's spellings of
the options, which client serves which process, errors that name the container and never the key."""

from __future__ import annotations

import pytest

from streamscope._core import config
from streamscope._core.errors import ObjectNotFoundError, StorageAuthError
from streamscope.storage import open_store
from streamscope.storage.redact import MASK, redact


@pytest.fixture(autouse=True)
def _two_fast_attempts():
    config.set_value("storage_max_attempts", 2)
    config.set_value("storage_retry_base_delay", 0.005)
    yield
    config.reset("storage_max_attempts")
    config.reset("storage_retry_base_delay")


@pytest.mark.parametrize("backend", ["obstore", "azure-storage-blob"])
def test_azure_litdata_spelling(azurite_server, backend: str) -> None:
    # LitData passes storage_options to BlobServiceClient(account_url=..., credential=...)
    ep = azurite_server
    opts = {**ep.litdata_storage_options(), "backend": backend}
    store = open_store(ep.url("lit"), opts)
    store.put("a/b.bin", b"litdata")
    assert store.backend_name == backend
    as_mapping = {
        "account_url": ep.blob_url,
        "credential": {"account_name": ep.account, "account_key": ep.account_key},
        "backend": backend,
    }
    assert open_store(ep.url("lit"), as_mapping).get("a/b.bin") == b"litdata"


@pytest.mark.parametrize("backend", ["obstore", "azure-storage-blob"])
def test_azure_missing_container_is_named(azurite_server, backend: str) -> None:
    ep = azurite_server
    store = open_store(f"azure://no-such-container-{backend[:5]}/p", ep.storage_options(backend=backend))
    with pytest.raises(ObjectNotFoundError) as info:
        store.get("k")
    assert "container does not exist" in str(info.value) and "no-such-container" in str(info.value)
    with pytest.raises(ObjectNotFoundError, match="container does not exist"):
        store.delete("k")  # deleting a missing blob is fine (contract), in a missing container it is not
    open_store(ep.url(), ep.storage_options(backend=backend)).delete("never-written")


@pytest.mark.parametrize("backend", ["obstore", "azure-storage-blob"])
def test_azure_wrong_key_is_refused_and_never_shown(azurite_server, backend: str) -> None:
    ep = azurite_server
    open_store(ep.url(), ep.storage_options()).put("k", b"v")
    wrong = "V3JvbmdXcm9uZ1dyb25nV3JvbmdXcm9uZ1dyb25nV3Jvbmc="
    store = open_store(ep.url(), ep.storage_options(account_key=wrong, backend=backend))
    with pytest.raises(StorageAuthError) as info:
        store.get("k")
    text = f"{info.value!s} {info.value!r} {info.value.__cause__!r}"
    assert redact(f"a {wrong} b {ep.account_key}") == f"a {MASK} b {MASK}"  # both keys were registered
    assert wrong not in text and ep.account_key not in text
    assert ep.url("k") in str(info.value)


def test_gcs_litdata_spelling_picks_google_cloud_storage(gcs_server) -> None:
    # LitData passes storage_options to google.cloud.storage.Client(**storage_options)
    store = open_store(gcs_server.url("lit"), gcs_server.litdata_storage_options())
    store.put("x.bin", b"litdata")
    assert store.backend_name == "google-cloud-storage"
    assert [m.key for m in store.list()] == ["x.bin"]


def test_gcs_storage_emulator_host(gcs_server, monkeypatch) -> None:
    # google-cloud-storage (so LitData) follows STORAGE_EMULATOR_HOST; obstore ignores it and would go to GCS
    gcs_server.put("e/1.bin", b"emulated")
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", gcs_server.base_url)
    store = open_store(gcs_server.url("e"), {"project": "test"})
    assert store.get("1.bin") == b"emulated"
    assert store.backend_name == "google-cloud-storage"
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", gcs_server.base_url.removeprefix("http://"))  # host:port form
    assert open_store(gcs_server.url("e"), {}).get("1.bin") == b"emulated"


def test_gcs_missing_bucket_and_object(gcs_server) -> None:
    store = open_store(gcs_server.url("p"), gcs_server.storage_options())
    with pytest.raises(ObjectNotFoundError) as info:
        store.get("nothing")
    assert gcs_server.url("p/nothing") in str(info.value)
    assert not store.exists("nothing")
    store.delete("nothing")  # not an error
    gone = open_store("gs://no-such-bucket-here/p", gcs_server.storage_options())
    with pytest.raises(ObjectNotFoundError):
        gone.get("k")


def test_gcs_large_upload_is_resumable(gcs_server, tmp_path) -> None:
    """google-cloud-storage uploads files over 8 MB in pieces (a resumable upload): the emulator's path."""
    import os

    data = os.urandom(9 << 20)
    src = tmp_path / "big.bin"
    src.write_bytes(data)
    store = open_store(gcs_server.url(), gcs_server.storage_options())
    store.upload_file(str(src), "big.bin")
    assert store.head("big.bin").size == len(data)
    dest = tmp_path / "back.bin"
    assert store.download_file("big.bin", str(dest)) == len(data)
    assert dest.read_bytes() == data
    assert store.get_range("big.bin", (8 << 20) - 5, (8 << 20) + 5) == data[(8 << 20) - 5 : (8 << 20) + 5]


@pytest.mark.parametrize("backend", ["obstore", "azure-storage-blob"])
def test_azure_account_from_environment(azurite_server, backend: str, monkeypatch) -> None:
    ep = azurite_server
    ep.put("env/k", b"from env")
    monkeypatch.setenv("AZURE_STORAGE_ACCOUNT_NAME", ep.account)
    monkeypatch.setenv("AZURE_STORAGE_ACCOUNT_KEY", ep.account_key)
    monkeypatch.setenv("AZURE_STORAGE_ENDPOINT", ep.blob_url)  # plain http: allowed for obstore too
    store = open_store(ep.url("env"), {"backend": backend})
    assert store.get("k") == b"from env"
    assert store.backend_name == backend
