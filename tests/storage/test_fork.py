"""Fork and spawn safety: the parent touches S3, then children (and DataLoader workers) read, with no hang."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

SCENARIO = os.path.join(os.path.dirname(__file__), "_fork_scenario.py")


def _run(s3_server, backend: str, *extra: str, timeout: float = 120) -> dict:
    ep = {"url": s3_server.url(f"fork-{backend}"), "options": s3_server.storage_options()}
    proc = subprocess.run(
        [sys.executable, SCENARIO, json.dumps(ep), backend, *extra],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=dict(os.environ),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return {**json.loads(proc.stdout.strip().splitlines()[-1]), "stderr": proc.stderr}


def test_auto_keeps_obstore_out_of_the_parent(s3_server) -> None:
    out = _run(s3_server, "auto")
    assert out["parent"] == "boto3"  # the main process never starts obstore's runtime ...
    assert out["fork"] == ["obstore", True, 0]  # ... so forked workers can use obstore
    assert out["spawn"] == ["obstore", True, 0]


def test_obstore_in_parent_then_fork_falls_back_loudly(s3_server) -> None:
    out = _run(s3_server, "obstore")
    assert out["parent"] == "obstore"
    backend, ok, fallbacks = out["fork"]
    assert (backend, ok) == ("boto3", True)  # no hang; obstore cannot run in this child
    assert fallbacks == 1  # traced ...
    assert "instead of obstore" in out["stderr"]  # ... and logged: not a silent downgrade
    assert out["spawn"] == ["obstore", True, 0]


@pytest.mark.slow
def test_boto3_everywhere(s3_server) -> None:
    out = _run(s3_server, "boto3")
    assert out["parent"] == "boto3" and out["fork"][:2] == ["boto3", True] and out["spawn"][:2] == ["boto3", True]


@pytest.mark.slow
def test_dataloader_workers_after_parent_touched_s3(s3_server) -> None:
    out = _run(s3_server, "auto", "loader", timeout=180)
    every_sample_once, backends, worker_pids = out["loader"]
    assert every_sample_once
    assert backends == ["obstore"] and worker_pids == 2
