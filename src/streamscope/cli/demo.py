"""The main job on an embedded default: local disk, synthetic data.

Optimizes a synthetic image-like dataset, streams one epoch with the tracer at level "chunk", writes the
trace and a summary, and prints throughput and where the outputs went. While it runs it serves its metrics for
Prometheus (``metrics_port``: 0 = a free port) and says where, with the ``streamscope top`` line that watches
them; ``linger`` keeps serving that many seconds after the run.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from typing import Any

__all__ = ["run_demo"]


def _make_sample(i: int) -> dict[str, Any]:
    import numpy as np

    rng = np.random.default_rng(i)
    return {"image": rng.integers(0, 255, size=(3, 64, 64), dtype=np.uint8), "label": i % 10, "id": f"sample-{i:07d}"}


def _serve_metrics(port: int) -> str | None:
    """Start the Prometheus endpoint; its URL, or None (said why) when it cannot run here."""
    from streamscope._core.errors import MissingDependencyError, PrometheusPortError
    from streamscope.telemetry.prometheus import endpoint_url, start_endpoint

    try:
        start_endpoint(port)
    except (MissingDependencyError, PrometheusPortError) as exc:
        print(f"metrics:  not served ({exc})")
        return None
    url = endpoint_url()
    if url:
        print(f"metrics:  {url} (Prometheus text format), served while the demo runs")
        print(f"watch:    python -m streamscope top --url {url}", flush=True)
    return url


def run_demo(output: str, samples: int, workers: int, metrics_port: int | None = 0, linger: float = 0.0) -> int:
    import streamscope as ss

    out = os.path.abspath(output)
    data_dir = os.path.join(out, "dataset")
    log_file = os.path.join(out, "trace.log")
    if os.path.exists(out):
        shutil.rmtree(out)
    os.makedirs(out)
    summary: dict[str, Any] = {"samples": samples, "workers": workers, "output_dir": out}

    missing = [
        n for n in ("optimize", "StreamingDataset", "StreamingDataLoader", "enable_tracer") if not hasattr(ss, n)
    ]
    if missing:
        print(f"streamscope {ss.__version__}: not built yet: {', '.join(missing)}; nothing to run.")
        return 1

    ss.enable_tracer(level="chunk", log_file=log_file)
    if metrics_port is not None:
        summary["metrics_url"] = _serve_metrics(metrics_port)

    t0 = time.perf_counter()
    ss.optimize(
        fn=_make_sample, inputs=list(range(samples)), output_dir=data_dir, chunk_bytes="16MB", num_workers=workers
    )
    t_opt = time.perf_counter() - t0
    summary["optimize_s"] = round(t_opt, 3)
    summary["optimize_samples_per_s"] = round(samples / t_opt, 1)

    ds = ss.StreamingDataset(data_dir, shuffle=True)
    loader = ss.StreamingDataLoader(ds, batch_size=256, num_workers=workers)
    t0 = time.perf_counter()
    seen = 0
    first_batch_s = None
    for batch in loader:
        if first_batch_s is None:
            first_batch_s = time.perf_counter() - t0
        seen += len(batch["label"])
    t_stream = time.perf_counter() - t0
    summary["stream_s"] = round(t_stream, 3)
    summary["stream_samples_per_s"] = round(seen / t_stream, 1)
    summary["first_batch_s"] = round(first_batch_s or 0.0, 3)
    summary["samples_seen"] = seen
    if seen != samples:
        print(f"ERROR: streamed {seen} samples, expected {samples}")
        return 1
    ss.flush_tracer()
    summary["trace_log"] = log_file
    summary["metrics"] = ss.metrics().to_dict()

    # The trace, opened for people: Chrome JSON and native Perfetto, and the stall report with its plots.
    from trace_tools.cli import main as trace_main

    chrome, perfetto = os.path.join(out, "trace.json.gz"), os.path.join(out, "trace.pftrace")
    for target in (chrome, perfetto):
        if trace_main(["convert", log_file, "-o", target]) != 0:
            print(f"ERROR: converting the trace to {target} failed")
            return 1
    summary["trace_chrome_json"], summary["trace_perfetto"] = chrome, perfetto
    print("--- streamscope-trace summary ---")
    if trace_main(["summary", log_file, "-o", out]) != 0:
        print("ERROR: summarising the trace failed")
        return 1
    summary_path = os.path.join(out, "summary.json")
    with open(summary_path, "w") as f:
        json.dump(summary, f, indent=2, default=str)
    print(f"optimize: {samples} samples in {t_opt:.2f} s ({samples / t_opt:,.0f} samples/s) -> {data_dir}")
    print(
        f"stream:   {seen} samples in {t_stream:.2f} s ({seen / t_stream:,.0f} samples/s), first batch {summary['first_batch_s']} s"
    )
    print(f"trace:    {log_file} (Chrome: {chrome}; Perfetto: {perfetto})")
    print(f"summary:  {summary_path}")
    url = summary.get("metrics_url")
    if url and linger > 0:
        print(f"metrics:  still served at {url} for {linger:g} s (Ctrl-C stops)", flush=True)
        try:
            time.sleep(linger)
        except KeyboardInterrupt:
            pass
    elif url:
        print(f"metrics:  {url} was served during the run (--linger SECONDS keeps it up afterwards)")
    return 0
