"""``STREAMSCOPE_PROMETHEUS_PORT=9464 python train.py``, as a user runs it (issue 31).

The training script below calls nothing of streamscope but the dataset and the loader. The variable alone must
open each rank's endpoint (rank r on port + r) when the rank builds its first dataset, say its URL once on stderr,
switch metrics on (the ``chunk`` level) in the rank and its DataLoader workers (forked and spawned), and open
nothing in those workers. A real Prometheus scrapes the ranks and must hold their series. A port already taken
is one warning line and the training finishes; the variable unset imports nothing of the endpoint.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from streamscope.events.registry import M, prometheus_name
from tests.engine._data import image_sample, write_dataset
from tests.support.prometheus_server import PrometheusServer

pytest.importorskip("prometheus_client")

ROOT = Path(__file__).resolve().parents[2]
N = 160

#: A plain training script: epochs until the test says stop (a file appears), or 120 s at most. The main guard is
#: what spawned DataLoader workers need (they import the script).
TRAIN = textwrap.dedent(
    """
    import os, sys, time
    import streamscope as ld

    def main():
        data, stop, context = sys.argv[1], sys.argv[2], sys.argv[3]
        kw = {"multiprocessing_context": context, "persistent_workers": True} if context == "spawn" else {}
        loader = ld.StreamingDataLoader(ld.StreamingDataset(data), batch_size=8, num_workers=2, **kw)
        deadline = time.monotonic() + 400  # the test touches ``stop`` sooner; this only bounds a forgotten run
        samples = 0
        while time.monotonic() < deadline:
            for batch in loader:
                samples += len(batch["label"])
                time.sleep(0.005)
            if os.path.exists(stop):
                break
        loaded = sorted(m for m in sys.modules if m.startswith("prometheus_client") or m.endswith("prometheus"))
        print(samples, loaded)

    if __name__ == "__main__":
        main()
    """
)


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("STREAMSCOPE_", "OTEL_", "LITDATA_", "RANK"))}
    for k in ("LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GLOBAL_RANK", "SLURM_LOCALID"):
        env.pop(k, None)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), str(ROOT)])
    env.update(extra)
    return env


def _ports_free(base: int, n: int) -> bool:
    for p in range(base, base + n):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", p))
            except OSError:
                return False
    return True


def _free_base(n: int) -> int:
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            base = s.getsockname()[1]
        if base + n <= 65535 and _ports_free(base, n):
            return base
    raise RuntimeError("no run of free ports")


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> str:
    return write_dataset(str(tmp_path_factory.mktemp("prom-env") / "images"), N, image_sample, chunk_size=20)


def _start(tmp: Path, name: str, data: str, context: str, env: dict[str, str]) -> tuple[subprocess.Popen, Path, Path]:
    script = tmp / "train.py"
    script.write_text(TRAIN)
    out, err = tmp / f"{name}.out", tmp / f"{name}.err"
    with open(out, "w") as o, open(err, "w") as e:
        proc = subprocess.Popen(
            [sys.executable, str(script), data, str(tmp / "stop"), context],
            env=env,
            cwd=tmp,
            stdin=subprocess.DEVNULL,
            stdout=o,
            stderr=e,
        )
    return proc, out, err


def _finish(procs: list[subprocess.Popen], timeout: float = 120) -> None:
    try:
        for p in procs:
            p.wait(timeout)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(10)


@pytest.mark.slow
@pytest.mark.timeout(600)  # the deadlines below: a spawned rank's workers start slowly on a busy machine
def test_the_variable_alone_serves_each_rank_to_a_real_prometheus(tmp_path, data):
    base = _free_base(2)
    with PrometheusServer([f"127.0.0.1:{base}", f"127.0.0.1:{base + 1}"]) as prometheus:
        runs = [
            _start(
                tmp_path,
                f"rank{rank}",
                data,
                context,
                _env(
                    STREAMSCOPE_PROMETHEUS_PORT=str(base),
                    STREAMSCOPE_METRICS_INTERVAL="0.2",
                    RANK=str(rank),
                    LOCAL_RANK=str(rank),
                    WORLD_SIZE="2",
                    LOCAL_WORLD_SIZE="2",
                ),
            )
            for rank, context in ((0, "fork"), (1, "spawn"))
        ]
        procs = [p for p, _o, _e in runs]
        try:
            samples = prometheus_name(M.LOADER_SAMPLES)
            got = prometheus.wait_for_series(
                f"sum by (rank, instance) ({samples})",
                # a deadline, not a speed limit: at load 20 on 2 cores the spawned rank (2 workers importing torch)
                # had no sample yet after 90 s (issue 31 item 6)
                timeout=300,
                predicate=lambda ss: {s.labels.get("rank") for s in ss if s.value > 0} == {"0", "1"},
            )
            # rank r on port + r, both scraped (up == 1)
            assert {s.labels["rank"]: s.labels["instance"] for s in got} == {
                "0": f"127.0.0.1:{base}",
                "1": f"127.0.0.1:{base + 1}",
            }
            assert {s.labels["instance"]: s.value for s in prometheus.query("up")} == {
                f"127.0.0.1:{base}": 1.0,
                f"127.0.0.1:{base + 1}": 1.0,
            }
            # the workers record (metrics switched on before they started, spawned ones included): their share of
            # the loop's wait reaches the rank's endpoint
            stages = prometheus.wait_for_series(
                f"sum by (rank) ({prometheus_name(M.LOADER_WAIT_STAGE)})",
                timeout=120,
                predicate=lambda ss: {s.labels.get("rank") for s in ss if s.value > 0} == {"0", "1"},
            )
            assert len(stages) == 2
        except Exception as exc:
            said = "\n".join(e.read_text()[-3000:] for _p, _o, e in runs)
            raise AssertionError(f"{exc}\nstderr of the ranks:\n{said}") from exc
        finally:
            (tmp_path / "stop").touch()
            _finish(procs)
    for rank, (proc, out, err) in enumerate(runs):
        stderr = err.read_text()
        assert proc.returncode == 0, stderr[-3000:]
        said = [line for line in stderr.splitlines() if "Prometheus" in line or "warning" in line]
        # one line per rank: not one per worker (a worker trying the port would say it is in use)
        assert said == [f"streamscope: Prometheus metrics of rank {rank} at http://127.0.0.1:{base + rank}/metrics"]
        assert int(out.read_text().split()[0]) > 0


def test_a_port_already_taken_is_one_warning_line_and_training_goes_on(tmp_path, data):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        (tmp_path / "stop").touch()  # one epoch
        proc, out, err = _start(tmp_path, "busy", data, "fork", _env(STREAMSCOPE_PROMETHEUS_PORT=str(port)))
        _finish([proc])
    stderr = err.read_text()
    assert proc.returncode == 0, stderr[-3000:]
    assert int(out.read_text().split()[0]) == N  # the whole epoch
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert lines == [
        f"streamscope: warning: STREAMSCOPE_PROMETHEUS_PORT={port}: no Prometheus endpoint for rank 0: the Prometheus "
        f"endpoint's port {port} on 127.0.0.1 is already in use (another process listens there: choose another "
        "port, or 0 for a free one); training goes on without it"
    ]


def test_unset_the_endpoint_is_not_even_imported(tmp_path, data):
    (tmp_path / "stop").touch()
    proc, out, err = _start(tmp_path, "off", data, "fork", _env())
    _finish([proc])
    assert proc.returncode == 0, err.read_text()[-3000:]
    assert out.read_text().split() == [str(N), "[]"]  # no prometheus_client, no streamscope.telemetry.prometheus
    assert "Prometheus" not in err.read_text()


@pytest.mark.slow
def test_set_the_script_serves_while_it_runs(tmp_path, data):
    """Port 0 (a free one): the URL on stderr answers with the run's series while the script trains."""
    import urllib.request

    proc, out, err = _start(tmp_path, "zero", data, "fork", _env(STREAMSCOPE_PROMETHEUS_PORT="0"))
    try:
        url, deadline = None, time.monotonic() + 60
        while url is None and time.monotonic() < deadline and proc.poll() is None:
            for line in err.read_text().splitlines():
                if line.startswith("streamscope: Prometheus metrics of rank 0 at "):
                    url = line.rsplit(" ", 1)[1]
            time.sleep(0.1)
        assert url, err.read_text()[-3000:]
        body, deadline = "", time.monotonic() + 30
        while f"{prometheus_name(M.LOADER_SAMPLES)}{{" not in body and time.monotonic() < deadline:
            body = urllib.request.urlopen(url, timeout=10).read().decode()
            time.sleep(0.2)
        assert f"{prometheus_name(M.LOADER_SAMPLES)}{{" in body, body[:2000]
    finally:
        (tmp_path / "stop").touch()
        _finish([proc])
    assert proc.returncode == 0, err.read_text()[-3000:]
    assert "streamscope.telemetry.prometheus" in out.read_text()
