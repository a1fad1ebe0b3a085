"""Auto-tuning benchmark (issue #24): LitData defaults, streamscope untuned, the best static configuration of a
grid, and streamscope tuned, side by side in one run, over four kinds of storage.

A training loop with a fixed cost per step (``--step-ms``, a sleep standing for the GPU; batch ``--batch``) reads
the 20,000-image set of ``_datasets.py`` in 1 MB chunks (~250 chunks, ``images_1mb``) for ``--duration`` seconds,
whole epochs one after another, in each of these scenarios:

* ``local``: local files, a decode-heavy transform (``--decode-ms`` of CPU per sample, in the DataLoader workers);
* ``s3-<N>ms`` (``--delays``, default 20 and 100): S3 (moto) through the fault proxy adding N ms to every request;
* ``s3-bw``: S3 through the proxy with its bandwidth capped at ``--bw-mbps`` MB/s (one link for all connections);
* ``ddp``: two ranks (torch.distributed, gloo, two real processes), each step all-reduces a flag (the gradient
  sync), rank 0 reads through a proxy adding ``--ddp-delays[0]`` ms, rank 1 through one adding ``--ddp-delays[1]``
  ms: the straggler, which holds the other rank back;
* ``raw-s3-<N>ms`` (``--raw-delays``, default 20): raw files (``--raw-files`` files of ``--raw-file-kb`` KB, no
  optimize step) on S3 through the proxy adding N ms per request, read by ``StreamingRawDataset`` (LitData's
  through torch's ``DataLoader``, streamscope's through ``StreamingDataLoader``), batch ``--raw-batch``. Its grid
  is the raw knobs: look-ahead ``max_prefetch`` (``--grid-prefetch``) x ``STREAMSCOPE_RAW_CONCURRENCY``
  (``--grid-concurrency``, every pair) x workers. No chunk cache: the cache budget does not apply.

Arms, each in its own process (forked from a zygote that imported torch once, see ``_autotune_procs.py``):

* ``litdata``: LitData with its defaults (``--litdata``: the unpacked LitData put first on the path, default
  0.2.76 from ``STREAMSCOPE_LITDATA076_DIR`` or ``/work/litdata-0.2.76``; its version is in the result), for each
  ``--workers`` value;
* ``untuned``: streamscope with its defaults, for each ``--workers`` value;
* ``grid``: streamscope with ``max_pre_download`` x ``STREAMSCOPE_DOWNLOAD_CONCURRENCY`` x ``num_workers`` over
  ``--grid-prefetch`` x ``--grid-concurrency`` (pairs with concurrency <= prefetch: downloads run within the
  prefetch depth) x ``--grid-workers``; on local data nothing is downloaded, so its grid is ``--local-grid-workers``
  alone. Printed as a table; its best is the "best static configuration";
* ``tuned``: streamscope with ``StreamingDataLoader(..., autotune=True)`` for ``--tuned-duration`` seconds, for
  each ``--workers`` value; reports "not available" while the loader takes no ``autotune`` argument.

Every arm gets the same ``max_cache_size`` (``--cache-budget``, below the dataset's 247 MB so chunks are evicted and
fetched again each epoch; LitData too, as part of the workload) and a fresh cache directory per rank. Measured per
arm: samples/s after ``--warmup`` seconds (from the first batch after it to the last batch), the loop's wait for data per batch (time in ``next()``; streamscope's
``streamscope.loader.wait`` from ``metrics_view()`` alongside, over the whole run), time to first batch, a
per-second throughput trace and from it the time until throughput first came within 5 % of its final value
(mean of the last 30 % of the run; 3-second windows), peak RSS of each rank's process tree (psutil, 10 Hz, workers
included; an upper bound, shared pages count in every process) and peak bytes in each rank's cache directory
(sampled with it), against ``--rss-budget`` and ``--cache-budget``; an arm killed by a signal or raising
MemoryError counts as OOM.

Run: ``PYTHONPATH=$PWD/src:$PWD python benchmarks/bench_autotune.py`` (all scenarios; ``--scenarios``,
``--duration`` and the grid options make it smaller). Writes ``benchmarks/results/bench_autotune.json``
(``--out``) after every scenario and regenerates the table in ``benchmarks/README.md`` at the end
(``--render [JSON]`` does only that). ``--merge`` keeps the scenarios already in ``--out`` that this run does not
measure; each scenario it writes then carries its own run description (``run``: when, commit, arguments, load).
"""

