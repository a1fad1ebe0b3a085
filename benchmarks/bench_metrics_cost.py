"""What metrics cost a training loop, and which part of them: one process, metrics switched on and off per epoch.

``PYTHONPATH=$PWD/src:$PWD python benchmarks/bench_metrics_cost.py [--rounds 40] [--workers 0,2]
[--knock none observer bytes split all]``

bench_tracer.py's telemetry A/B runs each arm in its own long-lived process; its A/A arm shows that two processes
with the same settings differ by up to 1.2 % (memory layout), which is most of the 2 % issue 33 allows. Here one
process runs both arms: before each epoch metrics go on (``enable_metrics("chunk")``'s categories) or off
(``streamscope.events.configure``), and a fresh ``StreamingDataLoader(StreamingDataset(...), batch_size=64)``
reads one epoch of bench_tracer.py's 20,000-image set, as that benchmark's epochs do. DataLoader workers are forked
per epoch, so they take the arm of their epoch. Each round runs off, on, on, off (the next round on, off, off, on);
its ratio is the on epochs' CPU over the off epochs' (this process and its reaped workers), its A/A the second off
epoch over the first. Reported: the median of the per-round ratios with a 95 % bootstrap interval.

``--knock`` names what the on arm leaves out, to attribute the cost (diagnostic: it patches internals, so a result
with a knock-out is no user's configuration):

* ``observer``: the capacity model's gauges a loader starts with metrics on (``tune/observe.py``);
* ``bytes``: counting each single batch's tensor bytes on the loop's thread (``Reorder``'s ``count_bytes``);
* ``split``: the ``stall`` category, i.e. the loop's wait timeline and the wait split (its ring, the shares);
* ``all``: the three; ``none``: metrics as a user gets them.

Writes ``results/bench_metrics_cost.json`` (``--out``).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

from _ab import bootstrap_ci95
from _results import start

HERE = os.path.dirname(os.path.abspath(__file__))
PARTS = ("observer", "bytes", "split")


def _cpu() -> float:
    """This process (every thread) and its reaped DataLoader workers."""
    c = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + c.ru_utime + c.ru_stime


def _knock(parts: set[str]) -> frozenset[str]:
    """Leave ``parts`` out of the on arm; returns its metric categories."""
    from streamscope._core import hooks
    from streamscope.engine import batching
    from streamscope.events import vocab

    cats = set(vocab.categories_for_level("chunk"))
    if "observer" in parts:
        hooks.provide("observer", lambda loader: None)
    if "bytes" in parts:
        # the loop's Reorder only: patching batching.batch_bytes itself would also change how the workers size
        # their groups of batches (an A/B of that knock ran 1.36x slower with workers, not a cost of metrics)
        init = batching.Reorder.__init__

        def uncounted(self: Any, first: int, arenas: Any = None, count_bytes: bool = False) -> None:
            init(self, first, arenas, False)

        batching.Reorder.__init__ = uncounted  # type: ignore[method-assign]
    if "split" in parts:
        cats.discard("stall")
    return frozenset(cats)


def _arm(on: bool, cats: frozenset[str]) -> None:
    from streamscope import events as ev

    os.environ["STREAMSCOPE_METRICS_LEVEL"] = ",".join(sorted(cats)) if on else ""  # the forked workers read it
    ev.configure(frozenset(), cats if on else frozenset(), None)


def _epoch(data_dir: str, workers: int) -> float:
    import streamscope as S

    c = _cpu()
    for _ in S.StreamingDataLoader(S.StreamingDataset(data_dir), batch_size=64, num_workers=workers):
        pass
    while multiprocessing.active_children():  # the workers' CPU counts once they are reaped
        time.sleep(0.002)
    return _cpu() - c


CHILD = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
import bench_metrics_cost as B
print(json.dumps(B.measure(sys.argv[2], int(sys.argv[3]), set(filter(None, sys.argv[4].split(","))), int(sys.argv[5]))))
"""


