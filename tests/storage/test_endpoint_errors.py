"""An unreachable endpoint gives an error that names it (scheme, host and port), not only the object's URL.

Every backend against a closed loopback port (connection refused at once), with two attempts and a tiny backoff
so each case takes well under a second; then the user-facing paths that reach a store: the index.json read, a
chunk download, optimize's upload, the raw dataset's listing. Credentials never appear.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from streamscope._core import config
from streamscope._core.errors import StorageConnectionError, StorageError
from streamscope.storage import open_store
from tests.support.faultproxy import closed_port

SECRET = "s3cr3t-endpoint-test-value"
ACCESS = "AKIAENDPOINTTEST"


@pytest.fixture(autouse=True)
def _two_quick_attempts() -> Iterator[None]:
    config.set_value("storage_max_attempts", 2)
    config.set_value("storage_retry_base_delay", 0.01)
    try:
        yield
    finally:
        for name in ("storage_max_attempts", "storage_retry_base_delay", "storage_s3_light_get"):
            config.reset(name)


@pytest.fixture
def endpoint() -> str:
    return f"http://127.0.0.1:{closed_port()}"


def _s3(endpoint: str, **extra: Any) -> dict[str, Any]:
    return {"endpoint_url": endpoint, "aws_access_key_id": ACCESS, "aws_secret_access_key": SECRET, **extra}


def _check(exc: BaseException, endpoint: str, url: str) -> None:
    msg = str(exc)
    assert f"at endpoint {endpoint}" in msg, msg
    assert url in msg, msg
    assert SECRET not in msg and ACCESS not in msg, msg


# --- every backend, every operation -----------------------------------------------------------------------

_OPS: dict[str, Callable[[Any, str], Any]] = {
    "get": lambda st, tmp: st.get("index.json"),
    "get_range": lambda st, tmp: st.get_range("chunk-0-0.bin", 0, 10),
    "head": lambda st, tmp: st.head("chunk-0-0.bin"),
    "list": lambda st, tmp: list(st.list("")),
    "download_file": lambda st, tmp: st.download_file("chunk-0-0.bin", os.path.join(tmp, "c.bin")),
    "put": lambda st, tmp: st.put("x.bin", b"x"),
    "upload_file": lambda st, tmp: st.upload_file(__file__, "x.py"),
    "delete": lambda st, tmp: st.delete("x.bin"),
}


def _stores(endpoint: str) -> dict[str, tuple[str, dict[str, Any]]]:
    return {
        "s3-boto3": ("s3://bucket-e/ds", _s3(endpoint, backend="boto3")),
        "s3-obstore": ("s3://bucket-e/ds", _s3(endpoint, backend="obstore")),
        "gs-obstore": ("gs://bucket-e/ds", {"base_url": endpoint, "skip_signature": True}),
        "azure-obstore": (
            "azure://container-e/ds",
            {
                "endpoint": f"{endpoint}/devstoreaccount1",
                "account_name": "devstoreaccount1",
                "allow_http": True,
                "account_key": "c2VjcmV0LWtleS1mb3ItdGVzdHM=",
            },
        ),
    }


@pytest.mark.parametrize("op", sorted(_OPS))
@pytest.mark.parametrize("backend", ["s3-boto3", "s3-obstore", "gs-obstore", "azure-obstore"])
def test_every_operation_names_the_endpoint(backend, op, endpoint, tmp_path):
    url, opts = _stores(endpoint)[backend]
    store = open_store(url, opts)
    t0 = time.monotonic()
    with pytest.raises(StorageError) as info:
        _OPS[op](store, str(tmp_path))
    assert time.monotonic() - t0 < 10
    if not (backend == "gs-obstore" and op in ("put", "upload_file", "delete")):  # unsigned GCS writes are
        assert isinstance(info.value, StorageConnectionError), info.value  # refused before any connection
    _check(info.value, endpoint, url)


def test_light_get_of_index_json_names_the_endpoint(endpoint):
    """boto3's stores read whole objects (index.json) with a stdlib SigV4 client: its errors too."""
    config.set_value("storage_s3_light_get", True)
    store = open_store("s3://bucket-e/ds", _s3(endpoint, backend="boto3"))
    with pytest.raises(StorageConnectionError) as info:
        store.get("index.json")
    _check(info.value, endpoint, "s3://bucket-e/ds/index.json")
    assert "attempt" in str(info.value)  # retried as configured, then gave up


