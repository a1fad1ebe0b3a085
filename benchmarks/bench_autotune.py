"""Auto-tuning benchmark (issue 32): does ``StreamingDataLoader(..., autotune=True)`` make a training loop faster
than the defaults, and how close does it come to the best static configuration? Paired rounds, one protocol.

**Workload.** A training loop with a fixed step (``--step-ms``, a sleep standing for the GPU; batch ``--batch``)
reads the 20,000-image set of ``_datasets.py`` in 1 MB chunks (``images_1mb``, ~250 chunks), whole epochs one after
another, for ``--window`` seconds from the loader's construction. The metric is the loop's throughput over that
window (samples/s: start-up, first batch and any tuning count, alike for every arm), and for every arm the time
until throughput first came within 5 % of its final value. Every arm gets the same window, the same epochs (a
fresh ``iter`` over the whole dataset), the same ``max_cache_size`` (``--cache-budget``, below the dataset's 247 MB:
chunks are evicted and fetched again each epoch) and a fresh cache directory.

**Storage.** Remote scenarios read from ``_latency_store.py``: an S3 server on loopback, objects in memory, whose
own cost per request is far below the latency it injects (moto spends more CPU per request than a 2-core machine
can give a latency-bound loop; it stays for the correctness tests). Scenarios (``--scenarios``):

* ``local``: local files, a decode-heavy transform (``--decode-ms`` of CPU per sample, in the DataLoader workers);
* ``s3-<N>ms`` (default 20, 50, 100): S3 with N ms per request (``--jitter-ms``: plus log-normal jitter);
* ``s3-bw``: S3 at ``--bw-latency-ms`` per request, bandwidth capped at ``--bw-mbps`` MB/s (one link);
* ``s3-saturated``: small chunks (``--small-chunk-samples`` small images per chunk) from a store that serves at
  most ``--sat-capacity`` requests at once (more queue) and answers 503 SlowDown past ``--sat-rps`` requests/s;
* ``ddp``: two ranks (torch.distributed, gloo, two processes), each step all-reduces a flag (the gradient sync);
  rank 0 reads at ``--ddp-delays[0]`` ms, rank 1 at ``--ddp-delays[1]`` ms: the straggler holds both back;
* ``raw-s3-<N>ms`` (default 20): ``--raw-files`` raw files of ``--raw-file-kb`` KB through ``StreamingRawDataset``;
* ``step-change``: S3 at ``--step-change-latency-ms``, the step time multiplied by ``--step-change-factor`` at
  ``--step-change-at`` of the window (the loop gets faster mid-run: what was enough no longer is).

**Arms** (each run in its own process, forked from a zygote that imported torch once, ``_autotune_procs.py``):

* ``untuned``: streamscope defaults, ``num_workers=--workers``; ``untuned-aa``: the same again, the A/A arm whose
  ratio to ``untuned`` is the run's noise floor;
* ``tuned``: the same with ``autotune=True`` (the tuner's public switch; its kept values are read from
  ``loader.state_dict()`` and the knob gauges, nothing of its internals, so any controller behind it runs here);
* ``grid-*``: static points of the tuner's reachable space, the default included (``grid-default-w0``): chunked
  data ``max_pre_download`` x ``STREAMSCOPE_DOWNLOAD_CONCURRENCY`` (pairs with concurrency <= prefetch, from
  ``--grid-prefetch`` x ``--grid-concurrency``) x ``--grid-workers`` (default: ``--workers`` and the tuner's cap,
  the usable cores); raw files ``max_prefetch`` x ``STREAMSCOPE_RAW_CONCURRENCY``; local data the workers alone
  (``--local-grid-workers``, default ``--workers`` .. cap);
* ``litdata``: LitData 0.2.76 with its defaults (``--litdata``, default ``.litdata-0.2.76`` of the checkout or
  ``STREAMSCOPE_LITDATA076_DIR``) in the scenarios of ``--litdata-scenarios`` (default S3 +50 and +100 ms).

**Protocol** (``_ab.py``, shared with bench_tracer.py). ``--rounds`` rounds (>= 20 for a result); each runs every
arm once, in a random order that the next round reverses (A-B-B-A for n arms). Per round, each arm's throughput
over that of ``untuned`` in the same round; the geometric mean of those ratios with a 95 % bootstrap interval
(rounds resampled). The grid's best point is picked on the odd rounds and scored on the even ones. Per round the
CPU pressure (``/proc/pressure/cpu``: the share of the round's time some task waited for a core) and the load
average are logged, and the store's counters per arm (requests, 503s, time queued, most in flight).

Run: ``PYTHONPATH=$PWD/src:$PWD python benchmarks/bench_autotune.py --scenarios s3-20ms local --rounds 20``.
``--quick``: every scenario, 2 rounds, a short window and a two-point grid: a smoke test of a few minutes, whose
numbers mean nothing. Writes ``benchmarks/results/bench_autotune.json`` (``--out``) through ``_results.py`` after
every scenario; ``python benchmarks/report.py`` renders its summary into README.md. A scenario at 20 rounds takes
about 80 minutes, so the baseline is built a scenario at a time: ``--keep FILE`` keeps the scenarios of an
earlier result this run does not re-run. Every scenario carries the run it came from (``run``: commit, date,
command), and the README's table names each scenario's commit.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import socket
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from typing import Any

_HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(_HERE)
sys.path.insert(0, _HERE)
sys.path.insert(0, ROOT)

import _autotune_report as report  # noqa: E402
from _ab import Pressure, abba_orders  # noqa: E402
from _autotune_procs import Sampler, Zygote  # noqa: E402
from _latency_store import LatencyStore, Profile  # noqa: E402
from _results import package_version, start  # noqa: E402

NAME = "bench_autotune"

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
    "AWS_ENDPOINT_URL",
    "AWS_ENDPOINT_URL_S3",
    "AWS_PROFILE",
)

BUCKET = "bench"


@dataclass
class Plan:
    """One arm of a scenario."""

    name: str
    engine: str  # litdata | streamscope
    workers: int
    prefetch: int | None = None
    concurrency: int | None = None
    autotune: bool = False
    env: dict[str, str] = field(default_factory=dict)


def parse_bytes(text: str) -> int:
    """``100MB`` -> 100,000,000 (decimal units, as both engines read them), ``4GB``, or plain bytes."""
    m = re.fullmatch(r"\s*([\d.]+)\s*([kKmMgG]?)B?\s*", text)
    if not m:
        raise argparse.ArgumentTypeError(f"not a byte size: {text!r} (e.g. 100MB, 4GB)")
    return int(float(m.group(1)) * {"": 1, "k": 1e3, "m": 1e6, "g": 1e9}[m.group(2).lower()])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def usable_cores() -> int:
    """The tuner's default worker cap (``autotune_max_workers`` -1): the cores this process may use."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def grid_points(kind: str, args: argparse.Namespace) -> list[tuple[int | None, int | None, int]]:
    """(prefetch, concurrency, workers) of the grid; None = the default (no knob set)."""
    if kind == "local":
        return [(None, None, w) for w in args.local_grid_workers]
    pts: list[tuple[int | None, int | None, int]] = []
    for w in args.grid_workers:
        pts.append((None, None, w))
        for p in args.grid_prefetch:
            for c in args.grid_concurrency:
                if kind == "raw" or c <= p:  # chunk downloads run within the prefetch depth; raw GETs do not
                    pts.append((p, c, w))
    return pts


