"""How fast the tuner settles on the simulator: the time until the throughput of the configuration in place stays
within 5% of its final (the mean over the run's last minute), per scenario over seeds. Deliverable 8 of issue 32
asks for under 30 s on the real benchmark; this is the simulator's side of it (no noise in the throughput read
here: the configuration's own rate from the model of ``world.py``, so a candidate's arm that runs worse counts).

    python -m tests.tune.sim.convergence [scenario ...] [--seeds N]
"""

from __future__ import annotations

import argparse

import numpy as np

from tests.tune.sim import world as W
from tests.tune.sim.scenarios import SCENARIOS

__all__ = ["settle_time"]


def settle_time(name: str, seed: int) -> float:
    """Seconds until the configuration's rate stays within 5% of the final one (inf: never)."""
    w, _kind = SCENARIOS[name]
    h = W.run_tuned(w, seed, history=True).history
    rates = [1.0 / W._period(w, w.step, w.w0, c, d, wk, 1.0, W._Scalar)[0] for _t, c, d, wk in h]
    final = float(np.mean(rates[-int(60 / W.DT) :]))
    bad = [i for i, x in enumerate(rates) if x < 0.95 * final]
    if not bad:
        return 0.0
    return h[bad[-1] + 1][0] if bad[-1] + 1 < len(h) else float("inf")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("scenarios", nargs="*", default=[n for n, (_w, k) in SCENARIOS.items() if k == "bound"])
    ap.add_argument("--seeds", type=int, default=40)
    args = ap.parse_args()
    for name in args.scenarios:
        a = np.array([settle_time(name, s) for s in range(args.seeds)])
        print(
            f"{name:16s} seeds 0-{args.seeds - 1}  within 5% of final after: median {np.median(a):.0f} s  "
            f"p90 {np.percentile(a, 90):.0f} s  max {a.max():.0f} s  P(<30 s) {np.mean(a < 30):.2f}"
        )


if __name__ == "__main__":
    main()
