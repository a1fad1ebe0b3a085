"""HTTPS S3 endpoints signed by a private CA: AWS_CA_BUNDLE / SSL_CERT_FILE honoured, clear error without."""

from __future__ import annotations

import pytest

from streamscope._core import config
from streamscope._core.errors import StorageError
from streamscope.storage import open_store


def _opts(ep, backend: str) -> dict:
    opts = ep.storage_options(backend=backend)
    opts.pop("verify")
    return opts


@pytest.mark.parametrize("backend", ["obstore", "boto3"])
@pytest.mark.parametrize("var", ["AWS_CA_BUNDLE", "SSL_CERT_FILE"])
def test_ca_from_environment(backend: str, var: str, s3_https_server, monkeypatch) -> None:
    s3_https_server.boto3_client().put_object(Bucket=s3_https_server.bucket, Key="k", Body=b"tls!")
    monkeypatch.delenv("AWS_CA_BUNDLE", raising=False)
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    monkeypatch.setenv(var, s3_https_server.ca_file)
    store = open_store(s3_https_server.url(), _opts(s3_https_server, backend))
    assert store.get("k") == b"tls!"


@pytest.mark.parametrize("backend", ["obstore", "boto3"])
def test_untrusted_certificate_is_a_clear_error(backend: str, s3_https_server, monkeypatch) -> None:
    monkeypatch.delenv("AWS_CA_BUNDLE", raising=False)
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    config.set_value("storage_max_attempts", 1)
    try:
        store = open_store(s3_https_server.url(), _opts(s3_https_server, backend))
        with pytest.raises(StorageError) as info:
            store.get("k")
    finally:
        config.reset("storage_max_attempts")
    msg = str(info.value)
    assert f"s3://{s3_https_server.bucket}/k" in msg
    assert "TLS" in msg or "certificate" in msg.lower(), msg


@pytest.mark.filterwarnings("ignore::urllib3.exceptions.InsecureRequestWarning")
def test_verify_false_skips_verification(s3_https_server, monkeypatch) -> None:
    monkeypatch.delenv("AWS_CA_BUNDLE", raising=False)
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    s3_https_server.boto3_client().put_object(Bucket=s3_https_server.bucket, Key="k", Body=b"insecure")
    for backend in ("obstore", "boto3"):
        store = open_store(s3_https_server.url(), {**_opts(s3_https_server, backend), "verify": False})
        assert store.get("k") == b"insecure"
