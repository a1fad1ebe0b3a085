"""StreamingRawDataset throughput, streamscope vs LitData, side by side in one run on the same files.

Setup: N files of about SIZE bytes (default 2,000 x 100 KB), a plain ``torch.utils.data.DataLoader`` with
batch 64 and an identity collate, num_workers 0 and 2 (fork), one full epoch per measurement, files/s.
Sources:

* ``s3``: a moto S3 server on 127.0.0.1 (``tests/support/s3server.py``), read directly;
* ``s3+20ms``: the same bucket through the fault proxy (``tests/support/faultproxy.py``) adding 20 ms to
  every request;
* ``local``: a local folder (page-cached).

Each measurement runs in a fresh process (neither engine inherits the other's clients or threads; LitData's
forked workers fail once its parent process has used obstore).

Both engines use their default arguments. The index is built once by streamscope and found by LitData in the
shared cache root (LitData lists S3 with s3fs, which is not installed). LitData's obstore client refuses plain
http; the benchmark patches ``litdata.streaming.downloader._OBSTORE_CLIENT_OPTIONS`` with ``allow_http`` (and
says so) - LitData only, in this process and its forked workers.

Usage: ``PYTHONPATH=src:. python benchmarks/bench_raw.py [--files 2000] [--size 100000] [--sources s3,s3+20ms]
[--workers 0,2] [--repeats 1] [--rounds 1]``. ``--rounds N`` runs each engine N times, alternating which goes
first; the row keeps the best rate of each engine and every round's ratio (the spread). Prints ratios
(streamscope / LitData) and writes ``benchmarks/results/bench_raw.json``.

Besides files/s and the client's CPU per file, each row records the CPU per file of the moto server process
and of the fault proxy (this process's threads), ``*_server_cores``: the cores moto kept busy at that rate,
and for the proxied source the requests and client connections per file the proxy saw (both engines must
make one GET per file). The server is moto's app behind cheroot (keep-alive, see
``tests/support/s3server.py``): about 1.5-2.7 ms CPU per 100 KB GET under one GIL, so moto alone allows
roughly 400-650 GETs/s, and with the proxy (~0.5 ms/file) and either client (0.5-1 ms/file) the whole rig
needs about 3 ms of CPU per file: on this 2-core machine that caps both engines near the same rate, lower
still when other work shares the cores. The ratio then measures client CPU per file and latency hiding,
within that shared ceiling (see ``load`` in the output).

Public API only (``streamscope.StreamingRawDataset``); the S3 server and the fault proxy are the test suite's rigs.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from _results import start
from torch.utils.data import DataLoader

import streamscope


def identity(batch: list[Any]) -> list[Any]:
    return batch


def make_files(n: int, size: int) -> list[tuple[str, bytes]]:
    out = []
    for i in range(n):
        head = f"{i:06d}".encode()
        body = os.urandom(64) * (size // 64)
        out.append((f"img/{i % 10}/f{i:06d}.bin", head + body[: size - len(head)]))
    return out


def epoch_files_per_s(dataset: Any, workers: int, batch: int) -> tuple[float, int]:
    loader = DataLoader(
        dataset,
        batch_size=batch,
        num_workers=workers,
        collate_fn=identity,
        multiprocessing_context="fork" if workers else None,
    )
    t0 = time.perf_counter()
    n = 0
    nbytes = 0
    for items in loader:
        n += len(items)
        nbytes += sum(len(x) for x in items)
    dt = time.perf_counter() - t0
    assert n == len(dataset), (n, len(dataset))
    return n / dt, nbytes


def patch_litdata_for_http() -> None:
    import litdata.streaming.downloader as dl

    dl._OBSTORE_CLIENT_OPTIONS = {**dl._OBSTORE_CLIENT_OPTIONS, "allow_http": True}  # type: ignore[assignment]
    print("NOTE: patched litdata.streaming.downloader._OBSTORE_CLIENT_OPTIONS with allow_http=True (LitData only)")


def measure(spec: dict[str, Any]) -> None:
    """Child mode: build one engine's dataset and time epochs; print one JSON line."""
    torch.set_num_threads(1)
    if spec["engine"] == "litdata":
        if spec["url"].startswith("s3://"):
            patch_litdata_for_http()
        from litdata.raw import StreamingRawDataset as Raw
    else:
        Raw = streamscope.StreamingRawDataset
    ds = Raw(spec["url"], cache_dir=spec["cache"], storage_options=spec["opts"])
    assert len(ds) == spec["files"], (len(ds), spec["files"])
    import resource

    def cpu() -> float:
        own = resource.getrusage(resource.RUSAGE_SELF)
        kids = resource.getrusage(resource.RUSAGE_CHILDREN)  # DataLoader workers, once joined
        return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime

    rates = []
    c0 = cpu()
    for _ in range(spec["repeats"]):
        rates.append(epoch_files_per_s(ds, spec["workers"], spec["batch"])[0])
    cpu_ms_per_file = 1000.0 * (cpu() - c0) / (spec["files"] * spec["repeats"])
    print("RESULT " + json.dumps({"rates": rates, "cpu_ms_per_file": cpu_ms_per_file}), flush=True)


