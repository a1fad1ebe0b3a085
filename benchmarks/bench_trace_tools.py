"""Throughput and peak memory of ``streamscope-trace`` convert (json, json.gz, pftrace) and summary.

Generates a synthetic streamscope-layout log (~1M lines by default: one rank, 4 workers, stall/batch spans in the
main process, download/read/decompress/sample spans in workers, counters), then runs each command in a fresh
subprocess and reports lines per second (wall and CPU time: on a shared machine CPU time is the steadier
measure) and the subprocess's peak RSS. Running the same commands on a log a fifth
the size shows whether memory grows with the log (it should not for convert).

    PYTHONPATH=$PWD/src:$PWD python benchmarks/bench_trace_tools.py [--lines 1000000] [--keep DIR]

Writes ``results/bench_trace_tools.json`` (``--out``). Public interface only: the ``streamscope-trace`` command
(``trace_tools.cli.main``).
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import tempfile
import time
from typing import Any

from _results import start

T0 = 1_700_000_000_000_000

CHILD = r"""
import resource, sys, time
from trace_tools.cli import main
t = time.perf_counter()
rc = main(sys.argv[1:])
dt = time.perf_counter() - t
ru = resource.getrusage(resource.RUSAGE_SELF)
print(f"BENCH rc={rc} seconds={dt:.3f} cpu={ru.ru_utime + ru.ru_stime:.3f} maxrss_kb={ru.ru_maxrss}", file=sys.stderr)
"""


def _line(ph: str, name: str, cat: str, ts: float, pid: int, tid: int, wws: int, wr: int, args: str = "") -> str:
    return (
        f"ts: {T0 + ts:.3f}; pid: {pid}; tid: {tid}; name: {name}; cat: {cat}; cname: generic_work; dur: 0; s: t; "
        f"{args}dist_world_size: 1; dist_global_rank: 0; dist_num_nodes: 1; worker_world_size: {wws}; "
        f"worker_rank: {wr}; ph: {ph};\n"
    )


def generate(path: str, n_lines: int, seed: int = 0) -> int:
    """Write a realistic log of about ``n_lines`` lines to ``path``; returns the exact line count."""
    rng = random.Random(seed)
    workers = 4
    t = 0.0
    n = 0
    chunk = 0
    batch = 0
    with open(path, "w") as f:
        f.write(_line("B", "dataloader", "epoch", 0, 100, 1, 1, 0, "epoch: 0; "))
        n += 1
        while n < n_lines - 1:
            w = batch % workers
            pid, main_tid, pf_tid = 200 + w, 10 + w, 20 + w
            wait = rng.uniform(50, 2000)
            out = [_line("B", "stall", "stall", t, 100, 1, 1, 0, f"batch: {batch}; ")]
            if batch % 8 == 0:  # a new chunk every 8 batches per worker
                chunk += 1
                d0 = t - rng.uniform(0, 500)
                d1 = d0 + rng.uniform(100, 3000)
                ca = f"chunk: {chunk}; "
                out += [
                    _line("B", "download", "download", d0, pid, pf_tid, workers, w, ca),
                    _line("C", "bytes_in_flight", "download", d0, pid, pf_tid, workers, w, "value: 67108864; "),
                    _line("E", "download", "download", d1, pid, pf_tid, workers, w, ca + "bytes: 67108864; "),
                    _line("C", "bytes_in_flight", "download", d1, pid, pf_tid, workers, w, "value: 0; "),
                    _line("B", "read", "read", d1, pid, main_tid, workers, w, ca),
                    _line("E", "read", "read", d1 + 5, pid, main_tid, workers, w, ca),
                ]
            s = t
            for i in range(8):  # batch of 8 samples
                e = s + rng.uniform(5, 200)
                a = f"chunk: {chunk}; index: {batch * 8 + i}; "
                out.append(_line("B", "sample", "sample", s, pid, main_tid, workers, w, a))
                out.append(_line("B", "decompress", "decompress", s + 1, pid, main_tid, workers, w, a))
                out.append(_line("E", "decompress", "decompress", s + 3, pid, main_tid, workers, w, a))
                out.append(_line("E", "sample", "sample", e, pid, main_tid, workers, w, a))
                s = e
            t += wait
            out.append(_line("E", "stall", "stall", t, 100, 1, 1, 0, f"batch: {batch}; "))
            out.append(_line("C", "queue_depth", "batch", t, 100, 1, 1, 0, f"value: {rng.randint(0, 8)}; "))
            out.append(_line("B", "batch", "batch", t, 100, 1, 1, 0, f"epoch: 0; batch: {batch}; "))
            t += rng.uniform(100, 1000)
            out.append(_line("E", "batch", "batch", t, 100, 1, 1, 0, f"epoch: 0; batch: {batch}; "))
            f.writelines(out)
            n += len(out)
            batch += 1
        f.write(_line("E", "dataloader", "epoch", t, 100, 1, 1, 0, "epoch: 0; "))
        n += 1
    return n


def run(argv: list[str]) -> tuple[float, float, int]:
    env = dict(os.environ)
    r = subprocess.run([sys.executable, "-c", CHILD, *argv], capture_output=True, text=True, env=env)
    last = [ln for ln in r.stderr.splitlines() if ln.startswith("BENCH")]
    if not last:
        raise SystemExit(f"benchmark child failed: {r.stderr[-2000:]}")
    fields = dict(kv.split("=") for kv in last[-1].split()[1:])
    if fields["rc"] != "0":
        raise SystemExit(f"{argv}: exit {fields['rc']}: {r.stderr[-2000:]}")
    return float(fields["seconds"]), float(fields["cpu"]), int(fields["maxrss_kb"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lines", type=int, default=1_000_000)
    ap.add_argument("--keep", help="directory to keep the generated log and outputs in")
    ap.add_argument("--out", default=None, help="write the result here instead of results/bench_trace_tools.json")
    args = ap.parse_args()
    bench = start("bench_trace_tools", args)
    rows: list[dict[str, Any]] = []
    work = args.keep or tempfile.mkdtemp(prefix="bench_trace_tools_")
    os.makedirs(work, exist_ok=True)
    sizes = [max(args.lines // 5, 1000), args.lines]
    print(f"load average before: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs (wall time suffers, CPU time less)")
    print(
        f"{'log lines':>10} {'MB':>7} {'command':<22} {'wall s':>8} {'lines/s':>10} {'CPU s':>8} {'lines/CPU-s':>12} "
        f"{'peak RSS MB':>12}"
    )
    for n in sizes:
        log = os.path.join(work, f"trace_{n}.log")
        t = time.perf_counter()
        n_real = generate(log, n)
        gen_s = time.perf_counter() - t
        mb = os.path.getsize(log) / 1e6
        print(f"{n_real:>10} {mb:>7.1f} {'(generate)':<22} {gen_s:>8.2f}")
        cmds = {
            "convert -> .json": ["convert", log, "-o", os.path.join(work, "out.json")],
            "convert -> .json.gz": ["convert", log, "-o", os.path.join(work, "out.json.gz")],
            "convert -> .pftrace": ["convert", log, "-o", os.path.join(work, "out.pftrace")],
            "summary (with PNGs)": ["summary", log, "-o", work, "--brief"],
        }
        for label, argv in cmds.items():
            secs, cpu, rss = run(argv)
            print(
                f"{n_real:>10} {mb:>7.1f} {label:<22} {secs:>8.2f} {n_real / secs:>10.0f} {cpu:>8.2f} "
                f"{n_real / cpu:>12.0f} {rss / 1024:>12.1f}"
            )
            rows.append({"lines": n_real, "log_mb": round(mb, 1), "command": label, "wall_s": secs, "cpu_s": cpu,
                         "peak_rss_mb": round(rss / 1024, 1)})
        if not args.keep:
            for name in os.listdir(work):
                os.unlink(os.path.join(work, name))
    if not args.keep:
        os.rmdir(work)
    result = {"runs": rows}
    bench.write(result, summary=summarize(result), out=args.out)


def summarize(result: dict[str, Any]) -> list[dict[str, Any]]:
    """The README's rows: lines per CPU second and peak RSS of each command, per log size."""
    return [
        {
            "log lines": r["lines"],
            "command": r["command"],
            "lines/s (wall)": round(r["lines"] / r["wall_s"]),
            "lines/CPU-s": round(r["lines"] / r["cpu_s"]),
            "peak RSS MB": r["peak_rss_mb"],
        }
        for r in result["runs"]
    ]


if __name__ == "__main__":
    main()
