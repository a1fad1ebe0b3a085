"""Per-round numbers, paired ratios and the README summary of ``bench_autotune.py`` (pure functions of its result).

Every scenario's result holds ``rounds``: per round, the arms in the order they ran and each arm's numbers
(``rate`` = samples/s over the whole window). From them:

* per-round ratios against the ``untuned`` arm of the same round (``untuned-aa``: the noise floor, ``tuned``,
  ``litdata``), their geometric mean and 95 % bootstrap interval (``_ab.geomean_ci95``);
* the grid's best point, **picked on the odd rounds** (1, 3, 5, ...: highest geometric mean of its rate) and
  **scored on the even rounds** (2, 4, ...), so a point lucky on the rounds that picked it is not also scored
  on them: ``grid_best / untuned`` and ``tuned / grid_best`` use the even rounds only;
* with ``--warmup`` (the convergence allowance), the same pick and score on each arm's rate after it
  (``warm_rate``): ``tuned / grid_best`` once the tuner had that long, beside the whole window's;
* the tuned arm's time to within 5 % of its final throughput (median over rounds);
* the CPU pressure and load average the rounds ran under.
"""

from __future__ import annotations

import datetime
import math
import os
import statistics
import sys
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # also when imported as benchmarks._autotune_report
from _ab import geomean, geomean_ci95  # noqa: E402

__all__ = ["combine_ranks", "evaluate", "final_rate", "pick_grid_best", "summary_rows", "time_to_within"]


def final_rate(bins: list[float], tail: float = 0.3) -> float:
    """Samples/s over the last ``tail`` of the complete seconds of a per-second trace (at least 2 s of it)."""
    full = bins[:-1] if len(bins) > 1 else bins  # the last second is partial
    if not full:
        return 0.0
    k = max(2, math.ceil(len(full) * tail))
    last = full[-k:]
    return sum(last) / len(last)


def time_to_within(bins: list[float], frac: float = 0.95, window: int = 3, tail: float = 0.3) -> float | None:
    """Seconds from the loader's construction until throughput first came within ``1 - frac`` of its final
    value: the end of the first ``window``-second span whose mean reaches ``frac`` of :func:`final_rate`
    (None when no span does). Measured from the start, so it includes start-up and the first batch."""
    full = bins[:-1] if len(bins) > 1 else bins
    target = frac * final_rate(bins, tail)
    if target <= 0:
        return None
    w = max(1, min(window, len(full)))
    for s in range(0, len(full) - w + 1):
        if sum(full[s : s + w]) / w >= target:
            return float(s + w)
    return None


def combine_ranks(ranks: list[dict[str, Any]]) -> dict[str, Any]:
    """One arm's numbers in one round from its ranks' results: throughput summed, per-second traces summed, the
    loop's wait per batch of the rank that waited most (the straggler sets the pace of data-parallel training)."""
    ok = [r for r in ranks if r.get("status") == "ok"]
    if len(ok) != len(ranks):
        bad = next(r for r in ranks if r.get("status") != "ok")
        return {"status": bad.get("status", "error"), "reason": bad.get("reason") or bad.get("error", "")}
    if not all(r["samples_in_window"] for r in ok):  # it ran, but too slowly to start: no rate to pair
        return {
            "status": "no batch in the window",
            "reason": f"first batch at {[r['first_batch_s'] for r in ok]} s",
            "samples": sum(r["samples"] for r in ok),
            "first_batch_s": max(r["first_batch_s"] or math.nan for r in ok),
        }
    n = max(len(r["per_second_samples"]) for r in ok)
    bins = [sum(r["per_second_samples"][i] for r in ok if i < len(r["per_second_samples"])) for i in range(n)]
    out: dict[str, Any] = {
        "status": "ok",
        "rate": sum(r["window_rate"] for r in ok),
        "warm_rate": sum(r["warm_rate"] for r in ok),
        "wait_per_batch_s": max(r["wait_per_batch_s"] for r in ok),
        "first_batch_s": max(r["first_batch_s"] or math.nan for r in ok),
        "epochs": max(r["epochs"] for r in ok),
        "samples_in_window": sum(r["samples_in_window"] for r in ok),
        "per_second_samples": bins,
        "final_rate": final_rate(bins),
        "t_within_5pct_s": time_to_within(bins),
        "num_workers_by_epoch": [e["num_workers"] for e in ok[0].get("epoch_log", [])],
    }
    if len(ok) > 1:
        out["wait_per_batch_s_ranks"] = [r["wait_per_batch_s"] for r in ok]
    mets = [r.get("metrics_end") for r in ok]
    if all(m is not None for m in mets):
        out["knobs_end"] = {k[5:]: v for k, v in mets[0].items() if k.startswith("knob.")}  # type: ignore[union-attr]
        out["metrics_cache_size_bytes"] = max(m["cache_size_bytes"] for m in mets)  # type: ignore[index]
    if ok[0].get("tuner_values") is not None:
        out["tuner_values"] = [r.get("tuner_values") for r in ok]
    if ok[0].get("knobs_over_time"):
        out["knobs_over_time"] = ok[0]["knobs_over_time"]
    for k in ("engine_version", "patch"):
        if ok[0].get(k):
            out[k] = ok[0][k]
    return out