def proc_cpu_s(pid: int) -> float:
    """CPU seconds (user + system) used so far by process ``pid`` (Linux ``/proc``)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_child(spec: dict[str, Any], server_pid: int | None = None, proxy: Any = None) -> dict[str, Any]:
    """Measure in a fresh process, so neither engine inherits state (obstore, threads) from the other.

    Also records the CPU the S3 server process (``server_pid``) and this process (the fault proxy's threads
    live here; nothing else runs here meanwhile) spent during the measurement, per file.
    """
    env = dict(os.environ)
    c0 = dict(proxy.counts) if proxy is not None else {}
    s0 = proc_cpu_s(server_pid) if server_pid else 0.0
    p0 = time.process_time()
    out = subprocess.run(
        [sys.executable, __file__, "--measure", json.dumps(spec)], capture_output=True, text=True, env=env, timeout=900
    )
    files = spec["files"] * spec["repeats"]
    for line in out.stdout.splitlines():
        if line.startswith("RESULT "):
            got = json.loads(line[len("RESULT ") :])
            got["proxy_cpu_ms_per_file"] = 1000.0 * (time.process_time() - p0) / files
            if server_pid:
                got["server_cpu_ms_per_file"] = 1000.0 * (proc_cpu_s(server_pid) - s0) / files
            if proxy is not None:
                for key in ("requests", "connections"):
                    got[f"proxy_{key}_per_file"] = (proxy.counts[key] - c0.get(key, 0)) / files
            return got
        if line.startswith("NOTE"):
            print(line)
    raise RuntimeError(f"measurement failed for {spec['engine']}: {out.stderr[-2000:]}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--measure", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--files", type=int, default=2000)
    ap.add_argument("--size", type=int, default=100_000)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--workers", default="0,2")
    ap.add_argument("--sources", default="s3,s3+20ms")
    ap.add_argument("--repeats", type=int, default=1, help="epochs per measurement process (median)")
    ap.add_argument("--rounds", type=int, default=1, help="measurement processes per engine, alternating (best)")
    ap.add_argument("--out", default=None, help="write the result here instead of results/bench_raw.json")
    args = ap.parse_args()
    if args.measure:
        measure(json.loads(args.measure))
        return
    bench = start("bench_raw", args)
    workers = [int(w) for w in args.workers.split(",")]
    sources = args.sources.split(",")
    torch.set_num_threads(1)

    tmp = tempfile.mkdtemp(prefix="bench_raw_")
    files = make_files(args.files, args.size)
    results: list[dict[str, Any]] = []
    cleanup: list[Any] = []
    try:
        endpoints: dict[str, tuple[str, dict[str, Any]]] = {}
        server_pid: int | None = None
        proxy: Any = None
        if "local" in sources:
            root = Path(tmp) / "local"
            for rel, data in files:
                (root / rel).parent.mkdir(parents=True, exist_ok=True)
                (root / rel).write_bytes(data)
            endpoints["local"] = (str(root), {})
        if any(s.startswith("s3") for s in sources):
            from tests.support.faultproxy import FaultProxy
            from tests.support.s3server import S3Server

            srv = S3Server(https=False).start()
            cleanup.append(srv.stop)
            assert srv.proc is not None
            server_pid = srv.proc.pid
            ep = srv.endpoint(srv.new_bucket("bench"))
            client = ep.boto3_client()
            for rel, data in files:
                client.put_object(Bucket=ep.bucket, Key=f"raw/{rel}", Body=data)
            opts = {
                "endpoint_url": ep.endpoint_url,
                "aws_access_key_id": ep.access_key,
                "aws_secret_access_key": ep.secret_key,
                "region_name": ep.region,
            }
            endpoints["s3"] = (ep.url("raw"), opts)
            if "s3+20ms" in sources:
                proxy = FaultProxy(ep.endpoint_url, seed=1, fixed_delay_s=0.020)
                cleanup.append(proxy.close)
                endpoints["s3+20ms"] = (ep.url("raw"), {**opts, "endpoint_url": proxy.url})

        for src in sources:
            url, opts = endpoints[src]
            cache = os.path.join(tmp, f"cache-{src}")
            # streamscope builds the index; LitData finds it in the shared cache root (no s3fs needed)
            assert len(streamscope.StreamingRawDataset(url, cache_dir=cache, storage_options=opts)) == args.files
            for w in workers:
                row: dict[str, Any] = {"source": src, "workers": w, "batch": args.batch}
                runs: dict[str, list[dict[str, Any]]] = {"litdata": [], "streamscope": []}
                for rnd in range(args.rounds):
                    order = ("litdata", "streamscope") if rnd % 2 == 0 else ("streamscope", "litdata")
                    for name in order:
                        spec = {"engine": name, "url": url, "opts": opts, "cache": cache, "files": args.files}
                        spec.update(workers=w, batch=args.batch, repeats=args.repeats)
                        runs[name].append(
                            run_child(
                                spec,
                                server_pid if src.startswith("s3") else None,
                                proxy if src == "s3+20ms" else None,
                            )
                        )
                for name, got in runs.items():
                    rates = [statistics.median(g["rates"]) for g in got]
                    row[name] = max(rates)
                    row[f"{name}_rounds"] = rates
                    for key in (
                        "cpu_ms_per_file",
                        "server_cpu_ms_per_file",
                        "proxy_cpu_ms_per_file",
                        "proxy_requests_per_file",
                        "proxy_connections_per_file",
                    ):
                        if key in got[0]:
                            row[f"{name}_{key}"] = statistics.median(g[key] for g in got)
                row["ratio"] = row["streamscope"] / row["litdata"]
                for name in runs:
                    # cores the S3 server (and the proxy) kept busy at the best round's rate: moto serves with
                    # one GIL, so a server near 1.0 core is the ceiling of both engines, not the client
                    if f"{name}_server_cpu_ms_per_file" in row:
                        row[f"{name}_server_cores"] = row[f"{name}_server_cpu_ms_per_file"] * row[name] / 1000.0
                        row[f"{name}_proxy_cores"] = row[f"{name}_proxy_cpu_ms_per_file"] * row[name] / 1000.0
                row["ratio_rounds"] = [s / li for s, li in zip(row["streamscope_rounds"], row["litdata_rounds"])]
                results.append(row)
                srv_cpu = ""
                if "streamscope_server_cpu_ms_per_file" in row:
                    srv_cpu = (
                        f"   server CPU ms/file {row['litdata_server_cpu_ms_per_file']:.2f} / "
                        f"{row['streamscope_server_cpu_ms_per_file']:.2f}   proxy "
                        f"{row['litdata_proxy_cpu_ms_per_file']:.2f} / {row['streamscope_proxy_cpu_ms_per_file']:.2f}"
                        f"   server cores {row['litdata_server_cores']:.2f} / {row['streamscope_server_cores']:.2f}"
                    )
                print(
                    f"{src:8s} workers={w}  litdata {row['litdata']:8.0f} files/s   streamscope "
                    f"{row['streamscope']:8.0f} files/s   ratio {row['ratio']:.2f} (rounds "
                    + ", ".join(f"{r:.2f}" for r in row["ratio_rounds"])
                    + f", load {os.getloadavg()[0]:.1f})   client CPU ms/file litdata "
                    f"{row['litdata_cpu_ms_per_file']:.2f} streamscope {row['streamscope_cpu_ms_per_file']:.2f}"
                    + srv_cpu,
                    flush=True,
                )
    finally:
        for fn in reversed(cleanup):
            fn()
        shutil.rmtree(tmp, ignore_errors=True)
    result = {"files": args.files, "size": args.size, "batch": args.batch, "rounds": args.rounds, "results": results}
    bench.write(result, summary=summarize(result), out=args.out)


def summarize(result: dict[str, Any]) -> list[dict[str, Any]]:
    """The README's rows: files/s of each engine per source and worker count, the ratio and its rounds."""
    return [
        {
            "case": f"{row['source']} w={row['workers']}",
            "LitData files/s": round(row["litdata"]),
            "streamscope files/s": round(row["streamscope"]),
            "ratio": round(row["ratio"], 2),
            "ratio per round": ", ".join(f"{r:.2f}" for r in row["ratio_rounds"]),
            "client CPU ms/file L / s": f"{row['litdata_cpu_ms_per_file']:.2f} / {row['streamscope_cpu_ms_per_file']:.2f}",
        }
        for row in result["results"]
    ]


if __name__ == "__main__":
    main()