def test_http_store_names_its_host_once(endpoint):
    store = open_store(f"{endpoint}/ds")
    with pytest.raises(StorageConnectionError) as info:
        store.get("index.json")
    msg = str(info.value)
    assert msg.count(endpoint) == 1 and "at endpoint" not in msg  # the URL is the endpoint already


def test_not_found_and_type_are_kept(s3_server):
    """Other errors name the endpoint too, and keep their class and attributes."""
    from streamscope._core.errors import ObjectNotFoundError

    store = open_store(s3_server.url("ds"), s3_server.storage_options(backend="boto3"))
    with pytest.raises(ObjectNotFoundError) as info:
        store.head("nope.bin")
    assert f"at endpoint {s3_server.endpoint_url}" in str(info.value)
    assert getattr(info.value, "url", None) == s3_server.url("ds") + "/nope.bin"
    assert not store.exists("nope.bin")


@pytest.mark.parametrize(
    "raw, label",
    [
        ("http://127.0.0.1:9000", "http://127.0.0.1:9000"),
        ("https://minio.example.com", "https://minio.example.com:443"),
        ("http://user:pw@host.example:81/base/path?x=1", "http://host.example:81"),
        ("http://[::1]:9000/", "http://[::1]:9000"),
        ("not a url", None),
        ("", None),
        (None, None),
    ],
)
def test_endpoint_label(raw, label):
    from streamscope.storage.remote import endpoint_label

    assert endpoint_label(raw) == label


# --- the paths a user takes -----------------------------------------------------------------------------


def test_dataset_index_read_names_the_endpoint(endpoint, tmp_path):
    from streamscope.engine.dataset import StreamingDataset

    with pytest.raises(StorageError) as info:
        StreamingDataset("s3://bucket-e/ds", cache_dir=str(tmp_path), storage_options=_s3(endpoint))
    _check(info.value, endpoint, "s3://bucket-e/ds/index.json")


def test_chunk_download_names_the_endpoint(s3_server, tmp_path, endpoint):
    """The index is read from a live server; the chunks from an endpoint that went away."""
    from streamscope._core.errors import ChunkDownloadError
    from streamscope.cache.chunk_cache import ChunkCache
    from streamscope.format.index import load_index
    from tests.engine._data import write_dataset

    src = write_dataset(str(tmp_path / "src"), 10, chunk_size=5)
    chunks = load_index(os.path.join(src, "index.json"))["chunks"]
    store = open_store("s3://bucket-e/ds", _s3(endpoint, backend="boto3"))
    cache = ChunkCache(store, str(tmp_path / "cache"), chunks, None, 1 << 30)
    with pytest.raises(ChunkDownloadError) as info:
        cache.acquire(0)
    _check(info.value, endpoint, "s3://bucket-e/ds/chunk-0-0.bin")


def _sample(i: int) -> dict[str, int]:
    return {"i": i}


def test_optimize_upload_names_the_endpoint(endpoint, tmp_path):
    from streamscope.processing.functions import optimize

    with pytest.raises(Exception) as info:
        optimize(
            fn=_sample,
            inputs=list(range(4)),
            output_dir="s3://bucket-e/out",
            chunk_size=2,
            num_workers=1,
            storage_options=_s3(endpoint),
            verbose=False,
        )
    _check(info.value, endpoint, "s3://bucket-e/out")


def test_raw_listing_names_the_endpoint(endpoint, tmp_path):
    from streamscope.raw import StreamingRawDataset

    with pytest.raises(Exception) as info:
        StreamingRawDataset("s3://bucket-e/files", cache_dir=str(tmp_path), storage_options=_s3(endpoint))
    _check(info.value, endpoint, "s3://bucket-e/files")
