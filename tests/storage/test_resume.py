"""download_file resumes a cut-off body with a ranged GET (If-Match), and restarts when the object changed."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from streamscope import events as ev
from streamscope._core import config
from streamscope.storage import open_store

BACKENDS = ["obstore", "boto3"]
SIZE = 1 << 20


@pytest.fixture
def tracing() -> Iterator[None]:
    ev.drain()
    ev.ACTIVE.add("download")
    config.set_value("storage_retry_base_delay", 0.005)
    try:
        yield
    finally:
        ev.ACTIVE.discard("download")
        config.reset("storage_retry_base_delay")
        ev.drain()


def _attempts() -> list[dict]:
    return [e[6] for e in ev.drain() if e[0] == "E" and e[1] == "download_file"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_resume_after_truncation(backend, fault_proxy, s3_server, tracing, tmp_path) -> None:
    data = os.urandom(SIZE)
    s3_server.boto3_client().put_object(Bucket=s3_server.bucket, Key="big.bin", Body=data)
    store = open_store(fault_proxy.s3.url(), fault_proxy.s3.storage_options(backend=backend))
    fault_proxy.configure(truncate_rate=1.0, methods=("GET",))
    fault_proxy.max_faults = 2  # cut the first two responses in half
    dest = tmp_path / "big.bin"
    assert store.download_file("big.bin", str(dest)) == SIZE
    assert dest.read_bytes() == data
    attempts = _attempts()
    offsets = [a["offset"] for a in attempts]
    assert [a["status"] for a in attempts] == ["retry", "retry", "ok"]
    assert offsets[0] == 0 < offsets[1] < offsets[2] < SIZE  # each retry resumed where the bytes stopped
    assert sum(a["bytes"] for a in attempts) == SIZE  # nothing was fetched twice
    assert fault_proxy.counts["truncate"] == 2
    assert os.listdir(tmp_path) == ["big.bin"]  # no temporary left


@pytest.mark.parametrize("backend", BACKENDS)
def test_object_replaced_mid_download_restarts(backend, fault_proxy, s3_server, tracing, tmp_path) -> None:
    old, new = os.urandom(SIZE), os.urandom(SIZE + 333)
    admin = s3_server.boto3_client()
    admin.put_object(Bucket=s3_server.bucket, Key="obj.bin", Body=old)
    store = open_store(fault_proxy.s3.url(), fault_proxy.s3.storage_options(backend=backend))
    fault_proxy.configure(truncate_rate=1.0, methods=("GET",))
    fault_proxy.max_faults = 1
    fault_proxy.on_fault = lambda *a: admin.put_object(Bucket=s3_server.bucket, Key="obj.bin", Body=new)
    dest = tmp_path / "obj.bin"
    assert store.download_file("obj.bin", str(dest)) == len(new)
    assert dest.read_bytes() == new  # never a splice of the old and the new object
    attempts = _attempts()
    assert attempts[0]["offset"] == 0 and attempts[1]["exception"] == "ObjectChangedError"
    assert attempts[-1]["offset"] == 0 and attempts[-1]["status"] == "ok"
