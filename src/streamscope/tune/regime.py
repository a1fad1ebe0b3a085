"""A regime change: the step or the download latency moving beyond the noise at one configuration, or a loop that
did not wait starting to. It re-opens the tuner's search (what was rejected before may work now)."""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

from streamscope.tune.model import Estimates
from streamscope.tune.signals import Window

__all__ = ["REGIME", "RegimeWatch"]

#: A step or latency that moves by this much (relative; the latency twice this) for three windows at the same
#: configuration is a new regime.
REGIME = 0.3


@dataclass
class RegimeWatch:
    """Compares merged windows with the reference (the estimates the last decision was made from).

    ``windows``: how many merged windows in a row must have moved (and how many the step's noise is merged over).
    """

    windows: int
    ref: Estimates | None = None
    drift: int = 0
    steps: deque[float] = field(default_factory=lambda: deque(maxlen=30))  # log step of stable windows

    def reference(self, e: Estimates) -> None:
        """A decision was made from ``e``: it is the regime's reference."""
        self.ref = e
        self.drift = 0

    def changed(self, e: Window, last_step: float, wait_share: float) -> str | None:
        """Feed the merge ``e`` of the latest windows (the last one's step ``last_step``); the reason when the
        regime has changed (moved for ``windows`` merges in a row), else None. ``wait_share``: the share of its
        time below which the loop counts as not waiting."""
        steps = self.steps
        steps.append(math.log(max(last_step, 1e-7)))
        ref = self.ref
        if ref is None:
            return None
        # a move beyond the noise: REGIME, or three standard errors of a merge of the windows
        n = len(steps)
        sd = math.sqrt(sum((x - sum(steps) / n) ** 2 for x in steps) / (n - 1)) if n > 2 else 0.0
        limit = max(REGIME, 3 * sd / math.sqrt(self.windows))
        moved = abs(math.log(max(e.step, 1e-7) / max(ref.step, 1e-7))) > math.log1p(limit)
        if e.latency > 0 and ref.latency > 0 and e.retries == 0:
            r = e.latency / ref.latency
            moved = moved or r > 1 + 2 * REGIME or r < 1 / (1 + 2 * REGIME)
        # a loop that did not wait and now does (a loop that waited is judged by its step and latency)
        moved = moved or (ref.steady_share < wait_share and e.steady_wait_share >= 3 * wait_share)
        self.drift = self.drift + 1 if moved else 0
        if self.drift < self.windows:
            return None
        return (
            f"a new regime: step {ref.step * 1e3:.2f} -> {e.step * 1e3:.2f} ms, latency {ref.latency * 1e3:.0f} -> "
            f"{e.latency * 1e3:.0f} ms, wait share {ref.wait_share:.1%} -> {e.wait_share:.1%}"
        )
