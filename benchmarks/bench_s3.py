"""Streaming from S3, streamscope vs LitData side by side against the same local S3 server, in one run.

Workload: the ``images`` dataset of ``benchmarks/_datasets.py`` (20,000 ``{uint8[3,64,64], int, str}`` samples in
64 MB chunks, written ONCE with the real ``litdata.optimize`` to a local directory), uploaded as-is to a bucket
on a moto S3 server on 127.0.0.1 (``tests/support/s3server.py``, SigV4 checked). Both engines read the same
objects.

Cases: ``num_workers`` 0 and 2, batch 256, no shuffle, one epoch from a FRESH cache directory per run (so every
chunk is downloaded). Each run is a fresh Python process (``--child``): a process that ran one engine never runs
the other (LitData starts obstore's tokio runtime in the main process, which would poison the other engine's
forked workers, and vice versa). Measured per run, inside the child after imports (torch, boto3 and obstore are
imported before timing in both; streamscope's lazy ``StreamingDataset``/``StreamingDataLoader`` names are
resolved before timing, as ``import litdata`` does eagerly): time to first batch
(construct dataset + loader, take one batch) and samples/s over the whole epoch (first batch included). Runs
alternate the engines; the best of ``--rounds`` is kept for each (the machine is shared).

LitData patch (LitData only, in-process, printed at start): LitData 0.2.68 builds its obstore ``S3Store`` with
``client_options={"timeout": "200s"}`` (``litdata/streaming/downloader.py:_OBSTORE_CLIENT_OPTIONS``), which
refuses plain ``http://`` endpoints. We set that module global to ``{"timeout": "200s", "allow_http": True}``
before any LitData dataset is built (forked DataLoader workers inherit it). Nothing else in LitData changes.

Run: ``PYTHONPATH=$PWD/src:$PWD python benchmarks/bench_s3.py [--rounds 1]``; writes
``benchmarks/results/bench_s3.json``.

Public API only (``streamscope.StreamingDataset``/``StreamingDataLoader``); the S3 server is the test suite's rig.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

os.environ.setdefault("LITDATA_DISABLE_VERSION_CHECK", "1")  # no network: LitData's PyPI check would time out

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, _HERE)
sys.path.insert(0, os.path.dirname(_HERE))  # repo root, for tests.support.s3server

from _datasets import IMAGES_N, ensure  # noqa: E402
from _results import start  # noqa: E402

BATCH = 256


def patch_litdata_allow_http() -> dict[str, Any]:
    """The one-line LitData patch: let its obstore client speak plain http (LitData only)."""
    import litdata.streaming.downloader as ld_downloader

    before = dict(ld_downloader._OBSTORE_CLIENT_OPTIONS)
    ld_downloader._OBSTORE_CLIENT_OPTIONS = {**before, "allow_http": True}  # type: ignore[assignment]
    print(
        f"[patch] LitData only: litdata.streaming.downloader._OBSTORE_CLIENT_OPTIONS {before} -> "
        f"{ld_downloader._OBSTORE_CLIENT_OPTIONS} (plain http to the local S3 server)",
        flush=True,
    )
    return {"module": "litdata.streaming.downloader", "name": "_OBSTORE_CLIENT_OPTIONS", "value": "allow_http=True"}


def upload(local_dir: str, srv: Any, bucket: str, prefix: str) -> int:
    """Upload every file of ``local_dir`` to ``s3://bucket/prefix/``; return bytes uploaded."""
    from boto3.s3.transfer import TransferConfig

    client = srv.endpoint(bucket).boto3_client()
    cfg = TransferConfig(multipart_threshold=1 << 40, use_threads=False)
    total = 0
    for name in sorted(os.listdir(local_dir)):
        path = os.path.join(local_dir, name)
        if os.path.isfile(path):
            client.upload_file(path, bucket, f"{prefix}/{name}", Config=cfg)
            total += os.path.getsize(path)
    return total


def run_epoch(make: Callable[[], Any]) -> dict[str, float]:
    """Build a loader, take its first batch (time to first batch), then finish the epoch."""
    t0 = time.perf_counter()
    loader = make()
    it = iter(loader)
    first = next(it)
    ttfb = time.perf_counter() - t0
    n = len(first["label"])
    for b in it:
        n += len(b["label"])
    dt = time.perf_counter() - t0
    del it, loader
    return {"first_batch_s": ttfb, "epoch_s": dt, "samples": n, "rate": n / dt}


def child(engine: str, workers: int, cache: str, url: str, opts_json: str) -> None:
    """One measured run in this (fresh) process; prints one JSON line."""
    opts = json.loads(opts_json)
    # Heavy third-party imports happen before timing in both engines' processes (a training script has torch
    # loaded already; LitData imports boto3/obstore at import time, streamscope lazily at first use).
    import boto3  # noqa: F401
    import obstore  # noqa: F401
    import torch  # noqa: F401

    if engine == "litdata":
        import litdata

        patch_litdata_allow_http()

        def make() -> Any:
            ds = litdata.StreamingDataset(url, cache_dir=cache, storage_options=dict(opts))
            return litdata.StreamingDataLoader(ds, batch_size=BATCH, num_workers=workers)

    else:
        import streamscope as ss

        if engine == "streamscope_obstore":  # obstore in the main process too (default "auto": boto3 there)
            opts = {**opts, "backend": "obstore"}

        dataset_cls, loader_cls = ss.StreamingDataset, ss.StreamingDataLoader  # resolve lazy names before timing

        def make() -> Any:
            ds = dataset_cls(url, cache_dir=cache, storage_options=dict(opts))
            return loader_cls(ds, batch_size=BATCH, num_workers=workers)

    res = run_epoch(make)
    print(json.dumps(res), flush=True)


