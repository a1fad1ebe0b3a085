"""Pool the paired rounds of several tracer A/B runs (bench_tracer.py ``--ab-rounds``) into one estimate.

One run's interval covers the noise between its rounds, not the drift of the machine between runs: on the
shared 2-core machine these benchmarks ran on, two runs of the same tree an hour apart differed by more than
either interval. This script pools runs taken at different times and gives, per measure (CPU, wall):

* each run's paired median (the level's time over the off time of the same round);
* the pooled median of all rounds' ratios;
* a two-stage bootstrap interval: resample the runs, then the rounds within each drawn run, so the interval
  widens with the spread between runs.

Usage: ``python benchmarks/pool_ab.py RUN.json RUN2.json ...``, the runs written by ``bench_tracer.py
--ab-rounds N --out /tmp/RUN.json`` (one A/B each). Runs are grouped by their A/B kind (level and
``num_workers``), so one call pools the w0 and the w2 runs, chunk and sample, each group on its own. Prints a
table and writes ``results/pool_ab.json`` (``--out``).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # also when imported as benchmarks.pool_ab
from _results import start  # noqa: E402

MEASURES = ("cpu", "wall")


def run_commit(path: str) -> str | None:
    """The commit a run measured, if its file says (results written through benchmarks/_results.py do)."""
    with open(path) as f:
        commit = json.load(f).get("meta", {}).get("commit")
    return commit if isinstance(commit, str) else None


def paired_ratios(path: str) -> tuple[str, dict[str, list[float]]]:
    """The A/B key of ``path`` and, per measure, every round's level time over its off time."""
    with open(path) as f:
        data = json.load(f)
    data = data.get("result", data)  # the envelope of benchmarks/_results.py, or a bare older result
    keys = [k for k in data if k.startswith("in_process_ab_")]
    if len(keys) != 1:
        raise SystemExit(f"{path}: expected one in_process_ab_* result, found {keys}")
    raw = data[keys[0]].get("rounds_raw")
    if not raw or "off" not in raw or len(raw) != 2:
        raise SystemExit(f"{path}: no rounds_raw with 'off' and one level (rerun with a current bench_tracer.py)")
    level = next(k for k in raw if k != "off")
    out = {m: [a[i] / b[i] for a, b in zip(raw[level], raw["off"])] for i, m in enumerate(MEASURES)}
    return keys[0], out


def two_stage_interval(runs: list[list[float]], draws: int = 4000, seed: int = 0) -> tuple[float, float]:
    """95 % interval of the pooled median: runs resampled, then rounds within each drawn run."""
    rng = random.Random(seed)
    meds = []
    for _ in range(draws):
        pooled: list[float] = []
        for run in rng.choices(runs, k=len(runs)):
            pooled += rng.choices(run, k=len(run))
        meds.append(statistics.median(pooled))
    meds.sort()
    return meds[int(0.025 * draws)], meds[int(0.975 * draws) - 1]


def pool(paths: list[str]) -> dict[str, Any]:
    """Pool runs of one A/B kind."""
    loaded = [paired_ratios(p) for p in paths]
    kinds = {k for k, _ in loaded}
    if len(kinds) != 1:
        raise SystemExit(f"runs of different A/B kinds cannot be pooled: {sorted(kinds)}")
    names = [os.path.basename(p) for p in paths]
    result: dict[str, Any] = {
        "kind": kinds.pop(),
        "runs": names,
        "run_commits": [run_commit(p) for p in paths],
        "rounds": [len(r["cpu"]) for _, r in loaded],
    }
    for m in MEASURES:
        runs = [r[m] for _, r in loaded]
        lo, hi = two_stage_interval(runs)
        result[m] = {
            "per_run_paired_median": [round(statistics.median(r), 4) for r in runs],
            "pooled_paired_median": round(statistics.median([x for r in runs for x in r]), 4),
            "ci95_two_stage": [round(lo, 4), round(hi, 4)],
        }
    return result


def pool_by_kind(paths: list[str]) -> dict[str, dict[str, Any]]:
    """Pool each A/B kind among ``paths`` on its own, kinds in sorted order."""
    groups: dict[str, list[str]] = {}
    for path in paths:
        groups.setdefault(paired_ratios(path)[0], []).append(path)
    return {kind: pool(groups[kind]) for kind in sorted(groups)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", help="bench_tracer.py result files with one in_process_ab_* result each")
    ap.add_argument("--out", default=None, help="write the result here instead of results/pool_ab.json")
    args = ap.parse_args()
    bench = start("pool_ab", args)
    pools = pool_by_kind(args.runs)
    for kind, res in pools.items():
        print(f"{kind}: {len(res['runs'])} runs, rounds {res['rounds']}")
        for m in MEASURES:
            r = res[m]
            print(
                f"  {m:4s} per run {r['per_run_paired_median']}  pooled {r['pooled_paired_median']}  "
                f"two-stage 95 % {r['ci95_two_stage']}"
            )
    result = {"pools": pools}
    bench.write(result, summary=summarize(result), out=args.out)


def summarize(result: dict[str, Any]) -> list[dict[str, Any]]:
    """The README's rows: per A/B kind, the pooled paired median of CPU and wall and their intervals."""
    rows = []
    for kind, res in result["pools"].items():
        rows.append(
            {
                "A/B": kind[len("in_process_ab_") :],
                "runs x rounds": f"{len(res['rounds'])} x {res['rounds'][0]}" if len(set(res["rounds"])) == 1
                else "+".join(map(str, res["rounds"])),
                "CPU level / off": res["cpu"]["pooled_paired_median"],
                "CPU 95 %": "-".join(map(str, res["cpu"]["ci95_two_stage"])),
                "wall level / off": res["wall"]["pooled_paired_median"],
                "wall 95 %": "-".join(map(str, res["wall"]["ci95_two_stage"])),
            }
        )
    return rows


if __name__ == "__main__":
    main()
