"""What one tick of the auto-tuner's reading costs: the model's inputs of one rank, read as the tuner reads them.

``PYTHONPATH=$PWD/src:$PWD python benchmarks/bench_tune_read.py [--reads 2000] [--workers 2]`` builds a small
compressed dataset, iterates a ``StreamingDataLoader(..., autotune=True)`` (its tuner stopped, so only this script
reads) through one epoch so the wait ring, the batch count and the merged metrics hold real values, then, with the
loop paused mid-epoch (the workers alive), times ``--reads`` calls of each part of a tick, best and median in µs:

* ``progress``: the loader's batch count and the ring of the loop's waits (``LoaderTarget.progress``);
* ``metrics view``: ``events.metrics_view()`` and the downloads, retries, decode CPU and wait split read from it;
* ``cpu pressure``: ``/proc/pressure/cpu`` (1.0 where missing);
* ``resident memory``: the process tree's RSS (psutil, ``tune.budgets.tree_rss``), which ``Sensors.resources``
  reads at most every ``RSS_EVERY`` (5) seconds for the RAM budget;
* ``whole tick``: ``Sensors.read`` plus ``Sensors.resources`` (cached), then ``Controller.step``.

``progress`` is timed with the loop paused, so it finds no new wait in the ring: its cost in a running loop adds
one numpy gather of the waits since the last tick (about as many as batches per second).

The tuner reads once per ``metrics_interval`` (1 s): the whole tick's µs is its cost in µs per second of training.
Writes ``results/bench_tune_read.json`` (``--out``).

Internals used, because they are what is measured: ``streamscope.tune.runner.Sensors`` and the loader's tuner
(``loader.tuner.tuner``).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from typing import Any

from _results import start, time_calls

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reads", type=int, default=2000)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--out", default=None, help="write the result here instead of results/bench_tune_read.json")
    args = ap.parse_args()
    run = start("bench_tune_read", args)

    from streamscope import events as ev
    from streamscope.engine.dataloader import StreamingDataLoader
    from streamscope.engine.dataset import StreamingDataset
    from streamscope.tune.budgets import tree_rss
    from streamscope.tune.runner import Sensors
    from streamscope.tune.signals import cpu_pressure, read_view
    from tests.engine._data import write_dataset

    tmp = tempfile.mkdtemp(prefix="bench-tune-read-")
    src = write_dataset(os.path.join(tmp, "src"), 4000, chunk_size=50, compression="zstd")
    ds = StreamingDataset(src, cache_dir=os.path.join(tmp, "cache"), shuffle=True, seed=1)
    dl = StreamingDataLoader(ds, batch_size=16, num_workers=args.workers, autotune=True)
    for _ in dl:  # one epoch: the ring, the batch count and the merged metrics hold values
        pass
    it = iter(dl)
    for _ in range(20):  # mid-epoch, workers alive
        next(it)
    tuner = dl.tuner.tuner
    tuner.stop()  # only this script reads from here on
    target = tuner.target
    sensors = Sensors()
    now = time.monotonic

    def tick() -> None:
        reading = sensors.read(now(), target)
        res = sensors.resources()
        tuner.controller.step(now(), reading, res)

    parts = {
        "progress": lambda: target.progress(),
        "metrics view": lambda: read_view(ev.metrics_view()),
        "cpu pressure": lambda: cpu_pressure(),
        "resident memory": lambda: tree_rss(os.getpid()),
        "whole tick": tick,
    }
    result: dict[str, Any] = {}
    for name, fn in parts.items():
        result[name] = time_calls(fn, args.reads)
    del it
    pressure_file = os.path.exists("/proc/pressure/cpu")
    print(f"{'part':<18} {'best µs':>9} {'median µs':>10}")
    for name, r in result.items():
        print(f"{name:<18} {r['best_us']:9.1f} {r['median_us']:10.1f}")
    tick_us = result["whole tick"]["median_us"] + result["resident memory"]["median_us"] / 5
    print(f"\none tick per second, the RSS every 5: {tick_us:.0f} µs per second ({tick_us / 1e4:.3f}% of one core)")
    summary = [
        {"case": k, "best µs": round(v["best_us"], 1), "median µs": round(v["median_us"], 1)} for k, v in result.items()
    ]
    run.write({"parts": result, "psi": pressure_file, "workers": args.workers}, summary=summary, out=args.out)


if __name__ == "__main__":
    main()