def run_child(engine: str, workers: int, cache: str, url: str, opts: dict[str, Any]) -> dict[str, float]:
    """Run :func:`child` in a fresh interpreter and return its result."""
    cmd = [sys.executable, os.path.abspath(__file__), "--child", engine, str(workers), cache, url, json.dumps(opts)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    for line in proc.stdout.splitlines():
        if line.startswith("[patch]"):
            print("  " + line, flush=True)
    if proc.returncode != 0:
        raise SystemExit(f"{engine} w={workers} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--workers", type=int, nargs="+", default=[0, 2])
    ap.add_argument(
        "--obstore-main",
        action="store_true",
        help="also run streamscope with storage_options backend='obstore' (obstore in the main process too)",
    )
    ap.add_argument("--out", default=None, help="write the result here instead of results/bench_s3.json")
    ap.add_argument("--child", nargs=5, metavar=("ENGINE", "WORKERS", "CACHE", "URL", "OPTS"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        engine, workers, cache, url, opts_json = args.child
        child(engine, int(workers), cache, url, opts_json)
        return

    from tests.support.s3server import S3Server

    bench = start("bench_s3", args)
    images = ensure("images")
    results: dict[str, Any] = {
        "litdata_patch": {
            "module": "litdata.streaming.downloader",
            "name": "_OBSTORE_CLIENT_OPTIONS",
            "change": "{'timeout': '200s'} -> {'timeout': '200s', 'allow_http': True}, LitData child processes only",
        },
        "batch_size": BATCH,
        "cases": {},
    }
    with S3Server() as srv:
        bucket = srv.new_bucket("bench")
        t = time.perf_counter()
        nbytes = upload(images, srv, bucket, "images")
        print(f"uploaded {nbytes / 1e6:.1f} MB to s3://{bucket}/images in {time.perf_counter() - t:.1f}s", flush=True)
        ep = srv.endpoint(bucket)
        url, opts = ep.url("images"), ep.storage_options()
        results["dataset_bytes"] = nbytes
        scratch = tempfile.mkdtemp(prefix="bench-s3-")
        try:
            for workers in args.workers:
                best: dict[str, dict[str, float]] = {}
                for r in range(args.rounds):
                    engines = ["litdata", "streamscope"] + (["streamscope_obstore"] if args.obstore_main else [])
                    for engine in engines:
                        cache = os.path.join(scratch, f"{engine}-w{workers}-r{r}")
                        res = run_child(engine, workers, cache, url, opts)
                        shutil.rmtree(cache, ignore_errors=True)
                        if res["samples"] != IMAGES_N:
                            raise SystemExit(f"{engine} w={workers} yielded {res['samples']} samples, not {IMAGES_N}")
                        print(
                            f"  round {r} {engine:11s} w={workers}: {res['rate']:>8,.0f} samples/s, "
                            f"first batch {res['first_batch_s']:.2f}s, epoch {res['epoch_s']:.2f}s",
                            flush=True,
                        )
                        prev = best.get(engine)
                        if prev is None:
                            best[engine] = dict(res)
                        else:
                            if res["rate"] > prev["rate"]:
                                prev.update(rate=res["rate"], epoch_s=res["epoch_s"])
                            prev["first_batch_s"] = min(prev["first_batch_s"], res["first_batch_s"])
                case = {
                    "litdata": best["litdata"],
                    "streamscope": best["streamscope"],
                    "speedup": best["streamscope"]["rate"] / best["litdata"]["rate"],
                    "first_batch_ratio": best["streamscope"]["first_batch_s"] / best["litdata"]["first_batch_s"],
                }
                if "streamscope_obstore" in best:
                    case["streamscope_obstore"] = best["streamscope_obstore"]
                    case["speedup_obstore_main"] = best["streamscope_obstore"]["rate"] / best["litdata"]["rate"]
                    print(f"  streamscope backend=obstore: x{case['speedup_obstore_main']:.2f}", flush=True)
                results["cases"][f"s3_images_w{workers}"] = case
                print(
                    f"s3 images w={workers}: litdata {best['litdata']['rate']:>8,.0f} samples/s | streamscope "
                    f"{best['streamscope']['rate']:>8,.0f} samples/s | x{case['speedup']:.2f} (target >= 2) | "
                    f"first batch {best['litdata']['first_batch_s']:.2f}s vs {best['streamscope']['first_batch_s']:.2f}s "
                    f"= {case['first_batch_ratio']:.2f} (target <= 0.5)",
                    flush=True,
                )
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    bench.write(results, summary=summarize(results), out=args.out)


def summarize(results: dict[str, Any]) -> list[dict[str, Any]]:
    """The README's rows: samples/s and time to first batch of each engine per case, and the ratios."""
    rows = []
    for name, case in results["cases"].items():
        row: dict[str, Any] = {
            "case": name.replace("s3_images_", ""),
            "LitData samples/s": round(case["litdata"]["rate"]),
            "streamscope samples/s": round(case["streamscope"]["rate"]),
            "ratio": round(case["speedup"], 2),
            "first batch LitData s": round(case["litdata"]["first_batch_s"], 2),
            "first batch streamscope s": round(case["streamscope"]["first_batch_s"], 2),
            "first batch ratio": round(case["first_batch_ratio"], 2),
        }
        if "streamscope_obstore" in case:
            row["obstore in main: ratio"] = round(case["speedup_obstore_main"], 2)
        rows.append(row)
    return rows


if __name__ == "__main__":
    main()
