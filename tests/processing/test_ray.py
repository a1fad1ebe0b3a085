"""optimize()/map() on a real local Ray cluster: a head and a second ``ray start`` on this machine, two nodes.

One driver process (``_ray_script``) runs every job against the cluster, in one go (starting Ray is the slow
part); each test checks one property of its results. The reference of every output is the same job with worker
processes and the same number of workers.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.processing import _node_fns as fns
from tests.processing.conftest import read_dataset, visible_files
from tests.support.components import missing

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]  # the module fixture starts a Ray cluster

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
N = 40
KW: dict[str, Any] = {"chunk_size": 4, "num_workers": 2}


def _need_ray() -> None:
    if importlib.util.find_spec("ray") is None:
        missing('ray is not installed (pip install "streamscope[ray]")')


def _drive(
    tmp: Any, ops: list[dict[str, Any]], env: dict[str, str] | None = None, timeout: float = 600
) -> list[dict[str, Any]]:
    ops_file, result = tmp / "ops.json", tmp / "result.json"
    ops_file.write_text(json.dumps(ops))
    full = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    full["PYTHONPATH"] = os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH", "")) if p)
    full.update(env or {})
    proc = subprocess.run(
        [sys.executable, "-m", "tests.processing._ray_script", str(ops_file), str(result)],
        cwd=ROOT,
        env=full,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert result.exists(), f"driver crashed ({proc.returncode}): {proc.stderr[-3000:]}"
    out = json.loads(result.read_text())
    assert len(out) == len(ops), f"driver stopped after {len(out)} ops ({proc.returncode}): {proc.stderr[-3000:]}"
    return out


@pytest.fixture(scope="module")
def ray_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Every job of this module, in one driver process, on a fresh two-node cluster; their results by name.

    Order matters: the no-cluster cases run first (before the driver joins a cluster), then a RayExecutor joins
    by its address and leaves again (the killed task's job), then the driver joins once so the remaining jobs
    reuse Ray's worker processes, and the traced job runs last (the tracer stays on in the driver)."""
    _need_ray()
    from tests.support.raycluster import RayCluster
    from tests.support.servers import free_port

    tmp = tmp_path_factory.mktemp("ray")
    for sub in ("nodes", "calls"):
        (tmp / sub).mkdir()
    flag = tmp / "kill"
    flag.touch()
    names = ("ref", "ray", "ref_kill", "ray_kill", "ray_ckpt", "ref_map", "ray_map", "ray_fail", "none")
    d = {n: str(tmp / n) for n in names}
    env = {  # the same for every job: Ray reuses a worker process only for tasks of the same runtime env
        fns.NODE_LOG_ENV: str(tmp / "nodes"),
        fns.KILL_FLAG_ENV: str(flag),
        fns.KILL_AT_ENV: "27",
        fns.KILL_LOG_ENV: str(tmp / "calls"),
        "STREAMSCOPE_RAY_CONNECT_TIMEOUT": "3",
    }
    inputs = list(range(N))
    quiet = {**KW, "verbose": False}
    bad = f"127.0.0.1:{free_port()}"
    t0 = time.monotonic()
    with RayCluster() as cluster:
        started = time.monotonic() - t0
        ray = {"address": cluster.address}

        def job(name: str, call: str, fn: str, executor: Any = None, **extra: Any) -> dict[str, Any]:
            kwargs = extra.pop("kwargs", quiet if call == "optimize" else {"num_workers": 2})
            return {
                "name": name,
                "call": call,
                "fn": fn,
                "inputs": inputs,
                "output_dir": d[name.split(":")[0]],
                "executor": executor,
                "kwargs": kwargs,
                **extra,
            }

        ops = [
            job("none:arg", "optimize", "sample", {"address": bad}),
            job("none:env", "optimize", "sample", "ray", env={"RAY_ADDRESS": bad}),
            job("ref", "optimize", "sample", kwargs={**quiet, "key_fn": "key_of"}),
            job("ref_kill", "optimize", "sample"),
            job("ref_map", "map", "write_files"),
            job("ray_kill", "optimize", "kill_task", ray),
            {"name": "kill_calls", "call": "drain", "path": str(tmp / "calls")},
            {"name": "connect", "call": "connect", "address": cluster.address},
            job("ray_map", "map", "write_files", ray),
            job("ray_fail", "optimize", "fail_on_7", ray),
            {"name": "rearm", "call": "touch", "path": str(flag)},
            job("ray_ckpt", "optimize", "kill_task", ray, kwargs={**quiet, "use_checkpoint": True}),
            {"name": "ckpt_calls", "call": "drain", "path": str(tmp / "calls")},
            job(
                "ray",
                "optimize",
                "sample_where",
                ray,
                kwargs={**KW, "key_fn": "key_of", "verbose": True},
                trace_log=str(tmp / "trace.log"),
            ),
        ]
        results = _drive(tmp, ops, env=env)
    total = time.monotonic() - t0
    by_name = {op["name"]: r for op, r in zip(ops, results)}
    ops_s = ", ".join(f"{k} {v['seconds']:.1f}" for k, v in by_name.items())
    print(f"ray cluster up in {started:.1f} s; whole module fixture {total:.1f} s; ops (s): {ops_s}")
    return {"results": by_name, "dirs": d, "tmp": tmp, "flag": flag, "bad": bad}


