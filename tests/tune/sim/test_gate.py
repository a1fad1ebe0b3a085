"""The CI gate of the tuner on the simulator: the real controller, 1,000 seeds per scenario (tests/tune/sim/world.py).

Where nothing can be gained: median tuned / untuned >= 0.99 and P(tuned / untuned < 0.97) <= 2%. Where latency or
decoding bounds the loop: median tuned / best static >= 0.95 (the best of a grid of the tuner's reachable space, in
the same simulator, with the same random draws). The table (seeds, median, 2nd percentile, P < 0.97) is printed at
the end of the pytest run (tests/tune/gate_report.py: also under xdist, as ``./run.sh test`` runs it).
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.tune.gate_report import table_path
from tests.tune.sim.scenarios import SCENARIOS
from tests.tune.sim.world import grid, run_tuned, static_grid, untuned

SEEDS = range(1000)
#: Scenarios whose gate the tuner does not meet yet (the measured value is in the table): strict, so that meeting
#: it fails the test until the mark goes.
NOT_MET: dict[str, str] = {}


def _ratios(name: str) -> tuple[np.ndarray, str]:
    w, kind = SCENARIOS[name]
    seeds = list(SEEDS)
    ref = static_grid(w, seeds, *untuned(w))[:, 0] if kind == "flat" else static_grid(w, seeds, *grid(w)).max(axis=1)
    tuned = np.array([run_tuned(w, s).batches for s in seeds])
    return tuned / ref, kind


def _row(name: str, r: np.ndarray, kind: str, ok: bool) -> str:
    what = "tuned/untuned" if kind == "flat" else "tuned/best-static"
    return (
        f"{name:18} {what:18} seeds {SEEDS.start}-{SEEDS.stop - 1}  median {np.median(r):.3f}  "
        f"p2 {np.quantile(r, 0.02):.3f}  min {r.min():.3f}  P(<0.97) {np.mean(r < 0.97):.3f}  "
        f"{'ok' if ok else 'NOT MET'}"
    )


@pytest.mark.parametrize(
    "name",
    [
        pytest.param(n, marks=pytest.mark.xfail(reason=NOT_MET[n], strict=True)) if n in NOT_MET else n
        for n in SCENARIOS
    ],
)
# a fixed amount of CPU (15-40 s a scenario on a quiet core); on a machine at load 18 one scenario took 229 s of
# wall time, close to the suite's 300 s hang guard: this guard is for a hang, not for the machine's speed
@pytest.mark.timeout(1800)
def test_gate(name: str) -> None:
    r, kind = _ratios(name)
    if kind == "flat":
        ok = bool(np.median(r) >= 0.99 and np.mean(r < 0.97) <= 0.02)
    else:
        ok = bool(np.median(r) >= 0.95)
    line = _row(name, r, kind, ok)
    print("\n" + line)
    with open(table_path(), "a") as f:
        f.write(line + "\n")
    assert ok, line
