"""What one tick of the capacity model's observer costs (``tune/observe.py``: the model's gauges with metrics on and
the tuner off).

``PYTHONPATH=$PWD/src:$PWD python benchmarks/bench_observe.py [--reads 2000] [--workers 2] [--out FILE]`` builds a
small compressed dataset, switches metrics on (``enable_metrics``), iterates a ``StreamingDataLoader`` (autotune
off) through one epoch, so its observer starts and the wait ring, the batch count and the merged metrics hold real
values, then, with the loop paused mid-epoch (the workers alive) and the observer's thread stopped (only this
script reads), times ``--reads`` calls of each part of a tick, best and median in µs:

* ``reading``: ``Sensors.read`` (the loader's batch count and wait ring, the metrics view, the CPU pressure);
* ``gauges``: ``ModelGauges.update`` of a window with a batch and downloads (the model's filters and estimates),
  after one that starts it (counters gone back: two calls, timed together);
* ``whole tick``: ``Observer.step`` (a reading, then the gauges: a window without a new batch, as with the loop
  paused).

The observer reads once per ``metrics_interval`` (1 s): the whole tick's µs is its cost in µs per second of
training. Writes ``results/bench_observe.json`` (``--out``).
"""

from __future__ import annotations

import argparse
import dataclasses
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
    ap.add_argument("--out", default=None, help="write the result here instead of results/bench_observe.json")
    args = ap.parse_args()
    run = start("bench_observe", args)

    from streamscope.api.observe import observer_of
    from streamscope.api.tracing import enable_metrics
    from streamscope.engine.dataloader import StreamingDataLoader
    from streamscope.engine.dataset import StreamingDataset
    from streamscope.tune.signals import Reading
    from tests.engine._data import write_dataset

    enable_metrics()
    tmp = tempfile.mkdtemp(prefix="bench-observe-")
    src = write_dataset(os.path.join(tmp, "src"), 4000, chunk_size=50, compression="zstd")
    ds = StreamingDataset(src, cache_dir=os.path.join(tmp, "cache"), shuffle=True, seed=1)
    dl = StreamingDataLoader(ds, batch_size=16, num_workers=args.workers, autotune=False)
    for _ in dl:  # one epoch: the observer started, the ring, the batch count and the merged metrics hold values
        pass
    it = iter(dl)
    for _ in range(20):  # mid-epoch, workers alive
        next(it)
    obs = observer_of(dl)
    assert obs is not None, "no observer: metrics off?"
    obs.stop()  # only this script reads from here on
    now = time.monotonic
    r0 = Reading(t=0.0)
    r1 = Reading(t=1.0, batches=100, wait_s=0.2, downloads=20, download_s=0.5, download_bytes=2e6)
    state = {"i": 0}

    def gauges() -> None:
        state["i"] += 1  # a window of 1 s with a batch and downloads each time (the model's filters move)
        k = state["i"]
        obs.gauges.update(dataclasses.replace(r0, t=k), True, feed=True)
        obs.gauges.update(dataclasses.replace(r1, t=k + 1.0), True, feed=True)

    parts = {
        "reading": lambda: obs.sensors.read(now(), obs.target),
        "gauges": gauges,
        "whole tick": obs.step,
    }
    result: dict[str, Any] = {name: time_calls(fn, args.reads) for name, fn in parts.items()}
    del it
    print(f"{'part':<12} {'best µs':>9} {'median µs':>10}")
    for name, r in result.items():
        print(f"{name:<12} {r['best_us']:9.1f} {r['median_us']:10.1f}")
    tick_us = result["whole tick"]["median_us"] + result["gauges"]["median_us"]  # a paused tick, plus a window
    print(f"\none tick per second: {tick_us:.0f} µs per second ({tick_us / 1e4:.3f}% of one core)")
    summary = [
        {"case": k, "best µs": round(v["best_us"], 1), "median µs": round(v["median_us"], 1)} for k, v in result.items()
    ]
    run.write({"parts": result, "workers": args.workers}, summary=summary, out=args.out)


if __name__ == "__main__":
    main()
