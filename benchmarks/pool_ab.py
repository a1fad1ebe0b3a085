"""Pool the paired rounds of several tracer A/B runs (bench_tracer.py ``--ab-rounds``) into one estimate.

One run's interval covers the noise between its rounds, not the drift of the machine between runs: on the
shared 2-core machine these benchmarks ran on, two runs of the same tree an hour apart differed by more than
either interval. This script pools runs taken at different times and gives, per measure (CPU, wall):

* each run's paired median (the level's time over the off time of the same round);
* the pooled median of all rounds' ratios;
* a two-stage bootstrap interval: resample the runs, then the rounds within each drawn run, so the interval
  widens with the spread between runs.

Usage: ``python benchmarks/pool_ab.py results/bench_tracer_ab_w2_A.json results/bench_tracer_ab_w2_B.json ...``
(all runs of one level and one ``num_workers``). Prints a table and, with ``--out FILE``, writes it as JSON.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
from typing import Any

MEASURES = ("cpu", "wall")


def paired_ratios(path: str) -> tuple[str, dict[str, list[float]]]:
    """The A/B key of ``path`` and, per measure, every round's level time over its off time."""
    with open(path) as f:
        data = json.load(f)
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
    loaded = [paired_ratios(p) for p in paths]
    kinds = {k for k, _ in loaded}
    if len(kinds) != 1:
        raise SystemExit(f"runs of different A/B kinds cannot be pooled: {sorted(kinds)}")
    result: dict[str, Any] = {"kind": kinds.pop(), "runs": paths, "rounds": [len(r["cpu"]) for _, r in loaded]}
    for m in MEASURES:
        runs = [r[m] for _, r in loaded]
        lo, hi = two_stage_interval(runs)
        result[m] = {
            "per_run_paired_median": [round(statistics.median(r), 4) for r in runs],
            "pooled_paired_median": round(statistics.median([x for r in runs for x in r]), 4),
            "ci95_two_stage": [round(lo, 4), round(hi, 4)],
        }
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", help="bench_tracer.py result files with one in_process_ab_* result each")
    ap.add_argument("--out", help="also write the pooled result as JSON here")
    args = ap.parse_args()
    res = pool(args.runs)
    print(f"{res['kind']}: {len(args.runs)} runs, rounds {res['rounds']}")
    for m in MEASURES:
        r = res[m]
        print(
            f"  {m:4s} per run {r['per_run_paired_median']}  pooled {r['pooled_paired_median']}  "
            f"two-stage 95 % {r['ci95_two_stage']}"
        )
    if args.out:
        with open(args.out, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