def measure(data_dir: str, workers: int, knock: set[str], rounds: int) -> dict[str, Any]:
    """The rounds of one (workers, knock-out) case, in this process."""
    multiprocessing.set_start_method("fork", force=True)
    cats = _knock(knock)
    for on in (False, True, False, True):  # warm-up: imports, page cache, the first loaders
        _arm(on, cats)
        _epoch(data_dir, workers)
    ratios, aa, off_s = [], [], []
    for r in range(rounds):
        order = (False, True, True, False) if r % 2 == 0 else (True, False, False, True)
        got: dict[bool, list[float]] = {False: [], True: []}
        for on in order:
            _arm(on, cats)
            got[on].append(_epoch(data_dir, workers))
        ratios.append(sum(got[True]) / sum(got[False]))
        aa.append(got[False][1] / got[False][0])
        off_s.extend(got[False])
    _arm(False, cats)
    return {
        "workers": workers,
        "knock": sorted(knock),
        "rounds": rounds,
        "off_cpu_median_s": round(statistics.median(off_s), 4),
        "on_over_off_median": round(statistics.median(ratios), 4),
        "on_over_off_ci95": bootstrap_ci95(ratios),
        "aa_median": round(statistics.median(aa), 4),
        "aa_ci95": bootstrap_ci95(aa),
        "ratios": [round(x, 4) for x in ratios],
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--samples", type=int, default=20_000)
    ap.add_argument("--workers", default="0,2")
    ap.add_argument("--knock", nargs="+", default=["none", "observer", "bytes", "split", "all"])
    ap.add_argument("--out", default=None, help="write the result here instead of results/bench_metrics_cost.json")
    args = ap.parse_args()
    for k in args.knock:
        if k not in ("none", "all", *PARTS):
            ap.error(f"--knock: {k!r} is none of none, all, {', '.join(PARTS)}")
    run = start("bench_metrics_cost", args)
    sys.path.insert(0, HERE)
    import bench_tracer  # the dataset and its maker are shared with the timed benchmark

    data_dir = bench_tracer.make_dataset(os.path.join(tempfile.gettempdir(), "streamscope-bench-data"), args.samples)
    cases = []
    for workers in [int(w) for w in args.workers.split(",")]:
        for k in args.knock:
            parts = set(PARTS) if k == "all" else set() if k == "none" else {k}
            # each case in a fresh process: a knock-out patches the process for good
            out = subprocess.run(
                [sys.executable, "-c", CHILD, HERE, data_dir, str(workers), ",".join(sorted(parts)), str(args.rounds)],
                capture_output=True,
                text=True,
                timeout=3600,
                env={k2: v for k2, v in os.environ.items() if not k2.startswith(("STREAMSCOPE_", "LITDATA_"))},
            )
            if out.returncode != 0:
                raise RuntimeError(f"case workers={workers} knock={k} failed: {out.stderr.strip()[-2000:]}")
            case = json.loads(out.stdout.strip().splitlines()[-1])
            case["case"] = k
            print(json.dumps({x: case[x] for x in case if x != "ratios"}), flush=True)
            cases.append(case)
    run.write({"samples": args.samples, "cases": cases}, summary=summarize(cases), out=args.out)


def summarize(cases: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The README's rows: per case, metrics on over off in the same process, and the A/A."""
    return [
        {
            "num_workers": c["workers"],
            "left out of the on arm": c["case"],
            "rounds": c["rounds"],
            "on / off (median)": c["on_over_off_median"],
            "95 %": f"{c['on_over_off_ci95'][0]}-{c['on_over_off_ci95'][1]}",
            "A/A": f"{c['aa_median']} ({c['aa_ci95'][0]}-{c['aa_ci95'][1]})",
            "off epoch CPU s": c["off_cpu_median_s"],
        }
        for c in cases
    ]


if __name__ == "__main__":
    main()
