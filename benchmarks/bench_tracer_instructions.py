"""Tracer cost as instructions executed: deterministic, so it resolves differences the timing cannot.

Run by hand (needs valgrind; about 5 minutes on 2 cores)::

    PYTHONPATH=src:. python benchmarks/bench_tracer_instructions.py [--epochs 3] [--levels chunk,sample]

On this machine the same tracer-off epoch measures 0.14-0.24 s within a minute, so timed A/B ratios carry a
noise of a few percent. Instruction counts do not drift: each level runs under ``valgrind --tool=cachegrind
--cache-sim=no`` twice, once with one warm-up epoch and once with the warm-up plus ``--epochs`` more; the
difference divided by ``--epochs`` is the instructions of one epoch (with ``flush_tracer()`` after each traced
epoch, the strict measure of bench_tracer.py's A/B), and its ratio to the tracer-off epoch is the tracer's
share of the CPU work. What it does not count: cache misses and page faults the tracer causes in the rest of
the loop (the timed measures see those). The dataset is bench_tracer.py's (20,000 ``{uint8 3x64x64, int,
str}`` samples, batch 64, num_workers=0), made on first use. Single-threaded BLAS, a fixed hash seed and a
flusher that never ticks on its own keep the runs repeatable.

Writes ``benchmarks/results/bench_tracer_instructions.json`` (``--out``). Public API only.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from _results import start

HERE = os.path.dirname(os.path.abspath(__file__))

CHILD = r"""
import os, sys
import streamscope as S
data_dir, level, epochs = sys.argv[1], sys.argv[2], int(sys.argv[3])
log = os.path.join(sys.argv[4], "trace.log")
def epoch():
    for _ in S.StreamingDataLoader(S.StreamingDataset(data_dir), batch_size=64, num_workers=0):
        pass
S.enable_tracer(level, log_file=log, flush_interval=3600)
for _ in range(1 + epochs):  # one warm-up epoch, then the counted ones
    epoch()
    if level != "off":
        S.flush_tracer()
"""


def _instructions(data_dir: str, level: str, epochs: int, tmp: str) -> int:
    """Instructions (cachegrind ``I refs``) of a whole child run."""
    work = tempfile.mkdtemp(dir=tmp)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("STREAMSCOPE_", "LITDATA_"))}
    env.update(OPENBLAS_NUM_THREADS="1", PYTHONHASHSEED="0", STREAMSCOPE_METRICS_INTERVAL="3600")
    cmd = [
        "valgrind", "--tool=cachegrind", "--cache-sim=no", f"--cachegrind-out-file={work}/cg.out",
        sys.executable, "-c", CHILD, data_dir, level, str(epochs), work,
    ]  # fmt: skip
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=3600)
    m = re.search(r"I\s+refs:\s+([\d,]+)", r.stderr)
    if r.returncode != 0 or m is None:
        tail = r.stderr.strip().splitlines()[-3:]
        raise RuntimeError(f"valgrind run ({level}, {epochs} epochs) failed: {tail}")
    return int(m.group(1).replace(",", ""))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--levels", default="chunk,sample")
    ap.add_argument("--samples", type=int, default=20_000)
    ap.add_argument("--out", default=None, help="write the result here instead of results/bench_tracer_instructions.json")
    args = ap.parse_args()
    if shutil.which("valgrind") is None:
        sys.exit("valgrind is not installed (Debian: apt-get install valgrind)")
    bench = start("bench_tracer_instructions", args)
    sys.path.insert(0, HERE)
    import bench_tracer  # the dataset and its maker are shared with the timed benchmark

    data_dir = bench_tracer.make_dataset(os.path.join(tempfile.gettempdir(), "streamscope-bench-data"), args.samples)
    levels = ["off", *[lv for lv in args.levels.split(",") if lv and lv != "off"]]
    runs = [(lv, k) for lv in levels for k in (0, args.epochs)]
    with tempfile.TemporaryDirectory() as tmp, ThreadPoolExecutor(max_workers=2) as pool:
        counts = dict(zip(runs, pool.map(lambda run: _instructions(data_dir, run[0], run[1], tmp), runs)))
    per_epoch = {lv: (counts[(lv, args.epochs)] - counts[(lv, 0)]) / args.epochs for lv in levels}
    result: dict[str, Any] = {
        "epochs": args.epochs,
        "samples": args.samples,
        "instructions_per_epoch": {lv: round(v) for lv, v in per_epoch.items()},
    }
    for lv in levels[1:]:
        result[f"{lv}_over_off"] = round(per_epoch[lv] / per_epoch["off"], 4)
    print(json.dumps(result))
    bench.write(result, summary=summarize(result), out=args.out)


def summarize(result: dict[str, Any]) -> list[dict[str, Any]]:
    """The README's rows: instructions per epoch of each level and the ratio to off."""
    per = result["instructions_per_epoch"]
    return [
        {"level": lv, "M instructions/epoch": round(n / 1e6, 1), "x off": result.get(f"{lv}_over_off", 1.0)}
        for lv, n in per.items()
    ]


if __name__ == "__main__":
    main()