def _rates(rounds: list[dict[str, Any]], arm: str, which: str = "all", key: str = "rate") -> dict[int, float]:
    """Round number (1-based) -> the arm's rate (``key``: ``rate``, the whole window, or ``warm_rate``, after the
    warm-up), for rounds where it ran ok; ``which``: all, odd or even."""
    out = {}
    for i, rd in enumerate(rounds, 1):
        if which == "odd" and i % 2 == 0 or which == "even" and i % 2 == 1:
            continue
        a = rd["arms"].get(arm)
        if a is not None and a.get("status") == "ok" and (a.get(key) or 0) > 0:
            out[i] = float(a[key])
    return out


def pick_grid_best(rounds: list[dict[str, Any]], grid: list[str], key: str = "rate") -> str | None:
    """The grid point with the highest geometric-mean rate over the odd rounds (None without any)."""
    scored = {g: geomean(list(_rates(rounds, g, "odd", key).values())) for g in grid}
    scored = {g: v for g, v in scored.items() if not math.isnan(v)}
    return max(scored, key=lambda g: scored[g]) if scored else None


def _paired(
    rounds: list[dict[str, Any]], num: str, den: str, which: str = "all", key: str = "rate"
) -> dict[str, Any] | None:
    a, b = _rates(rounds, num, which, key), _rates(rounds, den, which, key)
    common = sorted(set(a) & set(b))
    if not common:
        return None
    ratios = [a[i] / b[i] for i in common]
    out = geomean_ci95(ratios)
    out["median"] = round(statistics.median(ratios), 4)  # issue 32 states its grid-best bar as a median
    out["round_numbers"] = common
    return out


def evaluate(sc: dict[str, Any]) -> dict[str, Any]:
    """The paired comparisons of one scenario (see the module docstring)."""
    rounds = sc["rounds"]
    arms = sc["arm_names"]
    grid = [a for a in arms if a.startswith("grid-")]
    ev: dict[str, Any] = {"rounds": len(rounds)}
    for arm in arms:
        r = list(_rates(rounds, arm).values())
        ev.setdefault("rate_median", {})[arm] = round(statistics.median(r), 1) if r else None
        ev.setdefault("rate_geomean", {})[arm] = round(geomean(r), 1) if r else None
    pairs = {"aa": ("untuned-aa", "untuned"), "tuned_vs_untuned": ("tuned", "untuned")}
    if "litdata" in arms:
        pairs["litdata_vs_untuned"] = ("litdata", "untuned")
        pairs["tuned_vs_litdata"] = ("tuned", "litdata")
    for key, (num, den) in pairs.items():
        if num in arms and den in arms:
            ev[key] = _paired(rounds, num, den)
    best = pick_grid_best(rounds, grid)
    ev["grid_best"] = best
    if best is not None:
        odd = _rates(rounds, best, "odd")
        ev["grid_best_odd_rounds_geomean"] = round(geomean(list(odd.values())), 1)
        ev["grid_best_vs_untuned_even"] = _paired(rounds, best, "untuned", "even")
        if "tuned" in arms:
            ev["tuned_vs_grid_best_even"] = _paired(rounds, "tuned", best, "even")
        warm = pick_grid_best(rounds, grid, "warm_rate") if sc.get("warmup_s") else None
        ev["grid_best_warm"] = warm
        if warm is not None and "tuned" in arms:
            ev["tuned_vs_untuned_warm"] = _paired(rounds, "tuned", "untuned", key="warm_rate")
            ev["tuned_vs_grid_best_even_warm"] = _paired(rounds, "tuned", warm, "even", "warm_rate")
            if "litdata" in arms:
                ev["tuned_vs_litdata_warm"] = _paired(rounds, "tuned", "litdata", key="warm_rate")
        # for reference: every grid point against untuned over all rounds (not an unbiased "best")
        ev["grid_vs_untuned_all"] = {g: (p["geomean"] if (p := _paired(rounds, g, "untuned")) else None) for g in grid}
    if "tuned" in arms:
        settle = [
            rd["arms"]["tuned"]["t_within_5pct_s"] for rd in rounds if rd["arms"].get("tuned", {}).get("status") == "ok"
        ]
        have = [s for s in settle if s is not None]
        ev["tuned_t_within_5pct_s_median"] = statistics.median(have) if have else None
        ev["tuned_t_within_5pct_s_all"] = settle
    press = [rd["pressure"].get("cpu_some_pct") for rd in rounds if rd.get("pressure")]
    press = [p for p in press if p is not None]
    loads = [rd["pressure"]["load_end"][0] for rd in rounds if rd.get("pressure")]
    ev["cpu_pressure_pct"] = _spread(press)
    ev["load_avg_1m"] = _spread(loads)
    failed = {arm: sum(1 for rd in rounds if rd["arms"].get(arm, {}).get("status") != "ok") for arm in arms}
    ev["failed_runs"] = {k: v for k, v in failed.items() if v}
    return ev


