"""Byte compatibility through object storage: a dataset written to S3 by streamscope's optimize() is read by the
real LitData (0.2.68, and 0.2.76 in the second pass of ./run.sh test) from the same bucket (in its own process, LitData patched only to allow plain http)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from tests.integration import _fns
from tests.integration.conftest import N, write_dataset
from tests.support.litdata_version import litdata_env

pytestmark = [pytest.mark.slow, pytest.mark.interop]
READER = os.path.join(os.path.dirname(__file__), "_litdata_reader.py")


def test_litdata_reads_streamscope_output_from_s3(s3_server, tmp_path) -> None:
    url = write_dataset(s3_server, "for-litdata", num_workers=2)
    args = {"url": url, "cache": str(tmp_path / "ldcache"), "options": s3_server.storage_options()}
    env = litdata_env()  # LitData alone (the version under test), none of our sources
    proc = subprocess.run(
        [sys.executable, READER, json.dumps(args)], capture_output=True, text=True, timeout=240, env=env
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = json.loads(proc.stdout.strip().splitlines()[-1])
    assert sorted(r[0] for r in rows) == list(range(N))
    for i, name, digest in rows:
        want = _fns.sample(i)
        assert name == want["name"]
        assert digest == hashlib.sha256(np.ascontiguousarray(want["image"]).tobytes()).hexdigest()
