"""optimize() throughput, streamscope vs LitData, side by side in one run.

Workload: N samples ``{"image": uint8 3x64x64, "label": int, "id": str}`` written to 64MB chunks
(``chunk_bytes="64MB"``), with num_workers=1 and 2, each engine in fresh output directories, same inputs,
best of ``--repeats``. Both engines run with their default start method (LitData: spawn, streamscope: fork);
the time is the wall time of the whole ``optimize()`` call (start-up included), as a user sees it. The CPU
seconds of all processes (main + reaped workers) are printed too: on a shared, loaded machine the wall time of
2 workers is bounded by the CPU share the scheduler gives this job, and CPU seconds show the work done.

Targets (brief): streamscope >= 1.5x LitData's samples/s with num_workers=1; streamscope with 2 workers no
slower than with 1.

Run by hand:  PYTHONPATH=src python benchmarks/bench_optimize.py --samples 20000
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import sys
import tempfile
import time
from typing import Any

import numpy as np

_POOL = np.random.default_rng(0).integers(0, 255, size=(64, 3, 64, 64), dtype=np.uint8)


def make_sample(i: int) -> dict[str, Any]:
    """The benchmark's fn: cheap on purpose, so the engines' own costs dominate."""
    return {"image": _POOL[i % 64], "label": i, "id": f"sample-{i:06d}"}


def _run_streamscope(inputs: list[int], out: str, workers: int) -> None:
    from streamscope.optimize import optimize

    optimize(make_sample, inputs, out, chunk_bytes="64MB", num_workers=workers, verbose=False)


def _run_litdata(inputs: list[int], out: str, workers: int) -> None:
    import litdata

    litdata.optimize(
        fn=make_sample, inputs=inputs, output_dir=out, chunk_bytes="64MB", num_workers=workers, verbose=False
    )


def _cpu_seconds() -> float:
    """User + system CPU time of this process and its finished children (the engines' workers)."""
    me = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def _dataset_bytes(out: str) -> int:
    return sum(os.path.getsize(os.path.join(out, f)) for f in os.listdir(out) if f.endswith(".bin"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--samples", type=int, default=20000)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--engines", nargs="+", default=["litdata", "streamscope"])
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results"))
    args = ap.parse_args()
    os.environ.setdefault("LITDATA_DISABLE_VERSION_CHECK", "1")

    inputs = list(range(args.samples))
    runners = {"litdata": _run_litdata, "streamscope": _run_streamscope}
    best: dict[str, dict[int, float]] = {e: {} for e in args.engines}
    all_times: dict[str, dict[int, list[float]]] = {e: {w: [] for w in args.workers} for e in args.engines}
    all_cpu: dict[str, dict[int, list[float]]] = {e: {w: [] for w in args.workers} for e in args.engines}
    root = tempfile.mkdtemp(prefix="bench-optimize-")
    # LitData stages in a machine-wide /tmp/chunks by default, which other jobs on this host clobber
    # (its known bug); give it private staging dirs so its runs are not corrupted by them.
    os.environ["DATA_OPTIMIZER_CACHE_FOLDER"] = os.path.join(root, "litdata-chunks")
    os.environ["DATA_OPTIMIZER_DATA_CACHE_FOLDER"] = os.path.join(root, "litdata-data")
    try:
        for rep in range(args.repeats):
            for workers in args.workers:
                for engine in args.engines:  # interleaved, so load changes hit both engines alike
                    out = os.path.join(root, f"{engine}-{workers}-{rep}")
                    c0 = _cpu_seconds()
                    t0 = time.perf_counter()
                    runners[engine](inputs, out, workers)
                    dt = time.perf_counter() - t0
                    cpu = _cpu_seconds() - c0
                    size = _dataset_bytes(out)
                    shutil.rmtree(out, ignore_errors=True)
                    all_times[engine][workers].append(dt)
                    all_cpu[engine][workers].append(cpu)
                    print(
                        f"rep {rep} {engine:11s} workers={workers}: {dt:7.2f} s  {args.samples / dt:9.0f} samples/s  "
                        f"{size / 1e6:.0f} MB  cpu {cpu:6.2f} s (all processes)",
                        flush=True,
                    )
        for engine in args.engines:
            for workers in args.workers:
                best[engine][workers] = args.samples / min(all_times[engine][workers])
    finally:
        shutil.rmtree(root, ignore_errors=True)

    print("\nbest samples/s:")
    for engine in args.engines:
        print("  " + engine.ljust(12) + "  ".join(f"w={w}: {best[engine][w]:9.0f}" for w in args.workers))
    ratios: dict[str, float] = {}
    if "litdata" in best and "streamscope" in best:
        for w in args.workers:
            ratios[f"streamscope/litdata w={w}"] = best["streamscope"][w] / best["litdata"][w]
    if "streamscope" in best and 1 in args.workers and 2 in args.workers:
        ratios["streamscope w=2 / w=1"] = best["streamscope"][2] / best["streamscope"][1]
    print("ratios:")
    for k, v in ratios.items():
        print(f"  {k}: {v:.2f}x")

    os.makedirs(args.out, exist_ok=True)
    result = {
        "benchmark": "optimize",
        "samples": args.samples,
        "repeats": args.repeats,
        "chunk_bytes": "64MB",
        "sample": "{'image': uint8 3x64x64, 'label': int, 'id': str}",
        "seconds": all_times,
        "cpu_seconds_all_processes": all_cpu,
        "load_average_at_end": os.getloadavg(),
        "best_samples_per_s": best,
        "ratios": ratios,
        "python": sys.version.split()[0],
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    path = os.path.join(args.out, "bench_optimize.json")
    with open(path, "w") as f:
        json.dump(result, f, indent=2)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