def plans_for(sc: dict[str, Any], args: argparse.Namespace) -> list[Plan]:
    """The arms of scenario ``sc`` (names are unique; the run order is drawn per round)."""
    w = args.workers
    plans = [
        Plan("untuned", "streamscope", w),
        Plan("untuned-aa", "streamscope", w),
        Plan("tuned", "streamscope", w, autotune=True),
    ]
    if sc["name"] in args.litdata_scenarios and args.litdata is not None:
        plans.append(Plan("litdata", "litdata", w))
    for p, c, gw in grid_points(sc["kind"], args):
        if p is None:
            plans.append(Plan(f"grid-default-w{gw}", "streamscope", gw))
            continue
        var = "STREAMSCOPE_RAW_CONCURRENCY" if sc["kind"] == "raw" else "STREAMSCOPE_DOWNLOAD_CONCURRENCY"
        plans.append(Plan(f"grid-p{p}-c{c}-w{gw}", "streamscope", gw, p, c, env={var: str(c)}))
    return plans


class Harness:
    """Runs the rounds of the scenarios (the zygote lives as long as it does; a store per scenario)."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.scratch = tempfile.mkdtemp(prefix="bench-autotune-")
        env = {k: v for k, v in os.environ.items() if k not in _SCRUB}
        env["LITDATA_DISABLE_VERSION_CHECK"] = "1"
        self.zygote = Zygote(env=env)
        self.store: LatencyStore | None = None

    def close(self) -> None:
        self.zygote.close()
        if self.store is not None:
            self.store.close()
        shutil.rmtree(self.scratch, ignore_errors=True)

    def sys_path(self, engine: str) -> list[str]:
        if engine == "litdata":
            return [self.args.litdata] if self.args.litdata else []
        return [os.path.join(ROOT, "src")]

    def run_arm(self, sc: dict[str, Any], plan: Plan, tag: str) -> dict[str, Any]:
        a = self.args
        ranks = len(sc["inputs"])
        port = free_port() if ranks > 1 else 0
        pids: dict[str, int] = {}
        caches: dict[str, str] = {}
        outs: dict[str, str] = {}
        logs: dict[str, str] = {}
        for r in range(ranks):
            label = f"rank{r}"
            base = os.path.join(self.scratch, f"{sc['name']}-{tag}-{plan.name}-r{r}")
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
                "raw_listing": sc.get("raw_listing") if plan.engine == "litdata" else None,
                "step_s": a.step_ms / 1000.0,
                "step_changes": sc.get("step_changes"),
                "duration_s": a.window,
                "warmup_s": a.warmup,
                "transform": sc.get("transform"),
                "decode_cpu_s": a.decode_ms / 1000.0,
                "prefetch": plan.prefetch,
                "autotune": plan.autotune,
                "knob_sample_s": a.knob_sample_s if plan.autotune else 0.0,
                "dist": {"rank": r, "world": ranks, "port": port} if ranks > 1 else None,
            }
            pids[label] = self.zygote.fork(spec, plan.env, self.sys_path(plan.engine), outs[label], logs[label])
        sampler = Sampler(pids, caches, hz=a.sample_hz).start()
        codes = self.zygote.wait(list(pids.values()), timeout=a.window + a.arm_timeout)
        sampler.stop()
        rank_results = []
        for label, pid in pids.items():
            code = codes[pid]
            log = open(logs[label]).read() if os.path.exists(logs[label]) else ""
            if os.path.exists(outs[label]):
                res = json.load(open(outs[label]))
            else:
                res = {"status": "error", "error": f"exit code {code}, no result; log tail: {log[-1500:]}"}
            if res.get("status") == "error":
                res["log_tail"] = log[-3000:]
            rank_results.append(res)
        for d in caches.values():
            shutil.rmtree(d, ignore_errors=True)
        arm = report.combine_ranks(rank_results)
        arm["exit_codes"] = [codes[p] for p in pids.values()]
        arm["oom"] = any(codes[p] == -9 for p in pids.values()) or any(
            "MemoryError" in (r.get("log_tail") or "") for r in rank_results
        )
        arm["peak_rss_bytes"] = max(sampler.peak_rss.values())
        arm["peak_cache_bytes"] = max(sampler.peak_cache.values())
        if arm.get("status") != "ok":
            arm["log_tail"] = next((r.get("log_tail") for r in rank_results if r.get("log_tail")), "")[-1500:]
        return arm

    def store_stats(self, sc: dict[str, Any]) -> list[dict[str, Any]]:
        if self.store is None or sc["kind"] == "local":
            return []
        return [self.store.stats(i, reset=True) for i in range(len(self.store.ports))]

    def scenario(self, sc: dict[str, Any]) -> dict[str, Any]:
        a = self.args
        plans = {p.name: p for p in plans_for(sc, a)}
        names = list(plans)
        orders = abba_orders(names, a.rounds, seed=a.seed)
        print(f"\n== {sc['name']}: {sc['desc']} ({len(names)} arms x {a.rounds} rounds x {a.window:g} s)", flush=True)
        t0 = time.perf_counter()
        rounds = []
        for r, order in enumerate(orders, 1):
            press = Pressure().start()
            arms: dict[str, Any] = {}
            for name in order:
                before = self.store_stats(sc)
                ta = time.perf_counter()
                arm = self.run_arm(sc, plans[name], f"r{r}")
                arm["wall_s"] = round(time.perf_counter() - ta, 2)
                after = self.store_stats(sc)
                if after:
                    arm["store"] = [
                        {
                            "requests": y["requests"] - x["requests"],
                            "slowdown_503": y["slowdown_503"] - x["slowdown_503"],
                            "queued_s": round(y["queued_s"] - x["queued_s"], 3),
                            "in_flight_max": y["in_flight_max"],
                            "mb_sent": round((y["bytes_sent"] - x["bytes_sent"]) / 1e6, 1),
                            "store_cpu_s": round(y["cpu_s"] - x["cpu_s"], 2),
                        }
                        for x, y in zip(before, after)
                    ]
                arms[name] = arm
            rd = {"round": r, "order": order, "arms": arms, "pressure": press.stop()}
            rounds.append(rd)
            print(f"  round {r:2d}: " + round_line(rd), flush=True)
        out = {
            "desc": sc["desc"],
            "kind": sc["kind"],
            "ranks": len(sc["inputs"]),
            "window_s": a.window,
            "warmup_s": a.warmup,
            "arm_names": names,
            "plans": {n: asdict(p) for n, p in plans.items()},
            "store_profiles": sc.get("profiles"),
            "step_changes": sc.get("step_changes"),
            "rounds": rounds,
            "wall_s": round(time.perf_counter() - t0, 1),
        }
        out["evaluation"] = report.evaluate(out)
        print("  " + json.dumps(report.summary_rows({"scenarios": {sc["name"]: out}})[0]), flush=True)
        return out


def round_line(rd: dict[str, Any]) -> str:
    parts = []
    for name in rd["order"]:
        a = rd["arms"][name]
        parts.append(f"{name} {a['rate']:,.0f}" if a.get("status") == "ok" else f"{name} {a.get('status')}")
    p = rd["pressure"]
    return ", ".join(parts) + f" | pressure {p.get('cpu_some_pct', '-')}%, load {p['load_end'][0]}"


def _write_raw_files(root: str, n: int, kb: float) -> str:
    import numpy as np

    os.makedirs(root, exist_ok=True)
    size = int(kb * 1000)
    for i in range(n):
        with open(os.path.join(root, f"f{i:06d}.bin"), "wb") as f:
            f.write(np.random.default_rng(i).integers(0, 256, size, dtype=np.uint8).tobytes())
    return root


def _small_chunks(root: str, n: int, per_chunk: int) -> str:
    """A dataset of ``n`` small images, ``per_chunk`` a chunk (many small chunks: requests, not bytes)."""
    if os.path.isfile(os.path.join(root, "index.json")):
        return root
    sys.path.insert(0, os.path.join(ROOT, "src"))
    from _datasets import write_small_images

    return write_small_images(root, n, chunk_size=per_chunk)


def build_scenario(name: str, args: argparse.Namespace, h: Harness, data: str) -> dict[str, Any]:
    """Scenario ``name``: its inputs (one per rank), storage options, and the store it needs (started here)."""
    if h.store is not None:
        h.store.close()
        h.store = None
    url = f"s3://{BUCKET}/images"
    jit = {"jitter_ms": args.jitter_ms} if args.jitter_ms else {}

    def store(profiles: list[dict[str, Any]], src: str = data, prefix: str = "images") -> list[dict[str, Any]]:
        h.store = LatencyStore({src: f"{BUCKET}/{prefix}"}, [Profile.parse(p) for p in profiles])
        return [h.store.storage_options(i) for i in range(len(profiles))]

    sc: dict[str, Any] = {"name": name, "kind": "s3"}
    if name == "local":
        sc.update(kind="local", inputs=[data], options=[None], transform="decode")
        sc["desc"] = f"local files, decode-heavy transform ({args.decode_ms:g} ms CPU per sample)"
    elif re.fullmatch(r"s3-\d+(\.\d+)?ms", name):
        d = float(name[3:-2])
        sc["profiles"] = [{"latency_ms": d, **jit}]
        sc.update(inputs=[url], options=store(sc["profiles"]))
        sc["desc"] = f"S3 (latency store) +{d:g} ms per request" + (f", jitter {args.jitter_ms:g} ms" if jit else "")
    elif name == "s3-bw":
        sc["profiles"] = [{"latency_ms": args.bw_latency_ms, "bandwidth_mbps": args.bw_mbps}]
        sc.update(inputs=[url], options=store(sc["profiles"]))
        sc["desc"] = f"S3 +{args.bw_latency_ms:g} ms, capped at {args.bw_mbps:g} MB/s (one link)"
    elif name == "s3-saturated":
        small = _small_chunks(os.path.join(h.scratch, "small"), args.small_samples, args.small_chunk_samples)
        sc["profiles"] = [
            {
                "latency_ms": args.sat_latency_ms,
                "capacity": args.sat_capacity,
                "rate_limit_rps": args.sat_rps,
                "rate_burst": args.sat_rps / 4,
            }
        ]
        sc.update(inputs=[f"s3://{BUCKET}/small"], options=store(sc["profiles"], small, "small"))
        sc["desc"] = (
            f"saturated store: {args.small_samples} small samples, {args.small_chunk_samples} a chunk; "
            f"+{args.sat_latency_ms:g} ms, {args.sat_capacity} requests at once (more queue), 503 SlowDown past "
            f"{args.sat_rps:g} requests/s"
        )
    elif name == "ddp":
        d0, d1 = args.ddp_delays
        sc["profiles"] = [{"latency_ms": d0}, {"latency_ms": d1}]
        sc.update(inputs=[url, url], options=store(sc["profiles"]))
        sc["desc"] = f"2 ranks (gloo): rank 0 at +{d0:g} ms, rank 1 (the straggler) at +{d1:g} ms; global samples/s"
    elif re.fullmatch(r"raw-s3-\d+(\.\d+)?ms", name):
        d = float(name[7:-2])
        raw = _write_raw_files(os.path.join(h.scratch, "raw"), args.raw_files, args.raw_file_kb)
        sc["profiles"] = [{"latency_ms": d, **jit}]
        sc.update(kind="raw", inputs=[f"s3://{BUCKET}/rawfiles"], options=store(sc["profiles"], raw, "rawfiles"))
        size = int(args.raw_file_kb * 1000)
        sc["raw_listing"] = [[f"s3://{BUCKET}/rawfiles/f{i:06d}.bin", size] for i in range(args.raw_files)]
        sc["desc"] = f"raw files ({args.raw_files} x {args.raw_file_kb:g} KB, batch {args.raw_batch}), S3 +{d:g} ms"
    elif name == "step-change":
        d = args.step_change_latency_ms
        sc["profiles"] = [{"latency_ms": d, **jit}]
        sc.update(inputs=[url], options=store(sc["profiles"]))
        at = args.step_change_at * args.window
        sc["step_changes"] = [[at, args.step_ms * args.step_change_factor / 1000.0]]
        sc["desc"] = (
            f"S3 +{d:g} ms, the step time x{args.step_change_factor:g} at {at:g} s "
            f"({args.step_ms:g} -> {args.step_ms * args.step_change_factor:g} ms)"
        )
    else:
        raise SystemExit(f"unknown scenario {name!r}: {' '.join(ALL_SCENARIOS)}")
    return sc


ALL_SCENARIOS = [
    "local",
    "s3-20ms",
    "s3-50ms",
    "s3-100ms",
    "s3-bw",
    "s3-saturated",
    "ddp",
    "raw-s3-20ms",
    "step-change",
]


def _default_litdata() -> str:
    for cand in (os.environ.get("STREAMSCOPE_LITDATA076_DIR", ""), os.path.join(ROOT, ".litdata-0.2.76")):
        if cand and os.path.isdir(os.path.join(cand, "litdata")):
            return cand
    return ""


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scenarios", nargs="+", default=None, help=f"default: all ({' '.join(ALL_SCENARIOS)})")
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--window", type=float, default=20.0, help="seconds per arm, from the loader's construction")
    ap.add_argument("--warmup", type=float, default=0.0, help="also report the rate after this many seconds")
    ap.add_argument("--seed", type=int, default=0, help="of the rounds' random orders")
    ap.add_argument("--quick", action="store_true", help="smoke test: 2 rounds, 5 s windows, a two-point grid")
    ap.add_argument("--workers", type=int, default=0, help="num_workers of untuned, tuned and LitData")
    ap.add_argument("--grid-prefetch", type=int, nargs="+", default=[8, 32])
    ap.add_argument("--grid-concurrency", type=int, nargs="+", default=[4, 16])
    ap.add_argument("--grid-workers", type=int, nargs="+", default=None, help="default: --workers and the cores")
    ap.add_argument("--local-grid-workers", type=int, nargs="+", default=None, help="default: --workers .. cores")
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--step-ms", type=float, default=10.0)
    ap.add_argument("--decode-ms", type=float, default=0.3, help="CPU per sample of the local scenario's transform")
    ap.add_argument("--jitter-ms", type=float, default=0.0, help="log-normal jitter (median) on the S3 latencies")
    ap.add_argument("--bw-mbps", type=float, default=40.0)
    ap.add_argument("--bw-latency-ms", type=float, default=5.0)
    ap.add_argument("--small-samples", type=int, default=20000)
    ap.add_argument("--small-chunk-samples", type=int, default=100)
    ap.add_argument("--sat-latency-ms", type=float, default=20.0)
    ap.add_argument("--sat-capacity", type=int, default=8)
    ap.add_argument("--sat-rps", type=float, default=150.0)
    ap.add_argument("--ddp-delays", type=float, nargs=2, default=[20, 100])
    ap.add_argument("--raw-files", type=int, default=2000)
    ap.add_argument("--raw-file-kb", type=float, default=16.0)
    ap.add_argument("--raw-batch", type=int, default=64)
    ap.add_argument("--step-change-latency-ms", type=float, default=50.0)
    ap.add_argument("--step-change-at", type=float, default=0.5, help="fraction of the window")
    ap.add_argument("--step-change-factor", type=float, default=0.25)
    ap.add_argument("--litdata-scenarios", nargs="*", default=["s3-50ms", "s3-100ms"])
    ap.add_argument("--litdata", default=_default_litdata(), help="unpacked LitData ('' = the installed one)")
    ap.add_argument("--cache-budget", type=parse_bytes, default=parse_bytes("100MB"))
    ap.add_argument("--sample-hz", type=float, default=2.0, help="RSS and cache-size samples per second")
    ap.add_argument("--knob-sample-s", type=float, default=0.0, help="tuned arm: read the knob gauges this often")
    ap.add_argument("--arm-timeout", type=float, default=120.0, help="seconds past the window before a kill")
    ap.add_argument("--data", default=None, help="dataset directory (default: _datasets.py images_1mb)")
    ap.add_argument("--out", default=None, help="result file (default results/bench_autotune.json)")
    ap.add_argument(
        "--keep", default=None, help="an earlier result file: its scenarios this run does not re-run stay in --out"
    )
    args = ap.parse_args(argv)
    cores = usable_cores()
    if args.quick:
        args.rounds = min(args.rounds, 2)
        args.window = min(args.window, 5.0)
        args.grid_prefetch, args.grid_concurrency = [32], [16]
        args.grid_workers = args.grid_workers or [args.workers]
        args.local_grid_workers = args.local_grid_workers or sorted({args.workers, cores})
    args.grid_workers = args.grid_workers or sorted({args.workers, max(args.workers, cores)})
    args.local_grid_workers = args.local_grid_workers or list(range(args.workers, max(args.workers, cores) + 1))
    args.scenarios = args.scenarios or list(ALL_SCENARIOS)
    if args.litdata and not os.path.isdir(os.path.join(args.litdata, "litdata")):
        raise SystemExit(f"--litdata {args.litdata}: no litdata package there ('' uses the installed LitData)")
    if args.keep:
        try:
            with open(args.keep, encoding="utf-8") as f:
                args.kept = report.kept_scenarios(json.load(f), args.scenarios)
        except (OSError, ValueError, AttributeError) as exc:
            raise SystemExit(f"--keep {args.keep}: not a bench_autotune result file ({exc})") from exc
    if args.rounds < 1 or args.window <= 0:
        raise SystemExit("--rounds must be >= 1 and --window > 0")
    return args


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    run = start(NAME, args)
    if args.data:
        data = args.data
    elif any(n not in ("s3-saturated",) and not n.startswith("raw-") for n in args.scenarios):
        from _datasets import ensure

        data = ensure("images_1mb")
    else:
        data = ""
    litdata_version = package_version("litdata", path=args.litdata) if args.litdata else package_version("litdata")
    result: dict[str, Any] = {"data": data, "cores_usable": usable_cores(), "scenarios": {}}
    if args.keep:
        result["scenarios"] = args.kept  # read in parse_args: a bad file stops the run before it starts
    h = Harness(args)
    started = time.perf_counter()
    try:
        result["zygote_imports_s"] = h.zygote.imports_s
        for name in args.scenarios:
            sc = build_scenario(name, args, h, data)
            result["scenarios"][name] = {**h.scenario(sc), "run": report.run_of(run.meta, sys.argv)}
            run.write(result, summary=report.summary_rows(result), out=args.out, versions={"litdata": litdata_version})
    finally:
        h.close()
    print(f"\n{time.perf_counter() - started:.0f} s", flush=True)
    return result


if __name__ == "__main__":
    main()