from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import json
import os
import platform
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from typing import Any

_HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(_HERE)
sys.path.insert(0, _HERE)
sys.path.insert(0, ROOT)  # tests.support: the S3 server and the fault proxy

import _autotune_report as report  # noqa: E402
from _autotune_procs import Sampler, Zygote  # noqa: E402
from _datasets import IMAGES_N, ensure  # noqa: E402

RESULTS = os.path.join(_HERE, "results")
README = os.path.join(_HERE, "README.md")
DEFAULT_OUT = os.path.join(RESULTS, "bench_autotune.json")

#: Variables that would change an arm's configuration behind its back: never passed on to the arms.
_SCRUB = (
    "PYTHONPATH",
    "MAX_CACHE_SIZE",
    "STREAMSCOPE_MAX_CACHE_SIZE",
    "STREAMSCOPE_PREFETCH_DEPTH",
    "STREAMSCOPE_DOWNLOAD_CONCURRENCY",
    "STREAMSCOPE_RAW_PREFETCH",
    "STREAMSCOPE_RAW_CONCURRENCY",
    "STREAMSCOPE_AUTOTUNE",
    "STREAMSCOPE_TRACE_LEVEL",
    "STREAMSCOPE_METRICS_LEVEL",
    "STREAMSCOPE_METRICS_DIR",
)


@dataclass
class Plan:
    """One arm of a scenario."""

    name: str
    arm: str  # litdata | untuned | grid | tuned
    engine: str  # litdata | streamscope
    workers: int
    prefetch: int | None = None
    concurrency: int | None = None
    autotune: bool = False
    duration: float = 0.0
    env: dict[str, str] = field(default_factory=dict)


def parse_bytes(text: str) -> int:
    """``100MB`` -> 100,000,000 (decimal units, as both engines read them), ``4GB``, or plain bytes."""
    m = re.fullmatch(r"\s*([\d.]+)\s*([kKmMgG]?)B?\s*", text)
    if not m:
        raise argparse.ArgumentTypeError(f"not a byte size: {text!r} (e.g. 100MB, 4GB)")
    return int(float(m.group(1)) * {"": 1, "k": 1e3, "m": 1e6, "g": 1e9}[m.group(2).lower()])


def litdata_version(path: str) -> str:
    """The version of the LitData an arm imports: ``path``'s ``__about__.py``, or the installed one."""
    if path:
        about = os.path.join(path, "litdata", "__about__.py")
        with open(about) as f:
            m = re.search(r"__version__\s*=\s*[\"']([^\"']+)", f.read())
        if not m:
            raise SystemExit(f"no __version__ in {about}")
        return f"{m.group(1)} ({path})"
    return importlib.metadata.version("litdata") + " (installed)"


def git(*args: str) -> str:
    return subprocess.run(["git", "-C", ROOT, *args], capture_output=True, text=True).stdout.strip()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def upload(local_dir: str, srv: Any, bucket: str, prefix: str) -> int:
    """Every file of ``local_dir`` to ``s3://bucket/prefix/``; bytes uploaded."""
    client = srv.endpoint(bucket).boto3_client()
    total = 0
    for name in sorted(os.listdir(local_dir)):
        path = os.path.join(local_dir, name)
        if os.path.isfile(path):
            with open(path, "rb") as f:
                client.put_object(Bucket=bucket, Key=f"{prefix}/{name}", Body=f.read())
            total += os.path.getsize(path)
    return total


