"""Bad input: each a clear error naming the URL (credentials removed), and nothing hangs."""

from __future__ import annotations

import time

import pytest

from streamscope._core import config
from streamscope._core.errors import (
    ConfigError,
    ObjectNotFoundError,
    StorageAuthError,
    StorageConnectionError,
    StorageError,
    StorageResponseError,
    TransientStorageError,
    UnsupportedURLError,
)
from streamscope.storage import open_store
from tests.support.faultproxy import GarbageServer, closed_port

BACKENDS = ["obstore", "boto3"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_unreachable_endpoint_fails_fast_naming_url(backend: str) -> None:
    endpoint = f"http://127.0.0.1:{closed_port()}"
    opts = {"endpoint_url": endpoint, "aws_access_key_id": "AKIAFAKE", "aws_secret_access_key": "s3cr3t-value-x"}
    store = open_store("s3://some-bucket/data", {**opts, "backend": backend})
    t0 = time.monotonic()
    with pytest.raises(StorageConnectionError) as info:
        store.get("chunk-0-0.bin")
    took = time.monotonic() - t0
    assert took < 30
    msg = str(info.value)
    assert "s3://some-bucket/data/chunk-0-0.bin" in msg and "attempt" in msg
    assert "s3cr3t-value-x" not in msg


def test_unreachable_non_routable_within_30s() -> None:
    """A black-holed address (no RST): the connect timeout bounds every attempt."""
    config.set_value("storage_connect_timeout", 0.5)
    try:
        store = open_store(
            "s3://bucket-x",
            {"endpoint_url": "http://10.255.255.1:9", "aws_access_key_id": "A" * 8, "aws_secret_access_key": "B" * 8},
        )
        t0 = time.monotonic()
        with pytest.raises(StorageError) as info:
            store.head("k")
        assert time.monotonic() - t0 < 30
        assert "s3://bucket-x/k" in str(info.value)
    finally:
        config.reset("storage_connect_timeout")


@pytest.mark.parametrize("backend", BACKENDS)
def test_wrong_secret_and_unknown_key(backend: str, s3_server) -> None:
    s3_server.boto3_client().put_object(Bucket=s3_server.bucket, Key="k", Body=b"x")
    bad_secret = open_store(
        s3_server.url(), s3_server.storage_options(aws_secret_access_key="definitely-wrong-1", backend=backend)
    )
    with pytest.raises(StorageAuthError) as info:
        bad_secret.get("k")
    assert isinstance(info.value, PermissionError)
    assert f"s3://{s3_server.bucket}/k" in str(info.value) and "SignatureDoesNotMatch" in str(info.value)
    assert "definitely-wrong-1" not in str(info.value)
    bad_key = open_store(
        s3_server.url(), s3_server.storage_options(aws_access_key_id="AKIANOSUCHKEY00", backend=backend)
    )
    with pytest.raises(StorageAuthError) as info:
        bad_key.head("k")
    assert f"s3://{s3_server.bucket}/k" in str(info.value)


@pytest.mark.parametrize("backend", BACKENDS)
def test_missing_bucket_and_key(backend: str, s3_server) -> None:
    store = open_store("s3://no-such-bucket-here/p", s3_server.storage_options(backend=backend))
    with pytest.raises(ObjectNotFoundError) as info:
        store.get("k")
    assert "s3://no-such-bucket-here/p/k" in str(info.value)
    assert "bucket" in str(info.value)
    with pytest.raises(ObjectNotFoundError):
        list(store.list())
    ok = open_store(s3_server.url(), s3_server.storage_options(backend=backend))
    with pytest.raises(ObjectNotFoundError) as info:
        ok.get("nope.bin")
    assert f"s3://{s3_server.bucket}/nope.bin" in str(info.value)
    assert not ok.exists("nope.bin")


@pytest.mark.parametrize(
    "url",
    ["s3://", "s3:///x", "s3:bucket", "ftp://host/x", "gopher://x", "s3://UPPER/x", "s3://user:pw@bucket/x", ""],
)
def test_malformed_or_unknown(url: str) -> None:
    with pytest.raises(UnsupportedURLError) as info:
        open_store(url, {})
    assert "supported" in str(info.value)
    assert "pw@" not in str(info.value)


def test_bad_options() -> None:
    with pytest.raises(ConfigError):
        open_store("s3://bucket", {"backend": "s5cmd"})
    with pytest.raises(ConfigError) as info:
        open_store("s3://bucket", {"endpoint_url": "127.0.0.1:9000"})
    assert "http" in str(info.value)
    with pytest.raises(ConfigError):
        open_store("s3://bucket", {"verify": "/no/such/ca.pem"})


@pytest.mark.parametrize("backend", BACKENDS)
def test_garbage_server(backend: str) -> None:
    config.set_value("storage_max_attempts", 2)
    config.set_value("storage_retry_base_delay", 0.01)
    try:
        opts = {"aws_access_key_id": "AKIAX", "aws_secret_access_key": "secret-garbage", "backend": backend}
        # Not HTTP at all.
        with GarbageServer(raw=True) as g:
            store = open_store("s3://bkt/p", {**opts, "endpoint_url": g.url})
            with pytest.raises(StorageError) as info:
                store.get("k")
            assert "s3://bkt/p/k" in str(info.value)
        # HTTP 200 whose body is random bytes where S3 XML is expected.
        with GarbageServer(status=200) as g:
            store = open_store("s3://bkt/p", {**opts, "endpoint_url": g.url})
            # (botocore turns an unparsable 200 into a retryable 500; obstore reports invalid XML)
            with pytest.raises((StorageResponseError, TransientStorageError)) as info:
                list(store.list())
            assert "s3://bkt/p" in str(info.value)
        # 500 with a random body: a clear error (retried when the client could read the status).
        with GarbageServer(status=500) as g:
            store = open_store("s3://bkt/p", {**opts, "endpoint_url": g.url})
            with pytest.raises((TransientStorageError, StorageResponseError)) as info:
                store.get("k")
            assert "s3://bkt/p/k" in str(info.value)
            assert g.requests == (2 if isinstance(info.value, TransientStorageError) else 1)
    finally:
        config.reset("storage_max_attempts")
        config.reset("storage_retry_base_delay")


def test_garbage_http_store() -> None:
    with GarbageServer(raw=True) as g:
        config.set_value("storage_max_attempts", 2)
        try:
            with pytest.raises(StorageError) as info:
                open_store(g.url + "/data").get("x")
        finally:
            config.reset("storage_max_attempts")
        assert g.url + "/data/x" in str(info.value)
