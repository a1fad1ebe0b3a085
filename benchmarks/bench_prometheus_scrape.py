"""What one Prometheus scrape of the endpoint costs the main process while two DataLoader workers run.

``PYTHONPATH=$PWD/src:$PWD python benchmarks/bench_prometheus_scrape.py [--epochs 3] [--samples 4000]`` runs
metrics-only epochs of a local image dataset with ``num_workers=2`` (a transform of about 1 ms a sample keeps
them busy) with the endpoint on (``start_endpoint(0)``). Between batches the loop times, alternately:

* ``view``: ``streamscope.events.metrics_view()`` alone (what every scrape reads);
* ``collect``: the view translated into metric families and rendered in the text format
  (``generate_latest`` of the endpoint's registry): the whole work of a scrape in the main process;

and a thread outside the loop GETs ``/metrics`` every 50 ms (``http``: a scrape's wall time as Prometheus
sees it, server thread included). Each in-loop measure is the thread's CPU time and wall time; the script
prints medians and 90th percentiles, the ratio collect / view, the exposition's size and series count, and
writes ``results/bench_prometheus_scrape.json`` (``--out``).

Public API (``streamscope.telemetry.prometheus.start_endpoint`` and ``streamscope.events.metrics_view``, both in
docs/telemetry.md) except one name: the endpoint's ``RegistryCollector``, registered in a registry of our own so
that the rendering can be timed apart from the HTTP server.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import threading
import time
import urllib.request
from typing import Any

from _datasets import small_image, write_small_images
from _results import start


def _busy(sample: Any) -> Any:
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
    ap.add_argument("--out", default=None, help="write the result here instead of results/bench_prometheus_scrape.json")
    args = ap.parse_args()
    run = start("bench_prometheus_scrape", args)

    os.environ["STREAMSCOPE_METRICS_INTERVAL"] = "0.2"
    from prometheus_client import CollectorRegistry, generate_latest

    from streamscope import StreamingDataLoader, StreamingDataset
    from streamscope import events as ev
    from streamscope.telemetry import prometheus as prom

    tmp = tempfile.mkdtemp(prefix="bench-prom-scrape-")
    data = write_small_images(os.path.join(tmp, "ds"), args.samples, chunk_size=100, make=small_image)
    port = prom.start_endpoint(0)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(prom.RegistryCollector())
    reads: dict[str, dict[str, list[float]]] = {k: {"wall": [], "cpu": []} for k in ("view", "collect")}
    http: list[float] = []
    stop = threading.Event()
    size = {"bytes": 0, "series": 0}

    def scrape() -> None:
        while not stop.is_set():
            t = time.perf_counter()
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
                body = r.read()
            http.append((time.perf_counter() - t) * 1e6)
            size["bytes"] = len(body)
            size["series"] = sum(1 for line in body.splitlines() if line and not line.startswith(b"#"))
            time.sleep(0.05)

    th = threading.Thread(target=scrape, daemon=True)
    th.start()
    work = {"view": ev.metrics_view, "collect": lambda: generate_latest(registry)}
    order = ["view", "collect"]
    for _ in range(args.epochs):
        loader = StreamingDataLoader(StreamingDataset(data, transform=_busy), batch_size=32, num_workers=2)
        for j, _batch in enumerate(loader):
            if j < 3:
                continue
            kind = order[j % 2]
            c0, w0 = time.thread_time(), time.perf_counter()
            work[kind]()
            w1, c1 = time.perf_counter(), time.thread_time()
            reads[kind]["wall"].append((w1 - w0) * 1e6)
            reads[kind]["cpu"].append((c1 - c0) * 1e6)
    stop.set()
    th.join(10)
    prom.stop_endpoint()
    out: dict[str, Any] = {"samples": args.samples, "epochs": args.epochs, "workers": 2, **size}
    for kind, m in reads.items():
        for measure, xs in m.items():
            out[f"{kind}_{measure}_us_median"] = round(statistics.median(xs), 1)
            out[f"{kind}_{measure}_us_p90"] = round(_pct(xs, 0.9), 1)
        out[f"{kind}_reads"] = len(m["wall"])
    out["http_wall_us_median"] = round(statistics.median(http), 1)
    out["http_wall_us_p90"] = round(_pct(http, 0.9), 1)
    out["http_scrapes"] = len(http)
    for measure in ("wall", "cpu"):
        out[f"collect_over_view_{measure}_median"] = round(
            out[f"collect_{measure}_us_median"] / out[f"view_{measure}_us_median"], 2
        )
    print(json.dumps(out, indent=1))
    run.write(out, summary=summarize(out), out=args.out)


def summarize(out: dict[str, Any]) -> list[dict[str, Any]]:
    """The README's rows: the view read, the scrape's work in the main process, and a scrape over HTTP."""
    rows = [
        {
            "measure": label,
            "CPU ms median": round(out[f"{kind}_cpu_us_median"] / 1000, 2),
            "CPU ms p90": round(out[f"{kind}_cpu_us_p90"] / 1000, 2),
            "wall ms median": round(out[f"{kind}_wall_us_median"] / 1000, 2),
        }
        for kind, label in (("view", "metrics_view()"), ("collect", "scrape: view + families + text"))
    ]
    rows.append({"measure": f"GET /metrics ({out['series']} series, {out['bytes']} B)", "CPU ms median": None,
                 "CPU ms p90": None, "wall ms median": round(out["http_wall_us_median"] / 1000, 2)})
    return rows


if __name__ == "__main__":
    main()
