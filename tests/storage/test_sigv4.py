"""The stdlib SigV4 GET that serves index reads where boto3 would otherwise be built first (knob
storage_s3_light_get): accepted by a SigV4-checking S3 server, same errors as boto3, and only where it applies."""

from __future__ import annotations

import datetime as _dt

import pytest

from streamscope._core import config
from streamscope._core.errors import ObjectNotFoundError, StorageAuthError
from streamscope.storage import open_store, sigv4


def test_get_is_signed_correctly_and_errors_map_like_boto3(s3_server) -> None:
    s3_server.boto3_client().put_object(Bucket=s3_server.bucket, Key="d/idx x+y.json", Body=b"{}" * 5000)
    store = open_store(s3_server.url("d"), s3_server.storage_options())
    backend = store._backend()
    assert isinstance(backend, sigv4.LightGetBackend) and store.backend_name == "boto3"
    assert store.get("idx x+y.json") == b"{}" * 5000  # a key that needs URI encoding
    assert backend._inner is None  # no boto3 client was built for it
    with pytest.raises(ObjectNotFoundError, match="no such object"):
        store.get("missing.json")
    wrong = open_store(s3_server.url("d"), s3_server.storage_options(aws_secret_access_key="wrong-secret"))
    config.set_value("storage_max_attempts", 1)
    try:
        with pytest.raises(StorageAuthError) as info:
            wrong.get("idx x+y.json")
    finally:
        config.reset("storage_max_attempts")
    assert "wrong-secret" not in str(info.value)
    assert store.head("idx x+y.json").size == 10000  # other operations: boto3, built on first use
    assert backend._inner is not None


def test_truncated_body_is_retried_through_the_fault_proxy(fault_proxy) -> None:
    config.set_value("storage_retry_base_delay", 0.01)
    config.set_value("storage_max_attempts", 10)
    try:
        _truncated_bodies(fault_proxy)
    finally:
        config.reset("storage_retry_base_delay")
        config.reset("storage_max_attempts")


def _truncated_bodies(fault_proxy) -> None:
    ep = fault_proxy.s3
    store = open_store(ep.url(), ep.storage_options())
    store.put("k", b"z" * 200_000)
    assert isinstance(store._backend(), sigv4.LightGetBackend)
    fault_proxy.configure(seed=3, truncate_rate=0.5, methods=("GET",))
    for _ in range(4):
        assert store.get("k") == b"z" * 200_000  # cut-off bodies were noticed and retried, never returned
    fault_proxy.configure(truncate_rate=0.0, methods=None)
    assert fault_proxy.faults() >= 1


def test_applies_only_with_explicit_endpoint_keys_and_no_proxy(monkeypatch) -> None:
    for var in sigv4._PROXY_ENV:
        monkeypatch.delenv(var, raising=False)
    assert sigv4.eligible("http://127.0.0.1:9000", "AK", "SK")
    assert not sigv4.eligible(None, "AK", "SK")  # AWS itself: virtual hosts and regions are boto3's job
    assert not sigv4.eligible("http://127.0.0.1:9000", None, "SK")
    assert not sigv4.eligible("http://127.0.0.1:9000/base", "AK", "SK")
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy:3128")
    assert not sigv4.eligible("http://127.0.0.1:9000", "AK", "SK")
    monkeypatch.delenv("HTTPS_PROXY")
    config.set_value("storage_s3_light_get", False)
    try:
        assert not sigv4.eligible("http://127.0.0.1:9000", "AK", "SK")
    finally:
        config.reset("storage_s3_light_get")


def test_signature_is_deterministic_and_covers_the_token() -> None:
    t = _dt.datetime(2013, 5, 24, tzinfo=_dt.timezone.utc)
    a = sigv4.sign("GET", "h:1", "/b/k", "us-east-1", "AK", "SK", now=t)
    assert a == sigv4.sign("GET", "h:1", "/b/k", "us-east-1", "AK", "SK", now=t)
    assert a["x-amz-date"] == "20130524T000000Z"
    assert a["Authorization"].startswith("AWS4-HMAC-SHA256 Credential=AK/20130524/us-east-1/s3/aws4_request, ")
    b = sigv4.sign("GET", "h:1", "/b/k", "us-east-1", "AK", "SK", token="T", now=t)
    assert "x-amz-security-token" in b["Authorization"] and b["x-amz-security-token"] == "T"
    assert sigv4.sign("GET", "h:1", "/b/k2", "us-east-1", "AK", "SK", now=t)["Authorization"] != a["Authorization"]