def plans_for(sc: dict[str, Any], args: argparse.Namespace) -> list[Plan]:
    """The arms of scenario ``sc``: per workers value LitData then untuned, the grid, then the tuned arms."""
    metrics = {} if args.no_metrics else {"STREAMSCOPE_METRICS_LEVEL": "chunk"}
    plans: list[Plan] = []
    for w in args.workers:
        plans.append(Plan(f"litdata-w{w}", "litdata", "litdata", w, duration=args.duration))
        plans.append(Plan(f"untuned-w{w}", "untuned", "streamscope", w, duration=args.duration, env=dict(metrics)))
    if sc["kind"] == "raw":
        for w in args.grid_workers:
            for p in args.grid_prefetch:
                for c in args.grid_concurrency:  # a batch's own GETs do not wait for the look-ahead: every pair
                    env = {**metrics, "STREAMSCOPE_RAW_CONCURRENCY": str(c)}
                    plans.append(
                        Plan(f"grid-p{p}-c{c}-w{w}", "grid", "streamscope", w, p, c, duration=args.duration, env=env)
                    )
    elif sc["kind"] == "local":
        for w in args.local_grid_workers:
            plans.append(Plan(f"grid-w{w}", "grid", "streamscope", w, duration=args.duration, env=dict(metrics)))
    else:
        for w in args.grid_workers:
            for p in args.grid_prefetch:
                for c in args.grid_concurrency:
                    if c > p:
                        continue
                    env = {**metrics, "STREAMSCOPE_DOWNLOAD_CONCURRENCY": str(c)}
                    plans.append(
                        Plan(f"grid-p{p}-c{c}-w{w}", "grid", "streamscope", w, p, c, duration=args.duration, env=env)
                    )
    if not args.no_tuned:
        for w in args.workers:
            plans.append(
                Plan(
                    f"tuned-w{w}",
                    "tuned",
                    "streamscope",
                    w,
                    autotune=True,
                    duration=args.tuned_duration,
                    env=dict(metrics),
                )
            )
    return plans


