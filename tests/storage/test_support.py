"""The test-support servers themselves, and backend selection."""

from __future__ import annotations

import time

import pytest

from streamscope.storage import obstore_backend as ob
from streamscope.storage import open_store, s3
from tests.support.faultproxy import FaultProxy


def test_fault_proxy_is_seeded_and_counts(s3_server) -> None:
    def sequence(seed: int) -> list[str | None]:
        with FaultProxy(s3_server.endpoint_url, seed=seed, error_rate=0.2, reset_rate=0.2, truncate_rate=0.2) as p:
            out = [p._choose("GET") for _ in range(200)]
            assert p.counts["requests"] == 200
            assert p.counts["error"] + p.counts["reset"] + p.counts["truncate"] == sum(x is not None for x in out)
            return out

    a, b, c = sequence(5), sequence(5), sequence(6)
    assert a == b and a != c
    assert 60 < sum(x is not None for x in a) < 180
    with pytest.raises(ValueError):
        FaultProxy(s3_server.endpoint_url, error_rate=0.7, reset_rate=0.7)


def test_fault_proxy_methods_filter_and_fixed_delay(fault_proxy, s3_server) -> None:
    store = open_store(fault_proxy.s3.url(), fault_proxy.s3.storage_options(backend="boto3"))
    fault_proxy.configure(error_rate=1.0, methods=("PUT",))
    assert store.exists("nothing") is False  # HEAD passes untouched
    fault_proxy.configure(error_rate=0.0, methods=None)
    store.put("k", b"v")
    fault_proxy.fixed_delay_s = 0.2
    t0 = time.monotonic()
    assert store.get("k") == b"v"
    assert time.monotonic() - t0 >= 0.2
    assert fault_proxy.counts["error"] == 0 and fault_proxy.counts["requests_HEAD"] >= 1


def test_choose_backend(monkeypatch) -> None:
    monkeypatch.setattr(ob, "obstore_available", lambda: False)
    assert s3.choose_backend("obstore") == ("boto3", "obstore is not installed")
    assert s3.choose_backend("auto") == ("boto3", None)
    monkeypatch.setattr(ob, "obstore_available", lambda: True)
    monkeypatch.setattr(ob, "_RUNTIME_PID", -12345)  # "started in another process"
    name, why = s3.choose_backend("obstore")
    assert name == "boto3" and "-12345" in why
    monkeypatch.setattr(ob, "_RUNTIME_PID", None)
    assert s3.choose_backend("obstore") == ("obstore", None)
    assert s3.choose_backend("auto") == ("boto3", None)  # may fork workers: keep obstore's runtime out of it
    monkeypatch.setattr(s3, "_may_fork_workers", lambda: False)  # a DataLoader worker (daemonic)
    assert s3.choose_backend("auto") == ("obstore", None)
    assert s3.choose_backend("boto3") == ("boto3", None)


def test_env_credentials_and_endpoint(s3_server, monkeypatch) -> None:
    s3_server.boto3_client().put_object(Bucket=s3_server.bucket, Key="e", Body=b"env")
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_server.endpoint_url)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", s3_server.access_key)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", s3_server.secret_key)
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    for backend in ("obstore", "boto3"):
        assert open_store(s3_server.url(), {"backend": backend}).get("e") == b"env"


def test_session_options_profile_style(s3_server) -> None:
    s3_server.boto3_client().put_object(Bucket=s3_server.bucket, Key="s", Body=b"sess")
    opts = s3_server.storage_options()
    session = {k: opts.pop(k) for k in ("aws_access_key_id", "aws_secret_access_key", "region_name")}
    for backend in ("obstore", "boto3"):
        store = open_store(s3_server.url(), {**opts, "backend": backend}, session_options=session)
        assert store.get("s") == b"sess"


def test_shared_credentials_file_for_both_backends(s3_server, tmp_path, monkeypatch) -> None:
    """Credentials only in ~/.aws/credentials (a profile): boto3 reads them, and obstore gets them from boto3."""
    s3_server.boto3_client().put_object(Bucket=s3_server.bucket, Key="p", Body=b"profile")
    creds = tmp_path / "credentials"
    creds.write_text(
        f"[default]\naws_access_key_id = {s3_server.access_key}\naws_secret_access_key = {s3_server.secret_key}\n"
        f"[other]\naws_access_key_id = {s3_server.access_key}\naws_secret_access_key = {s3_server.secret_key}\n"
    )
    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(creds))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    for backend in ("obstore", "boto3"):
        for extra in ({}, {"profile_name": "other"}):
            opts = {"endpoint_url": s3_server.endpoint_url, "region_name": "us-east-1", "backend": backend, **extra}
            assert open_store(s3_server.url(), opts).get("p") == b"profile"


def test_explicit_keys_do_not_mix_with_environment_credentials(monkeypatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAENVIRONMENT")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "env-secret")
    monkeypatch.setenv("AWS_SESSION_TOKEN", "env-token")
    explicit = s3.S3Options({"aws_access_key_id": "AKIAEXPLICIT", "aws_secret_access_key": "explicit"}, "s3://b")
    assert (explicit.access_key, explicit.secret_key, explicit.token) == ("AKIAEXPLICIT", "explicit", None)
    from_env = s3.S3Options({}, "s3://b")
    assert (from_env.access_key, from_env.secret_key, from_env.token) == ("AKIAENVIRONMENT", "env-secret", "env-token")


def test_missing_emulator_skips_loudly_and_fails_under_ci(monkeypatch, tmp_path) -> None:
    from tests.support import azurite, gcsserver
    from tests.support.components import in_ci
    from tests.support.servers import emulator_unavailable

    if in_ci():  # ./run.sh test installs both: CI runs the gs:// and azure:// server tests, never skips them
        assert gcsserver.available() is None and azurite.available() is None
    monkeypatch.setenv("STREAMSCOPE_AZURITE", str(tmp_path / "no-azurite"))
    assert "azurite-blob is not installed" in str(azurite.available())
    monkeypatch.delenv("CI", raising=False)
    with pytest.warns(UserWarning, match="SKIPPING the Azurite tests"), pytest.raises(pytest.skip.Exception):
        emulator_unavailable("Azurite", "not installed")
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="CI must run the Azurite tests"):
        emulator_unavailable("Azurite", "not installed")


def test_emulator_process_stops() -> None:
    """An emulator process is gone after ``stop`` (the GCS one: 0.3 s to start; Azurite's takes seconds)."""
    import urllib.request

    from tests.support import gcsserver
    from tests.support.servers import emulator_unavailable

    if gcsserver.available() is not None:
        emulator_unavailable("GCS emulator", str(gcsserver.available()))
    with gcsserver.GCSServer() as g:
        g.endpoint(g.new_bucket()).put("k", b"v")
        base = g.base_url
        pid = g._proc.proc.pid if g._proc is not None else None
    assert pid is not None
    with pytest.raises(OSError):
        urllib.request.urlopen(base + "/", timeout=2)
    with pytest.raises(ProcessLookupError):
        import os

        os.kill(pid, 0)
