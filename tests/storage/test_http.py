"""HTTPStore: the read-only subset of the contract against a loopback server (http, no-Range, https)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from streamscope._core.errors import (
    InvalidRangeError,
    ObjectNotFoundError,
    StorageConnectionError,
    StorageError,
    UnsupportedOperationError,
)
from streamscope.storage import open_store
from tests.support.faultproxy import closed_port


def _store(srv, prefix: str = "data"):
    opts = {"verify": srv.ca_file} if srv.ca_file else {}
    return open_store(f"{srv.url}/{prefix}", opts)


def test_read_subset(http_files, tmp_path) -> None:
    data = os.urandom(50_000)
    os.makedirs(os.path.join(http_files.root, "data", "d"))
    with open(os.path.join(http_files.root, "data", "d", "a b.bin"), "wb") as f:
        f.write(data)
    store = _store(http_files)
    assert store.get("d/a b.bin") == data
    assert store.get_range("d/a b.bin", 10, 1000) == data[10:1000]
    assert store.head("d/a b.bin").size == len(data)
    assert store.head("d/a b.bin").mtime is not None
    assert store.exists("d/a b.bin")
    assert not store.exists("d/nope.bin")
    dest = tmp_path / "out" / "x.bin"
    assert store.download_file("d/a b.bin", str(dest)) == len(data)
    assert dest.read_bytes() == data
    with pytest.raises(InvalidRangeError):
        store.get_range("d/a b.bin", 10, len(data) + 5)
    with pytest.raises(ObjectNotFoundError) as info:
        store.get("d/nope.bin")
    assert "d/nope.bin" in str(info.value) and http_files.url in str(info.value)
    assert store.local_path("d/a b.bin") is None


def test_read_only(http_files) -> None:
    store = _store(http_files)
    for op in (
        lambda: store.put("k", b"x"),
        lambda: store.upload_file(__file__, "k"),
        lambda: store.delete("k"),
        lambda: list(store.list()),
    ):
        with pytest.raises(UnsupportedOperationError):
            op()


def test_https_without_the_ca_fails_clearly(tmp_path) -> None:
    from tests.storage.conftest import _start
    from tests.support.s3server import make_ca_and_server_cert

    ca, c, k = make_ca_and_server_cert(str(tmp_path))
    server, thread = _start(str(tmp_path), True, (c, k))
    try:
        url = f"https://127.0.0.1:{server.server_address[1]}"
        with pytest.raises(StorageError) as info:
            open_store(url, {}).get("ca.pem")
        assert "TLS" in str(info.value) and url in str(info.value)
        # ... and SSL_CERT_FILE is honoured
        os.environ["SSL_CERT_FILE"] = ca
        try:
            assert open_store(url).get("ca.pem") == Path(ca).read_bytes()
        finally:
            del os.environ["SSL_CERT_FILE"]
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def test_unreachable_http() -> None:
    url = f"http://127.0.0.1:{closed_port()}/x"
    with pytest.raises(StorageConnectionError) as info:
        open_store(url).get("k")
    assert url in str(info.value)


def test_http_store_retries_through_faults(tmp_path) -> None:
    from streamscope._core import config
    from tests.storage.conftest import _start
    from tests.support.faultproxy import FaultProxy

    root = tmp_path / "www"
    root.mkdir()
    blobs = {f"f{i}.bin": os.urandom(3000 + i) for i in range(15)}
    for name, data in blobs.items():
        (root / name).write_bytes(data)
    server, thread = _start(str(root), True, None)
    config.set_value("storage_retry_base_delay", 0.005)
    try:
        with FaultProxy(f"http://127.0.0.1:{server.server_address[1]}", seed=9) as proxy:
            proxy.configure(error_rate=0.1, reset_rate=0.1, truncate_rate=0.1)
            store = open_store(proxy.url)
            for name, data in blobs.items():
                assert store.get(name) == data
                assert store.get_range(name, 100, 2000) == data[100:2000]
                assert store.download_file(name, str(tmp_path / name)) == len(data)
                assert (tmp_path / name).read_bytes() == data
            assert proxy.faults() > 5
    finally:
        config.reset("storage_retry_base_delay")
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
