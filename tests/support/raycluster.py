"""A real two-node Ray cluster on this machine, for tests: ``ray start --head`` plus a second ``ray start
--address`` (each a "node" with its own raylet, 1 CPU and a small object store, no dashboard).

Each ``ray start --block`` runs in a session (process group) of its own, so :meth:`RayCluster.stop` ends exactly
the processes it started (SIGTERM to the two groups, SIGKILL after a grace period), never other Ray
instances. The Ray processes get ``PYTHONPATH`` with the repository root, so tasks import ``tests.*``.
Readiness is polled by a throw-away driver process, so the test process itself never imports Ray.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

from tests.support.servers import free_port

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

_READY = """
import sys, time, ray
ray.init(address=sys.argv[1], logging_level="ERROR", log_to_driver=False)
deadline = time.monotonic() + float(sys.argv[3])
while len([n for n in ray.nodes() if n["Alive"]]) < int(sys.argv[2]):
    if time.monotonic() > deadline:
        sys.exit("nodes did not join")
    time.sleep(0.2)
"""


def ray_bin() -> str | None:
    """The ``ray`` CLI next to this interpreter, or None when ray is not installed."""
    path = os.path.join(os.path.dirname(sys.executable), "ray")
    return path if os.path.exists(path) else shutil.which("ray")


class RayCluster:
    """``with RayCluster() as c: c.address`` (``127.0.0.1:<port>``); see the module doc."""

    def __init__(self, nodes: int = 2, startup_timeout: float = 180.0) -> None:
        self.nodes = nodes
        self.startup_timeout = startup_timeout
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        # short: Ray's unix socket paths live under it and must stay below 108 characters
        self.temp_dir = tempfile.mkdtemp(prefix="rt", dir="/tmp")
        self.procs: list[subprocess.Popen] = []
        self.env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS" and not k.startswith("STREAMSCOPE_")}
        self.env["PYTHONPATH"] = os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH", "")) if p)
        self.env["RAY_USAGE_STATS_ENABLED"] = "0"
        # no idle workers started ahead: the tests' tasks carry a runtime env of their own and never use them
        self.env["RAY_enable_worker_prestart"] = "0"

    def _start(self, args: list[str]) -> None:
        ray = ray_bin()
        assert ray, "ray is not installed"
        common = [
            "--block",
            "--num-cpus",
            "1",
            "--object-store-memory",
            "80000000",
            "--disable-usage-stats",
            "--include-log-monitor=false",  # one Python process less per node; tasks' output is not needed
        ]
        # the child writes its own copy of the descriptor: the parent's is closed once the child has it
        with open(os.path.join(self.temp_dir, f"start-{len(self.procs)}.log"), "wb") as log:
            self.procs.append(
                subprocess.Popen(
                    [ray, "start", *args, *common],
                    env=self.env,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            )

    def start(self) -> RayCluster:
        self._start(["--head", "--port", str(self.port), "--include-dashboard=false", "--temp-dir", self.temp_dir])
        deadline = time.monotonic() + self.startup_timeout
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                break
            except OSError:
                if self.procs[0].poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"ray head did not start (logs in {self.temp_dir})") from None
                time.sleep(0.1)
        for _ in range(self.nodes - 1):
            self._start(["--address", self.address])
        ready = subprocess.run(
            [sys.executable, "-c", _READY, self.address, str(self.nodes), str(self.startup_timeout)],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=self.startup_timeout + 30,
        )
        if ready.returncode != 0:
            self.stop()
            raise RuntimeError(f"ray cluster not ready: {ready.stderr[-2000:]} (logs in {self.temp_dir})")
        return self

    def stop(self, grace: float = 5.0) -> None:
        for p in reversed(self.procs):
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + grace
        for p in reversed(self.procs):
            try:
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
            try:
                os.killpg(p.pid, signal.SIGKILL)  # the group: raylet, GCS, workers started by this `ray start`
            except ProcessLookupError:
                pass
            p.wait(timeout=10)
        self.procs.clear()
        shutil.rmtree(self.temp_dir, ignore_errors=True)

    def __enter__(self) -> RayCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