class Harness:
    """Runs the arms of the scenarios (the S3 server, proxies and zygote live as long as it does)."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.scratch = tempfile.mkdtemp(prefix="bench-autotune-")
        env = {k: v for k, v in os.environ.items() if k not in _SCRUB}
        env["LITDATA_DISABLE_VERSION_CHECK"] = "1"
        self.zygote = Zygote(env=env)
        self.srv: Any = None
        self.bucket = ""
        self.raw_url = ""
        self.raw_listing: list[list[Any]] = []  # [url, bytes] of each raw file (LitData's arm takes its index)
        self.proxies: list[Any] = []

    def close(self) -> None:
        self.zygote.close()
        for p in self.proxies:
            p.close()
        if self.srv is not None:
            self.srv.stop()
        shutil.rmtree(self.scratch, ignore_errors=True)

    def s3(self, data: str, images: bool = True) -> None:
        """Start the moto server and upload the dataset (once; ``images=False``: the server and bucket only)."""
        if self.srv is not None:
            return
        from tests.support.s3server import S3Server

        self.srv = S3Server().start()
        self.bucket = self.srv.new_bucket("autotune")
        if not images:
            return
        t = time.perf_counter()
        n = upload(data, self.srv, self.bucket, "images")
        print(f"uploaded {n / 1e6:.0f} MB to s3://{self.bucket}/images in {time.perf_counter() - t:.1f} s", flush=True)

    def raw_files(self) -> str:
        """Upload the raw-file set (once): ``--raw-files`` files of ``--raw-file-kb`` KB of seeded random bytes."""
        if self.raw_url:
            return self.raw_url
        import numpy as np

        client = self.srv.endpoint(self.bucket).boto3_client()
        a, t = self.args, time.perf_counter()
        size = int(a.raw_file_kb * 1000)
        for i in range(a.raw_files):
            body = np.random.default_rng(i).integers(0, 256, size, dtype=np.uint8).tobytes()
            client.put_object(Bucket=self.bucket, Key=f"rawfiles/f{i:06d}.bin", Body=body)
        self.raw_url = f"s3://{self.bucket}/rawfiles"
        self.raw_listing = [[f"{self.raw_url}/f{i:06d}.bin", size] for i in range(a.raw_files)]
        print(
            f"uploaded {a.raw_files} raw files of {size / 1e3:g} KB to {self.raw_url} in {time.perf_counter() - t:.1f} s",
            flush=True,
        )
        return self.raw_url

    def proxy(self, delay_ms: float = 0.0, bw_mbps: float | None = None) -> dict[str, Any]:
        """A fault proxy in front of the server; the storage options that reach the bucket through it."""
        from tests.support.faultproxy import FaultProxy

        p = FaultProxy(
            self.srv.endpoint_url,
            fixed_delay_s=delay_ms / 1000.0,
            bandwidth_bps=bw_mbps * 1e6 if bw_mbps else None,
        )
        self.proxies.append(p)
        return self.srv.endpoint(self.bucket, endpoint_url=p.url).storage_options()

    def sys_path(self, engine: str) -> list[str]:
        if engine == "litdata":
            return [self.args.litdata] if self.args.litdata else []
        return [os.path.join(ROOT, "src")]

    def run_arm(self, sc: dict[str, Any], plan: Plan) -> dict[str, Any]:
        a = self.args
        ranks = len(sc["inputs"])
        port = free_port() if ranks > 1 else 0
        pids: dict[str, int] = {}
        caches: dict[str, str] = {}
        outs: dict[str, str] = {}
        logs: dict[str, str] = {}
        for r in range(ranks):
            label = f"rank{r}"
            base = os.path.join(self.scratch, f"{sc['name']}-{plan.name}-r{r}")
            caches[label], outs[label], logs[label] = base + "-cache", base + ".json", base + ".log"
            os.makedirs(caches[label])
            spec = {
                "engine": plan.engine,
                "input": sc["inputs"][r],
                "storage_options": sc["options"][r],
                "cache_dir": caches[label],
                "max_cache_size": a.cache_budget,
                "workers": plan.workers,
                "batch_size": a.raw_batch if sc["kind"] == "raw" else a.batch,
                "raw": sc["kind"] == "raw",
                "raw_listing": self.raw_listing if sc["kind"] == "raw" and plan.engine == "litdata" else None,
                "step_s": a.step_ms / 1000.0,
                "duration_s": plan.duration,
                "warmup_s": a.warmup,
                "transform": sc.get("transform"),
                "decode_cpu_s": a.decode_ms / 1000.0,
                "prefetch": plan.prefetch,
                "autotune": plan.autotune,
                "dist": {"rank": r, "world": ranks, "port": port} if ranks > 1 else None,
            }
            pids[label] = self.zygote.fork(spec, plan.env, self.sys_path(plan.engine), outs[label], logs[label])
        sampler = Sampler(pids, caches, hz=a.sample_hz).start()
        codes = self.zygote.wait(list(pids.values()), timeout=plan.duration + a.arm_timeout)
        sampler.stop()
        rank_results = []
        oom = False
        for label, pid in pids.items():
            code = codes[pid]
            log = open(logs[label]).read() if os.path.exists(logs[label]) else ""
            if os.path.exists(outs[label]):
                res = json.load(open(outs[label]))
            else:
                res = {"status": "error", "error": f"exit code {code}, no result; log tail: {log[-1500:]}"}
            oom = oom or code == -9 or "MemoryError" in log
            if res.get("status") == "error":
                res["log_tail"] = log[-3000:]
            rank_results.append(res)
        for d in caches.values():
            shutil.rmtree(d, ignore_errors=True)
        arm: dict[str, Any] = {**asdict(plan)}
        arm.pop("env")
        arm["env"] = plan.env
        arm.update(report.combine_ranks(rank_results))
        arm["exit_codes"] = [codes[p] for p in pids.values()]
        arm["oom"] = oom
        arm["peak_rss_bytes"] = max(sampler.peak_rss.values())
        arm["peak_rss_bytes_ranks"] = [sampler.peak_rss[k] for k in pids]
        arm["peak_rss_total_bytes"] = sampler.peak_rss_total
        arm["peak_cache_bytes"] = max(sampler.peak_cache.values())
        arm["rss_within_budget"] = arm["peak_rss_bytes"] <= a.rss_budget
        arm["cache_within_budget"] = arm["peak_cache_bytes"] <= a.cache_budget
        arm["rss_per_second"] = sampler.rss_per_second
        arm["cache_per_second"] = sampler.cache_per_second
        arm["sampler_samples"] = sampler.samples
        arm["ranks"] = [{k: v for k, v in r.items() if not k.startswith("per_second")} for r in rank_results]
        return arm

    def scenario(self, sc: dict[str, Any]) -> dict[str, Any]:
        plans = plans_for(sc, self.args)
        print(f"\n== {sc['name']}: {sc['desc']} ({len(plans)} arms)", flush=True)
        t0, load0 = time.perf_counter(), os.getloadavg()
        arms = []
        for plan in plans:
            ta = time.perf_counter()
            arm = self.run_arm(sc, plan)
            arm["wall_s"] = time.perf_counter() - ta
            arms.append(arm)
            print("  " + arm_line(arm), flush=True)
        out = {
            "desc": sc["desc"],
            "kind": sc["kind"],
            "latency_bound": sc["latency_bound"],
            "grid_desc": sc["grid_desc"],
            "ranks": len(sc["inputs"]),
            "load_before": load0,
            "load_after": os.getloadavg(),
            "arms": arms,
        }
        out["evaluation"] = report.evaluate(out)
        out["wall_s"] = time.perf_counter() - t0
        gt = report.grid_table(out)
        if gt:
            print(f"  grid ({sc['grid_desc']}):\n" + "\n".join("    " + ln for ln in gt.splitlines()), flush=True)
        print("\n".join("    " + ln for ln in report.scenario_table(out).splitlines()), flush=True)
        print(f"  {sc['name']}: {out['wall_s']:.0f} s", flush=True)
        return out


def arm_line(a: dict[str, Any]) -> str:
    if a.get("status") != "ok":
        why = a.get("reason") or a.get("error") or ""
        return f"{a['name']:22s} {a.get('status')}: {why[:300]}"
    return (
        f"{a['name']:22s} {a['rate']:>8,.0f} samples/s  wait {a['wait_per_batch_s'] * 1e3:6.1f} ms/batch  first batch "
        f"{a['first_batch_s']:.2f} s  within 5% at {a['t_within_5pct_s']} s  RSS {a['peak_rss_bytes'] / 1e6:,.0f} MB  "
        f"cache {a['peak_cache_bytes'] / 1e6:,.0f} MB  ({a['wall_s']:.0f} s)"
    )


def scenarios(args: argparse.Namespace, h: Harness, data: str) -> list[dict[str, Any]]:
    """The selected scenarios with their inputs (one per rank)."""
    url = f"s3://{h.bucket}/images" if h.bucket else ""
    grid_s3 = (
        f"prefetch {args.grid_prefetch} x concurrency {args.grid_concurrency} (concurrency <= prefetch) x "
        f"workers {args.grid_workers}"
    )
    out = []
    for name in args.scenarios:
        if name == "local":
            out.append(
                {
                    "name": name,
                    "kind": "local",
                    "desc": f"local files, decode-heavy transform ({args.decode_ms:g} ms CPU per sample)",
                    "inputs": [data],
                    "options": [None],
                    "transform": "decode",
                    "latency_bound": False,
                    "grid_desc": f"workers {args.local_grid_workers}; nothing is downloaded, so prefetch and "
                    "concurrency do not apply",
                }
            )
        elif name.startswith("s3-") and name.endswith("ms"):
            d = float(name[3:-2])
            out.append(
                {
                    "name": name,
                    "kind": "s3",
                    "desc": f"S3 (moto) through the fault proxy adding {d:g} ms per request",
                    "inputs": [url],
                    "options": [h.proxy(delay_ms=d)],
                    "latency_bound": True,
                    "grid_desc": grid_s3,
                }
            )
        elif name == "s3-bw":
            out.append(
                {
                    "name": name,
                    "kind": "s3",
                    "desc": f"S3 through the proxy capped at {args.bw_mbps:g} MB/s (one link for all connections)",
                    "inputs": [url],
                    "options": [h.proxy(bw_mbps=args.bw_mbps)],
                    "latency_bound": False,
                    "grid_desc": grid_s3,
                }
            )
        elif name == "ddp":
            d0, d1 = args.ddp_delays
            out.append(
                {
                    "name": name,
                    "kind": "s3",
                    "desc": f"2 ranks (gloo), rank 0 through a proxy adding {d0:g} ms, rank 1 (the straggler) "
                    f"{d1:g} ms per request; global samples/s, the straggler's wait",
                    "inputs": [url, url],
                    "options": [h.proxy(delay_ms=d0), h.proxy(delay_ms=d1)],
                    "latency_bound": True,
                    "grid_desc": grid_s3 + ", the same on both ranks",
                }
            )
        elif name.startswith("raw-s3-") and name.endswith("ms"):
            d = float(name[7:-2])
            out.append(
                {
                    "name": name,
                    "kind": "raw",
                    "desc": f"raw files ({args.raw_files} x {args.raw_file_kb:g} KB, batch {args.raw_batch}) on S3 "
                    f"(moto) through the fault proxy adding {d:g} ms per request",
                    "inputs": [h.raw_files()],
                    "options": [h.proxy(delay_ms=d)],
                    "latency_bound": True,
                    "grid_desc": f"look-ahead max_prefetch {args.grid_prefetch} x STREAMSCOPE_RAW_CONCURRENCY "
                    f"{args.grid_concurrency} x workers {args.grid_workers}",
                }
            )
        else:
            raise SystemExit(f"unknown scenario {name!r} (local, s3-<N>ms, s3-bw, ddp, raw-s3-<N>ms)")
    return out


def render(path: str) -> None:
    with open(path) as f:
        result = json.load(f)
    with open(README) as f:
        text = f.read()
    with open(README, "w") as f:
        f.write(report.update_readme(text, report.render_markdown(result)))
    print("table written to", README)


def main(argv: list[str] | None = None) -> dict[str, Any] | None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scenarios", nargs="+", default=None, help="local s3-<N>ms s3-bw ddp (default: all)")
    ap.add_argument("--delays", type=float, nargs="+", default=[20, 100], help="ms per request of the s3 scenarios")
    ap.add_argument("--bw-mbps", type=float, default=50.0)
    ap.add_argument("--ddp-delays", type=float, nargs=2, default=[20, 100])
    ap.add_argument("--raw-delays", type=float, nargs="+", default=[20], help="ms per request of the raw scenarios")
    ap.add_argument("--raw-files", type=int, default=2000)
    ap.add_argument("--raw-file-kb", type=float, default=16.0)
    ap.add_argument("--raw-batch", type=int, default=64)
    ap.add_argument("--workers", type=int, nargs="+", default=[0, 2], help="num_workers of LitData/untuned/tuned")
    ap.add_argument("--grid-prefetch", type=int, nargs="+", default=[2, 8, 32])
    ap.add_argument("--grid-concurrency", type=int, nargs="+", default=[2, 8, 16])
    ap.add_argument("--grid-workers", type=int, nargs="+", default=[0, 2])
    ap.add_argument("--local-grid-workers", type=int, nargs="+", default=[0, 1, 2, 3])
    ap.add_argument("--duration", type=float, default=15.0, help="seconds per arm (from the loader's construction)")
    ap.add_argument("--warmup", type=float, default=4.0, help="seconds before throughput is counted")
    ap.add_argument("--tuned-duration", type=float, default=70.0)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--step-ms", type=float, default=5.0)
    ap.add_argument("--decode-ms", type=float, default=0.3, help="CPU per sample of the local scenario's transform")
    ap.add_argument("--cache-budget", type=parse_bytes, default=parse_bytes("100MB"))
    ap.add_argument("--rss-budget", type=parse_bytes, default=parse_bytes("4GB"))
    ap.add_argument("--sample-hz", type=float, default=10.0)
    ap.add_argument(
        "--arm-timeout", type=float, default=180.0, help="seconds past its duration before an arm is killed"
    )
    ap.add_argument(
        "--litdata",
        default=os.environ.get("STREAMSCOPE_LITDATA076_DIR", "/work/litdata-0.2.76"),
        help="unpacked LitData put first on the LitData arms' path ('' for the installed one)",
    )
    ap.add_argument("--no-tuned", action="store_true")
    ap.add_argument("--no-metrics", action="store_true", help="streamscope arms without metrics (no loader.wait)")
    ap.add_argument("--data", default=None, help="dataset directory (default: _datasets.py images_1mb)")
    ap.add_argument("--out", default=DEFAULT_OUT)
    ap.add_argument("--no-readme", action="store_true")
    ap.add_argument("--merge", action="store_true", help="keep the scenarios of --out this run does not measure")
    ap.add_argument("--render", nargs="?", const=DEFAULT_OUT, default=None, help="only regenerate the README table")
    args = ap.parse_args(argv)
    if args.render:
        render(args.render)
        return None
    if args.litdata and not os.path.isdir(os.path.join(args.litdata, "litdata")):
        raise SystemExit(f"--litdata {args.litdata}: no litdata package there ('' uses the installed LitData)")
    if args.scenarios is None:
        args.scenarios = [
            "local",
            *[f"s3-{d:g}ms" for d in args.delays],
            "s3-bw",
            "ddp",
            *[f"raw-s3-{d:g}ms" for d in args.raw_delays],
        ]
    if args.warmup >= args.duration:
        raise SystemExit("--warmup must be shorter than --duration")

    images = any(not n.startswith("raw-") for n in args.scenarios)
    data = args.data or (ensure("images_1mb") if images else "")
    started = time.perf_counter()
    meta: dict[str, Any] = {
        "started": datetime.datetime.now().isoformat(timespec="seconds"),
        "commit": git("rev-parse", "HEAD"),
        "dirty": bool(git("status", "--porcelain")),
        "cpus": os.cpu_count(),
        "machine": platform.machine(),
        "memory_bytes": __import__("psutil").virtual_memory().total,
        "load_before": os.getloadavg(),
        "python": platform.python_version(),
        "torch": importlib.metadata.version("torch"),
        "litdata": litdata_version(args.litdata),
        "argv": " ".join(sys.argv[1:] if argv is None else argv),
        "args": vars(args),
        "data": data,
        "samples": IMAGES_N,
    }
    print(
        f"commit {meta['commit'][:10]}{' (dirty)' if meta['dirty'] else ''}, {meta['cpus']} cores, load "
        f"{meta['load_before'][0]:.1f}, LitData {meta['litdata']}, torch {meta['torch']}",
        flush=True,
    )
    result: dict[str, Any] = {"benchmark": "bench_autotune", "meta": meta, "scenarios": {}}
    if args.merge and os.path.exists(args.out):
        with open(args.out) as f:
            result = json.load(f)  # the earlier run's description stays on top; this run's goes with its scenarios
        result.setdefault("scenarios", {})
    h = Harness(args)
    try:
        meta["zygote_imports_s"] = h.zygote.imports_s
        if any(n != "local" for n in args.scenarios):
            h.s3(data, images=any(not n.startswith(("local", "raw-")) for n in args.scenarios))
        for sc in scenarios(args, h, data):
            out = h.scenario(sc)
            if args.merge:
                out["run"] = {k: meta[k] for k in ("started", "commit", "dirty", "cpus", "litdata", "argv")}
                out["run"]["args"] = {
                    k: v for k, v in vars(args).items() if k in ("duration", "warmup", "tuned_duration", "step_ms")
                }
            result["scenarios"][sc["name"]] = out
            meta["load_after"] = os.getloadavg()
            meta["wall_s"] = time.perf_counter() - started
            os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
            with open(args.out, "w") as f:
                json.dump(result, f, indent=1)
    finally:
        h.close()
    print(f"\nwrote {args.out} ({time.perf_counter() - started:.0f} s)", flush=True)
    if not args.no_readme:
        render(args.out)
    return result


if __name__ == "__main__":
    main()
