from __future__ import annotations

from streamscope.storage import redact, redact_options, redact_url, register_options


def test_registered_secret_masked_everywhere() -> None:
    register_options({"aws_secret_access_key": "Sup3rSecretValue/xyz", "region_name": "us-east-1"})
    text = "failed with key Sup3rSecretValue/xyz in 'Sup3rSecretValue/xyz'"
    out = redact(text)
    assert "Sup3rSecretValue" not in out
    assert out.count("***") == 2


def test_url_userinfo_and_query() -> None:
    url = "https://user:pw@host/b/k?X-Amz-Signature=abc&X-Amz-Credential=AKIA%2F&X-Amz-Date=2020&sig=zz"
    out = redact_url(url)
    assert "pw" not in out and "abc" not in out and "AKIA" not in out and "zz" not in out
    assert "X-Amz-Date=2020" in out and out.startswith("https://***@host/b/k?")


def test_named_values_and_xml() -> None:
    out = redact('{"aws_session_token": "tok123", "x": 1} password=hunter22 <AWSAccessKeyId>AKIA1</AWSAccessKeyId>')
    assert "tok123" not in out and "hunter22" not in out and "AKIA1" not in out
    # ordinary error words survive
    assert redact("SignatureDoesNotMatch: The request signature") == "SignatureDoesNotMatch: The request signature"


def test_redact_options() -> None:
    out = redact_options({"aws_access_key_id": "AKIAXX", "endpoint_url": "http://h:1", "nested": {"token": "t0k3n"}})
    assert out == {"aws_access_key_id": "***", "endpoint_url": "http://h:1", "nested": {"token": "***"}}
