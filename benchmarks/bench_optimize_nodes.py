"""optimize() on several nodes and on Ray, side by side in one run.

Workload: bench_optimize's image set (N samples ``{"image": uint8 3x64x64, "label": int, "id": str}``, 64 MB
chunks), with fn as in bench_optimize (no per-sample work: the engine's own costs) and with ``--spin`` Python
loop iterations of CPU work per sample added (a decode/resize-sized step, so that there is work to share).

Cases, interleaved per repeat, each one process per "machine" started fresh (so every case pays its interpreter
start-up alike), best of ``--repeats``:

* ``1 node x 1 worker``: ``optimize(num_workers=1)`` in one process.
* ``2 nodes x 1 worker``: two processes at once, ``DATA_OPTIMIZER_NUM_NODES=2`` / ``DATA_OPTIMIZER_NODE_RANK=r``,
  one shared local output_dir; the last one to finish merges index.json.
* ``processes, 2 workers`` and ``ray, 2 workers``: ``optimize(num_workers=2)`` with worker processes and with
  ``executor=RayExecutor(address)`` on a local two-node Ray cluster (``ray start --head`` + ``ray start
  --address``, 1 CPU each, started once before the runs, as a user's cluster would be).

Job time = from the first process entering ``optimize()`` to the last one leaving it (wall clock, one machine);
the interpreter start-up is reported separately ("wall"). Each run's dataset is checked: the 2-node, the 2-worker
and the Ray datasets are byte-identical (chunks, index.json minus updated_at).

Ratios: 2 nodes / 1 node (target >= 1.8x where the machine has two free cores: the parallel headroom of a pure-CPU
task on 2 processes vs 1, measured before and after as bench_optimize does, says what this machine offered),
and ray / processes at 2 workers (Ray's overhead).

Run by hand: ``PYTHONPATH=$PWD/src:$PWD python benchmarks/bench_optimize_nodes.py`` (~5-10 min on a shared
2-core machine); writes ``benchmarks/results/bench_optimize_nodes.json`` (``--out``).

Public API only (``streamscope.optimize``, ``streamscope.processing.RayExecutor``'s documented ``executor=``); the
Ray cluster is the test suite's rig (``tests/support/raycluster.py``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, _HERE)
sys.path.insert(0, os.path.dirname(_HERE))  # repo root, for tests.support.raycluster

from _results import package_version, start  # noqa: E402
from bench_optimize import _spin, make_sample, parallel_headroom  # noqa: E402

SPIN_ENV = "STREAMSCOPE_BENCH_SPIN"  # STREAMSCOPE_*: the Ray executor forwards it to its tasks


def make_sample_with_work(i: int) -> dict[str, Any]:
    """bench_optimize's sample after ``$STREAMSCOPE_BENCH_SPIN`` loop iterations of CPU work."""
    _spin(int(os.environ.get(SPIN_ENV, "0")))
    return make_sample(i)


# --- child: one "machine" -------------------------------------------------------------------------


def child(spec: dict[str, Any]) -> None:
    import importlib

    from streamscope.processing import RayExecutor, optimize

    # by its importable name (not __main__'s): Ray tasks import it by reference
    fn = importlib.import_module("benchmarks.bench_optimize_nodes").make_sample_with_work
    executor = RayExecutor(address=spec["ray"]) if spec.get("ray") else None
    t0 = time.time()
    optimize(
        fn,
        list(range(spec["samples"])),
        spec["out"],
        chunk_bytes="64MB",
        num_workers=spec["workers"],
        verbose=False,
        executor=executor,
    )
    print(json.dumps({"start": t0, "end": time.time()}), flush=True)


# --- parent -----------------------------------------------------------------------------------------


def _launch(spec: dict[str, Any], env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, os.path.abspath(__file__), "--child", json.dumps(spec)],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )


def run_case(case: str, samples: int, spin: int, out: str, ray_address: str | None) -> dict[str, float]:
    """One run of ``case``; job and wall seconds."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("DATA_OPTIMIZER_", "RAY_ADDRESS"))}
    base[SPIN_ENV] = str(spin)
    spec: dict[str, Any] = {"samples": samples, "out": out, "workers": 1}
    t0 = time.time()
    if case == "2 nodes x 1 worker":
        procs = [
            _launch(spec, {**base, "DATA_OPTIMIZER_NUM_NODES": "2", "DATA_OPTIMIZER_NODE_RANK": str(r)}) for r in (0, 1)
        ]
    else:
        if case != "1 node x 1 worker":
            spec["workers"] = 2
        if case.startswith("ray"):
            spec["ray"] = ray_address
        procs = [_launch(spec, base)]
    marks = []
    for p in procs:
        stdout, _ = p.communicate(timeout=1800)
        if p.returncode != 0:
            raise RuntimeError(f"{case}: a process failed ({p.returncode})")
        marks.append(json.loads(stdout.strip().splitlines()[-1]))
    wall = time.time() - t0
    job = max(m["end"] for m in marks) - min(m["start"] for m in marks)
    return {"job_s": job, "wall_s": wall}


def _dataset(path: str) -> tuple[dict[str, Any], dict[str, str]]:
    import hashlib

    with open(os.path.join(path, "index.json")) as f:
        index = json.load(f)
    index.pop("updated_at", None)
    digests = {}
    for c in index["chunks"]:
        with open(os.path.join(path, c["filename"]), "rb") as f:
            digests[c["filename"]] = hashlib.sha256(f.read()).hexdigest()
    return index, digests


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--samples", type=int, default=20000)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--spin", type=int, nargs="+", default=[0, 10000], help="loop iterations of CPU work per sample")
    ap.add_argument("--no-ray", action="store_true", help="skip the Ray cases")
    ap.add_argument("--out", default=None, help="write the result here instead of results/bench_optimize_nodes.json")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(json.loads(args.child))
        return

    bench = start("bench_optimize_nodes", args)
    cases = ["1 node x 1 worker", "2 nodes x 1 worker", "processes, 2 workers"]
    if not args.no_ray:
        cases.append("ray, 2 workers")
    headroom_before = parallel_headroom()
    print(f"parallel headroom (pure CPU, 2 processes vs 1) before: {headroom_before:.2f}x", flush=True)
    cluster = None
    ray_address = None
    ray_start_s = None
    if not args.no_ray:
        from tests.support.raycluster import RayCluster

        t0 = time.time()
        cluster = RayCluster(nodes=2).start()
        ray_start_s = time.time() - t0
        ray_address = cluster.address
        print(f"ray cluster (2 nodes x 1 CPU) up in {ray_start_s:.1f} s at {ray_address}", flush=True)
    root = tempfile.mkdtemp(prefix="bench-nodes-")
    runs: dict[str, dict[str, list[dict[str, float]]]] = {str(s): {c: [] for c in cases} for s in args.spin}
    identical: dict[str, bool] = {}
    try:
        for rep in range(args.repeats):
            for spin in args.spin:
                outs = {}
                for case in cases:
                    out = os.path.join(root, f"{spin}-{rep}-{len(outs)}")
                    r = run_case(case, args.samples, spin, out, ray_address)
                    runs[str(spin)][case].append(r)
                    outs[case] = out
                    print(
                        f"rep {rep} spin {spin:6d} {case:22s} job {r['job_s']:7.2f} s "
                        f"({args.samples / r['job_s']:8.0f} samples/s)  wall {r['wall_s']:7.2f} s",
                        flush=True,
                    )
                two = _dataset(outs["2 nodes x 1 worker"])
                same = two == _dataset(outs["processes, 2 workers"])
                if "ray, 2 workers" in outs:
                    same = same and two == _dataset(outs["ray, 2 workers"])
                identical[f"spin {spin} rep {rep}"] = same
                for out in outs.values():
                    shutil.rmtree(out, ignore_errors=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
        if cluster is not None:
            cluster.stop()
    headroom_after = parallel_headroom()
    print(f"parallel headroom after: {headroom_after:.2f}x")

    best = {s: {c: min(r["job_s"] for r in rs) for c, rs in per.items()} for s, per in runs.items()}
    ratios: dict[str, dict[str, float]] = {}
    for s, b in best.items():
        ratios[s] = {"2 nodes x 1 / 1 node x 1": b["1 node x 1 worker"] / b["2 nodes x 1 worker"]}
        if "ray, 2 workers" in b:
            ratios[s]["ray / processes at 2 workers (time)"] = b["ray, 2 workers"] / b["processes, 2 workers"]
    print("\nbest job seconds and ratios:")
    for s in best:
        print(f"  spin {s}: " + ", ".join(f"{c}: {t:.2f} s" for c, t in best[s].items()))
        print("          " + ", ".join(f"{k}: {v:.2f}x" for k, v in ratios[s].items()))
    print(f"datasets byte-identical (2 nodes == 2 workers == ray): {identical}")

    result = {
        "workload": "bench_optimize's {'image': uint8 3x64x64, 'label': int, 'id': str}, chunk_bytes=64MB, "
        "plus `spin` Python loop iterations per sample",
        "cases": cases,
        "runs": runs,
        "best_job_seconds": best,
        "ratios": ratios,
        "datasets_identical": identical,
        "ray_cluster": None if args.no_ray else {"nodes": 2, "cpus_per_node": 1, "start_s": ray_start_s},
        "parallel_headroom_2_vs_1": [headroom_before, headroom_after],
    }
    bench.write(result, summary=summarize(result), out=args.out, versions={"ray": package_version("ray")})


def summarize(result: dict[str, Any]) -> list[dict[str, Any]]:
    """The README's rows: best job seconds of each case per spin, and the two ratios."""
    rows = []
    for spin, best in result["best_job_seconds"].items():
        row: dict[str, Any] = {"spin": int(spin)}
        row.update({f"{case} s": round(t, 2) for case, t in best.items()})
        row.update({k: round(v, 2) for k, v in result["ratios"][spin].items()})
        rows.append(row)
    return rows


if __name__ == "__main__":
    main()