def test_ray_output_is_byte_identical_to_worker_processes(ray_run):
    r, d = ray_run["results"], ray_run["dirs"]
    assert r["ray"].get("ok") and r["ref"].get("ok"), {
        k: {a: str(b)[:1500] for a, b in v.items() if a != "stderr"} for k, v in r.items()
    }
    assert read_dataset(d["ray"]) == read_dataset(d["ref"])
    keys = lambda p: {n: Path(os.path.join(p, "keys", n)).read_bytes() for n in os.listdir(os.path.join(p, "keys"))}  # noqa: E731
    assert keys(d["ray"]) == keys(d["ref"])
    assert visible_files(d["ray"]) == visible_files(d["ref"])  # no staging or probe left behind


def test_ray_tasks_ran_on_both_nodes(ray_run):
    nodes = os.listdir(ray_run["tmp"] / "nodes")
    assert len(nodes) == 2, nodes  # 1 CPU per node, 2 tasks: one on each


def test_ray_shows_the_progress_bar(ray_run):
    err = ray_run["results"]["ray"]["stderr"]
    assert "optimize: 100%" in err and f"{N}/{N}" in err, err[-500:]


def test_ray_workers_are_traced_like_worker_processes(ray_run):
    from tests.support.litracer_parser import check_log, split_pairs

    driver = str(ray_run["results"]["ray"]["driver_pid"])
    text = (ray_run["tmp"] / "trace.log").read_text()
    check_log(text)  # every line a complete Litracer event
    events = [dict(split_pairs(line)) for line in text.splitlines()]
    fn_events = [e for e in events if e.get("name") == "optimize_fn"]
    assert {e["pid"] for e in events if e.get("name") == "optimize"} == {driver}
    assert len({e["pid"] for e in fn_events}) == 2 and driver not in {e["pid"] for e in fn_events}
    # each task is a worker of the job: worker_rank 0 and 1 of worker_world_size 2, as DataLoader workers show
    assert {(e["worker_world_size"], e["worker_rank"]) for e in fn_events} == {("2", "0"), ("2", "1")}
    for name in ("serialize", "upload", "chunk_write"):
        assert {e["worker_rank"] for e in events if e.get("name") == name} == {"0", "1"}, name


def test_a_task_killed_mid_job_is_retried_and_the_output_is_unchanged(ray_run):
    r, d = ray_run["results"], ray_run["dirs"]
    assert r["ray_kill"].get("ok"), r["ray_kill"]
    calls = r["kill_calls"]["calls"]
    assert calls.count(27) == 2  # input 27 ran in the killed attempt and in its retry
    assert calls.count(20) == 2  # the retry started over at worker 1's first input
    assert read_dataset(d["ray_kill"]) == read_dataset(d["ref_kill"])
    assert visible_files(d["ray_kill"]) == visible_files(d["ref_kill"])


def test_a_retried_task_resumes_from_its_checkpoint(ray_run):
    r, d = ray_run["results"], ray_run["dirs"]
    assert r["ray_ckpt"].get("ok"), r["ray_ckpt"]
    assert not ray_run["flag"].exists()  # killed again (the flag was re-armed)
    calls = r["ckpt_calls"]["calls"]
    assert calls.count(27) == 2 and calls.count(20) == 1  # the retry started after its last closed chunk
    assert read_dataset(d["ray_ckpt"]) == read_dataset(d["ref_kill"])
    assert visible_files(d["ray_ckpt"]) == visible_files(d["ref_kill"])  # checkpoint records removed


def test_map_on_ray_publishes_what_worker_processes_do(ray_run):
    r, d = ray_run["results"], ray_run["dirs"]
    assert r["ray_map"].get("ok") and r["ref_map"].get("ok"), r
    assert visible_files(d["ray_map"]) == visible_files(d["ref_map"])
    for rel in visible_files(d["ref_map"]):
        assert Path(os.path.join(d["ray_map"], rel)).read_text() == Path(os.path.join(d["ref_map"], rel)).read_text()


def test_an_error_in_fn_on_ray_names_the_input_and_leaves_nothing(ray_run):
    r, d = ray_run["results"]["ray_fail"], ray_run["dirs"]["ray_fail"]
    assert r.get("error") == "WorkerFailedError" and "input 7" in r["message"] and "KeyError" in r["message"], r
    assert not os.path.exists(os.path.join(d, "index.json"))
    assert [n for n in os.listdir(d) if n.startswith("chunk-")] == []  # the chunks written before are removed


def test_no_cluster_at_the_address_fails_fast_naming_it(ray_run):
    r, bad = ray_run["results"], ray_run["bad"]
    for res, origin in ((r["none:arg"], "RayExecutor(address=...)"), (r["none:env"], "RAY_ADDRESS")):
        assert res.get("error") == "ClusterUnreachableError", res
        assert bad in res["message"] and origin in res["message"]
        assert res["seconds"] < 30
    assert not os.path.exists(ray_run["dirs"]["none"])  # reported before output_dir was touched
