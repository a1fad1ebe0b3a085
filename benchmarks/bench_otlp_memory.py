"""Memory of the main process over many epochs with OTLP export on and its endpoint unreachable.

``PYTHONPATH=$PWD/src:$PWD python benchmarks/bench_otlp_memory.py [--epochs 50] [--samples 4000]`` writes a local
image dataset (``{uint8 3x64x64, int, str}`` samples, 50 a chunk, zstd) and runs, each in a fresh process and
side by side in one invocation:

* ``off``: ``--epochs`` epochs of a ``StreamingDataLoader`` (2 forked workers, batch 64), telemetry off;
* ``refused``: the same with ``streamscope.enable_telemetry()`` (metrics, and spans at the ``chunk`` level) to an
  endpoint where nothing listens (every export fails at once: connection refused);
* ``hang``: the same to an endpoint that accepts connections and never answers (every export runs into its
  timeout, 1 s here), so spans pile up against the bounded queue.

Exports are made frequent so the faults repeat (metrics every 0.5 s, spans every 0.2 s). After each epoch the
child records its RSS (``psutil``, the main process only). The target (issue 23): the main process's RSS grows by at
most 10 MB over the epochs with the endpoint unreachable. The script prints, per case, RSS after the first epoch,
after the last, the growth between them, and the telemetry's own counts (spans exported, dropped); the growth of
``off`` is the loader's own, for comparison. Writes ``results/bench_otlp_memory.json`` (``--out``).

Public API only (``streamscope.optimize`` writes the dataset, ``streamscope.enable_telemetry`` switches export on).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

from _datasets import write_small_images
from _results import start

MB = 1 << 20


def _image(i: int) -> dict[str, Any]:
    import numpy as np

    rng = np.random.default_rng(i)
    return {"image": rng.integers(0, 255, (3, 64, 64), dtype=np.uint8), "label": i, "name": f"img{i}"}


def _black_hole() -> tuple[socket.socket, int]:
    """A listening socket that accepts and never answers (connections are held open)."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(64)
    held: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                conn, _ = srv.accept()
            except OSError:
                return
            held.append(conn)

    threading.Thread(target=accept, daemon=True).start()
    return srv, srv.getsockname()[1]


def _refused_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now
    return port


def child(case: str, data: str, epochs: int, endpoint: str) -> dict[str, Any]:
    import psutil

    import streamscope
    from streamscope import StreamingDataLoader, StreamingDataset

    handle = None
    if case != "off":
        os.environ.update(
            OTEL_EXPORTER_OTLP_ENDPOINT=endpoint,
            OTEL_EXPORTER_OTLP_TIMEOUT="1000",
            OTEL_METRIC_EXPORT_INTERVAL="500",
            OTEL_BSP_SCHEDULE_DELAY="200",
            STREAMSCOPE_OTEL_EXIT_TIMEOUT="1",
        )
        handle = streamscope.enable_telemetry(trace_level="chunk")
    proc = psutil.Process()
    rss: list[int] = [proc.memory_info().rss]
    loop_s: list[float] = []
    for _ in range(epochs):
        loader = StreamingDataLoader(StreamingDataset(data), batch_size=64, num_workers=2)
        t0 = time.perf_counter()
        n = sum(1 for _ in loader)
        loop_s.append(time.perf_counter() - t0)
        assert n == len(loader)
        rss.append(proc.memory_info().rss)
    out: dict[str, Any] = {"rss": rss, "loop_s": loop_s}
    if handle is not None:
        out["stats"] = handle.stats
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=50)
    ap.add_argument("--samples", type=int, default=4000)
    ap.add_argument("--cases", default="off,refused,hang")
    ap.add_argument("--out", default=None, help="write the result here instead of results/bench_otlp_memory.json")
    ap.add_argument("--child", nargs=3, metavar=("CASE", "DATA", "ENDPOINT"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        case, data, endpoint = args.child
        print(json.dumps(child(case, data, args.epochs, endpoint)), flush=True)
        return

    bench = start("bench_otlp_memory", args)
    tmp = tempfile.mkdtemp(prefix="bench-otlp-memory-")
    data = write_small_images(os.path.join(tmp, "ds"), args.samples, chunk_size=50, compression="zstd", make=_image)
    hole, hole_port = _black_hole()
    endpoints = {"off": "", "refused": f"http://127.0.0.1:{_refused_port()}", "hang": f"http://127.0.0.1:{hole_port}"}
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "STREAMSCOPE_"))}
    results: dict[str, Any] = {"epochs": args.epochs, "samples": args.samples, "cases": {}}
    for case in args.cases.split(","):
        t0 = time.perf_counter()
        run = subprocess.run(
            [sys.executable, __file__, "--epochs", str(args.epochs), "--child", case, data, endpoints[case]],
            env=env,
            capture_output=True,
            text=True,
        )
        if run.returncode != 0:
            raise SystemExit(f"{case} failed:\n{run.stderr[-3000:]}")
        got = json.loads(run.stdout.strip().splitlines()[-1])
        rss = got["rss"]
        got["growth_mb"] = (rss[-1] - rss[1]) / MB
        got["wall_s"] = time.perf_counter() - t0
        got["said"] = [line for line in run.stderr.splitlines() if line.startswith("streamscope telemetry:")]
        results["cases"][case] = got
        stats = got.get("stats", {})
        print(
            f"{case:8s} RSS after epoch 1 {rss[1] / MB:7.1f} MB, after epoch {args.epochs} {rss[-1] / MB:7.1f} MB: "
            f"growth {got['growth_mb']:+.1f} MB (target <= 10 MB); median epoch {sorted(got['loop_s'])[len(rss) // 2 - 1]:.2f} s; "
            f"{stats}",
            flush=True,
        )
        for line in got["said"]:
            print(f"         {line}")
    hole.close()
    bench.write(results, summary=summarize(results), out=args.out)


def summarize(results: dict[str, Any]) -> list[dict[str, Any]]:
    """The README's rows: RSS after the first and the last epoch per case, the growth, the telemetry's counts."""
    rows = []
    for case, got in results["cases"].items():
        rss, stats = got["rss"], got.get("stats", {})
        failed, dropped = stats.get("failed", {}), stats.get("dropped", {})
        rows.append(
            {
                "case": case,
                "RSS after epoch 1 (MB)": round(rss[1] / MB, 1),
                f"after epoch {len(rss) - 1} (MB)": round(rss[-1] / MB, 1),
                "growth (MB)": round(got["growth_mb"], 1),
                "exports failed (traces/metrics)": f"{failed['traces']} / {failed['metrics']}" if failed else "",
                "dropped (spans/points)": f"{dropped['traces']} / {dropped['metrics']}" if dropped else "",
            }
        )
    return rows


if __name__ == "__main__":
    main()