def _spread(xs: list[float]) -> dict[str, float] | None:
    if not xs:
        return None
    return {"min": round(min(xs), 2), "median": round(statistics.median(xs), 2), "max": round(max(xs), 2)}


def _ci(p: dict[str, Any] | None) -> str | None:
    if not p or math.isnan(p["geomean"]):
        return None
    lo, hi = p["ci95"]
    return f"{p['geomean']:.3f} ({lo:.3f}-{hi:.3f}, n={p['rounds']})"


def run_of(meta: dict[str, Any], argv: list[str], written_at: str | None = None) -> dict[str, Any]:
    """What a scenario carries of the run that measured it (a result file may hold scenarios of several runs)."""
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "commit": meta.get("commit"),
        "dirty": meta.get("dirty"),
        "written_at": written_at or meta.get("written_at") or now,
        "argv": list(argv),
    }


def kept_scenarios(doc: dict[str, Any], rerun: list[str]) -> dict[str, Any]:
    """The scenarios of an earlier result file ``doc`` that this run does not re-run, each with its own run (a
    scenario of a file written before scenarios carried one takes the file's)."""
    meta = doc.get("meta") or {}
    out = {}
    for name, sc in (doc.get("result") or {}).get("scenarios", {}).items():
        if name not in rerun:
            out[name] = {**sc, "run": sc.get("run") or run_of(meta, meta.get("argv") or [])}
    return out


def summary_rows(result: dict[str, Any]) -> list[dict[str, Any]]:
    """One README row per scenario: the paired ratios with their intervals, the noise floor, the load."""
    rows = []
    for name, sc in result["scenarios"].items():
        ev = sc.get("evaluation") or {}
        med = ev.get("rate_median", {})
        press, load = ev.get("cpu_pressure_pct") or {}, ev.get("load_avg_1m") or {}
        rows.append(
            {
                "scenario": name,
                "code at": str((sc.get("run") or {}).get("commit") or "")[:9] or None,
                "rounds": ev.get("rounds"),
                "window s": sc.get("window_s"),
                "untuned samples/s (median)": med.get("untuned"),
                "A/A untuned/untuned": _ci(ev.get("aa")),
                "tuned / untuned": _ci(ev.get("tuned_vs_untuned")),
                "grid best (odd rounds)": ev.get("grid_best"),
                "grid best / untuned (even)": _ci(ev.get("grid_best_vs_untuned_even")),
                "tuned / grid best (even)": _ci(ev.get("tuned_vs_grid_best_even")),
                "after the warm-up (s)": sc.get("warmup_s") or None,
                "tuned / untuned after it": _ci(ev.get("tuned_vs_untuned_warm")),
                "tuned / grid best after it (even)": _ci(ev.get("tuned_vs_grid_best_even_warm")),
                "median of those rounds": (ev.get("tuned_vs_grid_best_even_warm") or {}).get("median"),
                "LitData / untuned": _ci(ev.get("litdata_vs_untuned")),
                "tuned / LitData": _ci(ev.get("tuned_vs_litdata")),
                "tuned / LitData after the warm-up": _ci(ev.get("tuned_vs_litdata_warm")),
                "tuned: s to within 5% (median)": ev.get("tuned_t_within_5pct_s_median"),
                "CPU pressure % (median, max)": f"{press['median']:.0f}, {press['max']:.0f}" if press else None,
                "load 1m (median, max)": f"{load['median']:.1f}, {load['max']:.1f}" if load else None,
                # runs left out of the pairs (no batch within the window, an error): a slow start is not hidden
                "runs left out": ", ".join(f"{k} {v}" for k, v in (ev.get("failed_runs") or {}).items()) or None,
            }
        )
    return rows
