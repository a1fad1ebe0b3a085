"""What one read of the merged metrics costs in the main process while two DataLoader workers run.

``PYTHONPATH=$PWD/src:$PWD python benchmarks/bench_metrics_read.py [--epochs 3] [--samples 4000]`` runs
metrics-only epochs (``enable_metrics("chunk")``, no trace log) of a local image dataset with ``num_workers=2``
and a transform that keeps the workers busy (about 1 ms a sample, so an epoch lasts seconds and the workers
publish their snapshots every ``metrics_interval``, 0.2 s here). Between batches the loop reads, alternately:

* ``streamscope.events.metrics_view()``: the side-effect-free read (no flush, no file read: the flusher's last
  scan), as registry data points;
* ``streamscope.metrics()``: the older read, which flushes this process and rescans the run directory first.

Each read is timed in wall time and in the thread's CPU time (``time.thread_time``); the script prints the
median and 90th percentile of each and their ratio (the flushing read over the side-effect-free one), and
writes ``results/bench_metrics_read.json`` (``--out``). The reads' cost is the main process's: it lands on the
training loop when the loop (or a tuner thread holding the GIL) reads.

Public API only: ``streamscope.StreamingDataset``/``StreamingDataLoader``, ``streamscope.metrics``,
``streamscope.api.tracing.enable_metrics`` and ``streamscope.events.metrics_view`` (both documented in README.md).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from typing import Any

from _datasets import small_image, write_small_images
from _results import start


def _busy(sample: Any) -> Any:
    """About a millisecond of worker CPU per sample."""
    end = time.thread_time() + 0.001
    while time.thread_time() < end:
        pass
    return sample


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--samples", type=int, default=4000)
    ap.add_argument("--out", default=None, help="write the result here instead of results/bench_metrics_read.json")
    args = ap.parse_args()
    run = start("bench_metrics_read", args)

    os.environ["STREAMSCOPE_METRICS_INTERVAL"] = "0.2"
    import streamscope
    from streamscope import StreamingDataLoader, StreamingDataset
    from streamscope import events as ev
    from streamscope.api.tracing import enable_metrics

    tmp = tempfile.mkdtemp(prefix="bench-metrics-read-")
    data = write_small_images(os.path.join(tmp, "ds"), args.samples, chunk_size=100, make=small_image)
    enable_metrics("chunk")
    reads: dict[str, dict[str, list[float]]] = {"view": {"wall": [], "cpu": []}, "metrics": {"wall": [], "cpu": []}}
    points = 0
    readers = {"view": ev.metrics_view, "metrics": streamscope.metrics}
    order = ["view", "metrics"]
    for _ in range(args.epochs):
        loader = StreamingDataLoader(StreamingDataset(data, transform=_busy), batch_size=32, num_workers=2)
        for j, _batch in enumerate(loader):
            if j < 3:
                continue  # the workers have started and published
            kind = order[j % 2]
            c0, w0 = time.thread_time(), time.perf_counter()
            got = readers[kind]()
            w1, c1 = time.perf_counter(), time.thread_time()
            reads[kind]["wall"].append((w1 - w0) * 1e6)
            reads[kind]["cpu"].append((c1 - c0) * 1e6)
            if kind == "view":
                points = len(got.points)
    out: dict[str, Any] = {"samples": args.samples, "epochs": args.epochs, "workers": 2, "view_points": points}
    for kind, m in reads.items():
        for measure, xs in m.items():
            out[f"{kind}_{measure}_us_median"] = round(statistics.median(xs), 1)
            out[f"{kind}_{measure}_us_p90"] = round(_pct(xs, 0.9), 1)
        out[f"{kind}_reads"] = len(m["wall"])
    for measure in ("wall", "cpu"):
        out[f"metrics_over_view_{measure}_median"] = round(
            out[f"metrics_{measure}_us_median"] / out[f"view_{measure}_us_median"], 2
        )
    print(json.dumps(out, indent=1))
    run.write(out, summary=summarize(out), out=args.out)


def summarize(out: dict[str, Any]) -> list[dict[str, Any]]:
    """The README's rows: each read's median and p90 CPU time, and the flushing read over the view."""
    rows = []
    for kind, label in (("view", "metrics_view()"), ("metrics", "streamscope.metrics()")):
        rows.append(
            {
                "read": label,
                "CPU ms median": round(out[f"{kind}_cpu_us_median"] / 1000, 2),
                "CPU ms p90": round(out[f"{kind}_cpu_us_p90"] / 1000, 2),
                "wall ms median": round(out[f"{kind}_wall_us_median"] / 1000, 2),
                "x view (CPU)": round(out[f"{kind}_cpu_us_median"] / out["view_cpu_us_median"], 2),
            }
        )
    return rows


if __name__ == "__main__":
    main()
