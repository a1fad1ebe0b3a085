"""Fork safety when obstore's runtime was started in the parent by someone else (user code, another library such
as LitData): streamscope's forked DataLoader workers must neither hang nor crash nor silently downgrade.

Found by ``benchmarks/bench_s3.py``: after ``litdata`` read from S3 in the main process, streamscope's forked
workers blocked in their first chunk download until ``ChunkWaitTimeoutError`` (120 s); with obstore used
directly in the parent, the main process died with SIGSEGV. The scenario runs in its own process.

Cause (found with gdb: SIGSEGV in the parent's ``tokio-rt-worker`` thread, ``tokio::runtime::io::driver::Driver::turn``):
the before-fork hook looked for threads named ``tokio-runtime*`` but obstore names its threads ``tokio-rt-worker``,
so the forked worker believed obstore usable and used it. A forked child shares the parent's epoll instance; the
child's obstore registered its sockets there with tokens that point into the CHILD's memory, and the parent's IO
driver, which waits on that same epoll instance, received those events and dereferenced the foreign pointers.
The hook now matches every ``tokio*`` thread name, so such children use boto3 (loudly)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.integration.conftest import N, write_dataset

pytestmark = pytest.mark.slow
SCENARIO = os.path.join(os.path.dirname(__file__), "_foreign_obstore_scenario.py")


def test_foreign_obstore_runtime_in_parent_then_fork(s3_server, tmp_path) -> None:
    url = write_dataset(s3_server, "foreign")
    ep = {
        "bucket": s3_server.bucket,
        "endpoint_url": s3_server.endpoint_url,
        "access_key": s3_server.access_key,
        "secret_key": s3_server.secret_key,
        "region": s3_server.region,
        "prefix": "foreign",
        "url": url,
        "cache": str(tmp_path / "c"),
        "options": s3_server.storage_options(),
    }
    env = dict(os.environ, STREAMSCOPE_CHUNK_WAIT_TIMEOUT="8", STREAMSCOPE_STORAGE_REQUEST_TIMEOUT="8")
    try:
        proc = subprocess.run(
            [sys.executable, SCENARIO, json.dumps(ep)], capture_output=True, text=True, timeout=90, env=env
        )
    except subprocess.TimeoutExpired:
        pytest.fail("the scenario hung for 90 s")
    assert proc.returncode == 0, f"rc={proc.returncode}: {proc.stderr[-1500:]}"
    assert proc.stdout.strip().splitlines()[-1] == f"OK {N} {N}"
    assert "instead of obstore" in proc.stderr  # the workers' fallback to boto3 is logged, not silent


W0_SCENARIO = os.path.join(os.path.dirname(__file__), "_w0_obstore_scenario.py")


def test_w0_iterates_through_obstore_then_forked_workers_fall_back_loudly(s3_server, tmp_path) -> None:
    url = write_dataset(s3_server, "w0-obstore")
    ep = {"url": url, "cache": str(tmp_path / "c"), "options": s3_server.storage_options()}
    env = dict(os.environ, STREAMSCOPE_CHUNK_WAIT_TIMEOUT="8", STREAMSCOPE_STORAGE_REQUEST_TIMEOUT="8")
    env.pop("STREAMSCOPE_S3_STREAMING_BACKEND", None)
    try:
        proc = subprocess.run(
            [sys.executable, W0_SCENARIO, json.dumps(ep)], capture_output=True, text=True, timeout=90, env=env
        )
    except subprocess.TimeoutExpired:
        pytest.fail("the scenario hung for 90 s")
    assert proc.returncode == 0, f"rc={proc.returncode}: {proc.stderr[-1500:]}"
    # opening the dataset and random access keep obstore out; the w0 iteration starts it; every sample once
    assert proc.stdout.strip().splitlines()[-1] == f"OK False True {N} {N} {N}"
    assert "instead of obstore" in proc.stderr  # the forked workers' fallback to boto3 is logged
