"""Retries through the fault-injecting proxy in front of the real (moto) S3 server."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from streamscope import events as ev
from streamscope._core import config
from streamscope._core.errors import (
    StorageConnectionError,
    StorageTimeoutError,
    TransientStorageError,
    TruncatedBodyError,
)
from streamscope.storage import open_store

BACKENDS = ["obstore", "boto3"]


@pytest.fixture
def quick_retries() -> Iterator[None]:
    config.set_value("storage_retry_base_delay", 0.005)
    config.set_value("storage_retry_max_delay", 0.02)
    try:
        yield
    finally:
        config.reset("storage_retry_base_delay")
        config.reset("storage_retry_max_delay")


@pytest.fixture
def tracing() -> Iterator[None]:
    ev.drain()
    ev.ACTIVE.add("download")
    try:
        yield
    finally:
        ev.ACTIVE.discard("download")
        ev.drain()


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
def test_ten_percent_faults_every_object_exact_once(backend, fault_proxy, s3_server, quick_retries, tracing, tmp_path):
    admin = s3_server.boto3_client()
    objects = {f"ds/chunk-{i}.bin": os.urandom(1000 + 997 * i) for i in range(20)}
    for key, data in objects.items():
        admin.put_object(Bucket=s3_server.bucket, Key=key, Body=data)
    store = open_store(fault_proxy.s3.url("ds"), fault_proxy.s3.storage_options(backend=backend))
    assert store.backend_name == backend
    store.head("chunk-0.bin")  # warm the client before faults start
    fault_proxy.configure(seed=42, error_rate=0.03, reset_rate=0.03, truncate_rate=0.03, delay_rate=0.01)
    fault_proxy.delay_s = 0.05
    ev.drain()

    got: dict[str, bytes] = {}
    for key in objects:
        name = key.split("/", 1)[1]
        assert name not in got
        got[name] = store.get(name)
        assert store.get_range(name, 7, 907) == objects[key][7:907]
        dest = tmp_path / name
        assert store.download_file(name, str(dest)) == len(objects[key])
        assert dest.read_bytes() == objects[key]
    listed = [m.key for m in store.list()]
    assert listed == sorted(k.split("/", 1)[1] for k in objects)
    assert got == {k.split("/", 1)[1]: v for k, v in objects.items()}

    counts = fault_proxy.counts
    failed_attempts = counts["error"] + counts["reset"] + counts["truncate"] - counts["truncate_skipped"]
    assert failed_attempts > 0, counts  # the proxy really injected faults
    events = ev.drain()
    retries = [e for e in events if e[1] == "retry"]
    give_ups = [e for e in events if e[1] == "give_up"]
    assert give_ups == []
    assert len(retries) == failed_attempts, (counts, len(retries))
    statuses = {e[6]["http_status"] for e in retries}
    assert {500, 503} & statuses and statuses - {500, 503}, statuses  # HTTP errors and connection faults
    ends = [e for e in events if e[0] == "E" and e[1] == "download" and e[6]["status"] == "ok"]
    assert len([e for e in events if e[0] == "E" and e[6]["status"] == "retry"]) == failed_attempts
    assert all(e[6]["bytes"] > 0 and e[6]["attempt"] >= 1 and "duration_s" in e[6] for e in ends)
    assert max(e[6]["attempt"] for e in ends) >= 2


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    ("fault", "error"),
    [("error", TransientStorageError), ("reset", StorageConnectionError), ("truncate", TruncatedBodyError)],
)
def test_persistent_fault_gives_up_clearly(backend, fault, error, fault_proxy, s3_server, quick_retries, tracing):
    s3_server.boto3_client().put_object(Bucket=s3_server.bucket, Key="k.bin", Body=os.urandom(5000))
    store = open_store(fault_proxy.s3.url(), fault_proxy.s3.storage_options(backend=backend))
    config.set_value("storage_max_attempts", 3)
    try:
        fault_proxy.configure(**{f"{fault}_rate": 1.0})
        with pytest.raises(error) as info:
            store.get("k.bin")
    finally:
        config.reset("storage_max_attempts")
    msg = str(info.value)
    assert f"s3://{s3_server.bucket}/k.bin" in msg and "3 attempt(s)" in msg
    assert fault_proxy.counts[fault] == 3
    events = ev.drain()
    assert len([e for e in events if e[1] == "retry"]) == 2
    assert len([e for e in events if e[1] == "give_up"]) == 1


@pytest.mark.parametrize("backend", BACKENDS)
def test_slow_server_times_out(backend, fault_proxy, s3_server, quick_retries):
    s3_server.boto3_client().put_object(Bucket=s3_server.bucket, Key="k.bin", Body=b"12345")
    config.set_value("storage_read_timeout", 0.3)
    config.set_value("storage_max_attempts", 2)
    try:
        store = open_store(fault_proxy.s3.url(), fault_proxy.s3.storage_options(backend=backend))
        fault_proxy.configure(delay_rate=1.0)
        fault_proxy.delay_s = 1.0
        with pytest.raises(StorageTimeoutError) as info:
            store.get("k.bin")
        assert "k.bin" in str(info.value)
        fault_proxy.configure(delay_rate=0.0)
        assert store.get("k.bin") == b"12345"
    finally:
        config.reset("storage_read_timeout")
        config.reset("storage_max_attempts")
