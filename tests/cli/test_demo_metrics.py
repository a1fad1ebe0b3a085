"""``streamscope demo`` serves its metrics while it runs and says where, with the ``streamscope top`` line."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from streamscope.cli.top import parse_exposition
from streamscope.events.registry import M, prometheus_name

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_the_demo_serves_its_metrics_and_says_where(tmp_path):
    pytest.importorskip("prometheus_client")
    env = dict(os.environ, PYTHONPATH=f"{ROOT / 'src'}{os.pathsep}{ROOT}", LITDATA_DISABLE_VERSION_CHECK="1")
    env.pop("STREAMSCOPE_PROMETHEUS_PORT", None)
    cmd = [sys.executable, "-m", "streamscope", "demo", "--output", str(tmp_path / "out"), "--samples", "600"]
    proc = subprocess.Popen(
        [*cmd, "--linger", "60"], env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
    )
    lines: list[str] = []
    try:
        deadline = time.monotonic() + 240
        assert proc.stdout is not None
        while not any(line.startswith("metrics:  still served") for line in lines):
            line = proc.stdout.readline()
            assert line or proc.poll() is None, "".join(lines)
            assert time.monotonic() < deadline, "".join(lines)
            lines.append(line)
        out = "".join(lines)
        url = re.search(r"^metrics:  (http://127\.0\.0\.1:\d+/metrics) \(Prometheus text format\)", out, re.M)
        assert url, out
        assert f"watch:    python -m streamscope top --url {url.group(1)}\n" in out
        with urllib.request.urlopen(url.group(1), timeout=10) as r:
            series = parse_exposition(r.read().decode())
        assert sum(v for _, v in series[prometheus_name(M.LOADER_SAMPLES)]) == 600
        assert sum(v for _, v in series[prometheus_name(M.LOADER_BATCHES)]) == 3  # batch_size 256
        proc.send_signal(signal.SIGINT)  # Ctrl-C ends the lingering
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        if proc.stdout is not None:
            proc.stdout.close()
