"""Where the main process's flush after a traced epoch goes: CPU time and page faults per step.

``PYTHONPATH=$PWD/src:$PWD python benchmarks/bench_tracer_flush.py --rounds 30`` reads the epoch of
``bench_tracer.py`` (20,000 ``{uint8 3x64x64, int, str}`` samples, batch 64, ``--workers`` 2) at level
``--level`` (default "chunk") ``--rounds`` times, each followed by ``flush_tracer(wait_workers=60)``, and times
the steps of that flush in place: each wrapped call's thread CPU time (``time.thread_time``) and minor page
faults (``getrusage(RUSAGE_THREAD)``), summed per epoch. After a DataLoader's fork every page the main process
writes for the first time costs a fault (about 4 µs each on this machine), so the faults are listed next to
the CPU. Steps nest (``encode`` holds ``render_bulks`` and ``ordered_pieces``; ``export_pieces`` holds ``encode``
and the write). Writes ``results/bench_tracer_flush.json`` (``--out``).

Not an A/B: it says where the flush's cost lies, not what the tracer costs an epoch (``bench_tracer.py`` does).

Internals used, because they are what is measured: the flush's steps (``streamscope.recording.recorder``,
``collect``, ``processor``, ``streamscope.trace.litracer``) are wrapped in place to time each.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import resource
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from _results import start  # noqa: E402
from bench_tracer import make_dataset  # noqa: E402

import streamscope as S  # noqa: E402
from streamscope.recording import recorder as R  # noqa: E402

try:  # the batch processor and the run collector have modules of their own since the recorder's split
    from streamscope.recording import collect as C  # noqa: E402
    from streamscope.recording import processor as P  # noqa: E402
except ImportError:
    P = C = None  # type: ignore[assignment]
from streamscope.trace import litracer as L  # noqa: E402

_THREAD = getattr(resource, "RUSAGE_THREAD", resource.RUSAGE_SELF)
#: (owner, attribute, label) of every timed step, outermost first; steps a tree lacks are skipped (the script
#: also runs against older checkouts, for before/after comparisons).
STEPS: list[tuple[Any, str, str]] = [
    (S, "flush_tracer", "flush_tracer"),
    (R.Recorder, "_flush_locked", "flush_locked"),
    (R.Recorder, "_take", "take"),
    (R.Recorder, "_export_pieces", "export_pieces"),
    (getattr(P, "BatchProcessor", None), "take", "take_buffer"),
    (L, "encode_pieces", "encode"),
    (L, "encode_bytes", "encode"),  # what the sink called before encode_pieces (older trees)
    (L, "_render_bulks", "render_bulks"),
    (L, "_ordered_pieces", "ordered_pieces"),
    (L, "_in_begin_order", "ordered_pieces"),  # older trees (it joined the pieces)
    (R.Recorder, "_repair_dead_workers", "repair"),
    (getattr(C, "RunCollector", None), "repair", "collect"),
    (R.Recorder, "_publish", "publish"),
]


def _wrap(owner: Any, name: str, label: str, acc: dict[str, list[float]]) -> None:
    f: Callable[..., Any] = getattr(owner, name)

    def timed(*a: Any, **k: Any) -> Any:
        f0 = resource.getrusage(_THREAD).ru_minflt
        t0 = time.thread_time()
        try:
            return f(*a, **k)
        finally:
            row = acc.setdefault(label, [0.0, 0.0, 0.0])
            row[0] += time.thread_time() - t0
            row[1] += resource.getrusage(_THREAD).ru_minflt - f0
            row[2] += 1

    setattr(owner, name, timed)


def run(data_dir: str, rounds: int, workers: int, level: str) -> dict[str, Any]:
    acc: dict[str, list[float]] = {}
    for owner, name, label in STEPS:
        if owner is not None and hasattr(owner, name):
            _wrap(owner, name, label, acc)
    log = tempfile.mktemp(suffix=".log")

    def epoch() -> None:
        S.enable_tracer(level, log_file=log, flush_interval=5)
        for _ in S.StreamingDataLoader(S.StreamingDataset(data_dir), batch_size=64, num_workers=workers):
            pass
        S.flush_tracer(wait_workers=60)
        while multiprocessing.active_children():
            time.sleep(0.002)
        S.enable_tracer("off", log_file=log)

    epoch()  # warm-up: imports, first layouts
    acc.clear()
    lines0 = _lines(log)
    for _ in range(rounds):
        epoch()
    lines = (_lines(log) - lines0) / rounds
    os.remove(log)
    steps = {
        label: {
            "cpu_ms_per_epoch": round(acc[label][0] / rounds * 1000, 3),
            "faults_per_epoch": round(acc[label][1] / rounds, 1),
            "calls_per_epoch": round(acc[label][2] / rounds, 1),
        }
        for _, _, label in STEPS
        if label in acc
    }
    return {"rounds": rounds, "workers": workers, "level": level, "lines_per_epoch": lines, "steps": steps}


def _lines(path: str) -> int:
    if not os.path.exists(path):
        return 0
    with open(path, "rb") as f:
        return sum(1 for _ in f)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--level", default="chunk")
    ap.add_argument("--samples", type=int, default=20_000)
    ap.add_argument("--root", default=os.path.join(tempfile.gettempdir(), "streamscope-bench-data"))
    ap.add_argument("--out", default=None, help="write the result here instead of results/bench_tracer_flush.json")
    args = ap.parse_args()
    bench = start("bench_tracer_flush", args)
    os.makedirs(args.root, exist_ok=True)
    data_dir = make_dataset(args.root, args.samples)
    res = run(data_dir, args.rounds, args.workers, args.level)
    for label, row in res["steps"].items():
        print(
            f"{label:15s} calls/epoch {row['calls_per_epoch']:5.1f}  cpu ms/epoch {row['cpu_ms_per_epoch']:7.3f}  "
            f"faults/epoch {row['faults_per_epoch']:7.1f}"
        )
    print(f"lines per epoch {res['lines_per_epoch']:.0f}")
    bench.write(res, summary=summarize(res), out=args.out)


def summarize(res: dict[str, Any]) -> list[dict[str, Any]]:
    """The README's rows: per step of the flush (nested), CPU ms, page faults and calls per epoch."""
    return [
        {
            "step": label,
            "CPU ms/epoch": row["cpu_ms_per_epoch"],
            "faults/epoch": row["faults_per_epoch"],
            "calls/epoch": row["calls_per_epoch"],
        }
        for label, row in res["steps"].items()
    ]


if __name__ == "__main__":
    main()
