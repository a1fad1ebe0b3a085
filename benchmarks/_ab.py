"""Pieces of the paired A/B protocol the benchmarks share (bench_tracer.py, bench_autotune.py).

* :func:`bootstrap_ci95`: the 95 % percentile-bootstrap interval of a statistic of paired per-round values
  (resampling the rounds: each round's ratio was taken under the machine's load of that moment, so the rounds
  are the independent units);
* :func:`geomean` / :func:`geomean_ci95`: the geometric mean of per-round ratios and its interval (a ratio of
  speeds: 2x and 0.5x average to 1, which the arithmetic mean would not give);
* :func:`abba_orders`: per round, the order the arms run in: a random permutation, then the same reversed on the
  next round (A-B-B-A generalised to n arms), so no arm always runs first or always after the same one, and a
  drift of the machine within two rounds falls on every arm alike;
* :func:`cpu_pressure` / :class:`Pressure`: the kernel's CPU pressure (``/proc/pressure/cpu``, the share of time
  some runnable task waited for a core) and the load average, read around each round: how loaded the shared
  machine was while the round ran.
"""

from __future__ import annotations

import math
import os
import random
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

__all__ = [
    "Pressure",
    "abba_orders",
    "bootstrap_ci95",
    "cpu_pressure",
    "geomean",
    "geomean_ci95",
]

PRESSURE_FILE = "/proc/pressure/cpu"


def bootstrap_ci95(
    values: Sequence[float],
    stat: Callable[[Sequence[float]], float] = statistics.median,
    draws: int = 2000,
    seed: int = 0,
) -> list[float]:
    """95 % percentile-bootstrap interval of ``stat`` over ``values`` (resampled with replacement), 4 decimals."""
    if not values:
        return [math.nan, math.nan]
    rng = random.Random(seed)
    est = sorted(stat(rng.choices(values, k=len(values))) for _ in range(draws))
    lo, hi = est[int(0.025 * draws)], est[int(0.975 * draws) - 1]
    return [round(lo, 4), round(hi, 4)]


def geomean(values: Sequence[float]) -> float:
    """Geometric mean of positive ``values`` (nan when empty or when one is not positive)."""
    if not values or any(not v > 0 for v in values):
        return math.nan
    return math.exp(sum(math.log(v) for v in values) / len(values))


def geomean_ci95(ratios: Sequence[float], draws: int = 2000, seed: int = 0) -> dict[str, Any]:
    """Geometric mean of per-round ``ratios`` with its 95 % bootstrap interval and the rounds it rests on."""
    return {
        "geomean": round(geomean(ratios), 4),
        "ci95": bootstrap_ci95(ratios, geomean, draws, seed),
        "rounds": len(ratios),
        "ratios": [round(r, 4) for r in ratios],
    }


def abba_orders(arms: Sequence[str], rounds: int, seed: int = 0) -> list[list[str]]:
    """The arms' order in each of ``rounds`` rounds: a random permutation, then its reverse, and again."""
    rng = random.Random(seed)
    out: list[list[str]] = []
    for r in range(rounds):
        if r % 2 == 0:
            order = list(arms)
            rng.shuffle(order)
        else:
            order = list(reversed(out[-1]))
        out.append(order)
    return out


def cpu_pressure(path: str = PRESSURE_FILE) -> dict[str, float] | None:
    """``/proc/pressure/cpu``'s ``some`` line: ``avg10`` (%) and ``total`` (microseconds); None without PSI."""
    try:
        with open(path, encoding="ascii") as f:
            for line in f:
                if line.startswith("some "):
                    fields = dict(kv.split("=", 1) for kv in line.split()[1:])
                    return {"avg10": float(fields["avg10"]), "total_us": float(fields["total"])}
    except (OSError, KeyError, ValueError):
        return None
    return None


class Pressure:
    """CPU pressure and load over a span of time (a round): ``start()`` then ``stop()`` -> a JSON-able dict."""

    def __init__(self, path: str = PRESSURE_FILE) -> None:
        self.path = path
        self._t0 = 0.0
        self._p0: dict[str, float] | None = None
        self._load0: list[float] = []

    def start(self) -> Pressure:
        self._t0 = time.monotonic()
        self._p0 = cpu_pressure(self.path)
        self._load0 = [round(x, 2) for x in os.getloadavg()]
        return self

    def stop(self) -> dict[str, Any]:
        wall = time.monotonic() - self._t0
        p1 = cpu_pressure(self.path)
        out: dict[str, Any] = {
            "wall_s": round(wall, 2),
            "load_start": self._load0,
            "load_end": [round(x, 2) for x in os.getloadavg()],
        }
        if self._p0 is not None and p1 is not None and wall > 0:
            # the share of this span's wall time in which some runnable task waited for a CPU
            out["cpu_some_pct"] = round(100.0 * (p1["total_us"] - self._p0["total_us"]) / 1e6 / wall, 2)
            out["cpu_some_avg10_end"] = p1["avg10"]
        return out
