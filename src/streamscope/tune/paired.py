"""Paired verification: a candidate against the incumbent in interleaved windows, judged by a sequential test.

Live knobs (:class:`Paired`): blocks of four windows in the order A-B-B-A (A the incumbent, B the candidate). A
drift that is linear over a block cancels in ``(B1 + B2) / (A1 + A2)``; each block gives one paired log-ratio of
the loop's period per batch. After each block, the mean log-ratio and its standard error (the block's spread,
pooled with what earlier trials measured of the same rig's noise, see :class:`Noise`) give a t-interval of the
gain; the candidate is adopted when the interval's lower bound is above :data:`MIN_GAIN` (after one block only for
a gain of at least :data:`ONE_BLOCK`: the first move of a latency-bound run, 2-3x, need not wait for a second
block), rejected as soon as its upper bound is below it, and rejected after :data:`MAX_BLOCKS` blocks otherwise. A
first block that is worse by more than :data:`CUT` rejects at once (the probing cost is capped).

``num_workers`` changes only at an epoch's start, so its check is the same A-B-B-A over whole epochs
(see :class:`EpochPaired` and the README for why this, and not a comparison across two epochs).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

__all__ = ["CUT", "MAX_BLOCKS", "MIN_GAIN", "ONE_BLOCK", "Noise", "Paired", "t95"]

#: The gain a candidate must show beyond doubt (the interval's lower bound), relative.
MIN_GAIN = 0.01
#: Blocks a trial runs at most.
MAX_BLOCKS = 5
#: A single block adopts a candidate only when it gains at least this much (relative) and its interval's lower bound
#: clears the minimum gain: with the prior's one degree of freedom that takes about 48% (t 12.7 x 0.05), and a
#: smaller gain waits for a second block whatever the rig's learnt noise says.
ONE_BLOCK = 0.2
#: A first block this much worse (relative) rejects at once.
CUT = 0.08
#: The spread assumed of one block's log-ratio before any is measured.
PRIOR_SD = 0.05
#: Degrees of freedom the prior counts for.
PRIOR_DF = 1

_T95 = (12.71, 4.30, 3.18, 2.78, 2.57, 2.45, 2.36, 2.31, 2.26, 2.23, 2.20, 2.18, 2.16, 2.14, 2.13)


def t95(df: int) -> float:
    """Two-sided 95% Student t quantile (one-sided 97.5%)."""
    if df <= 0:
        return math.inf
    return _T95[df - 1] if df <= len(_T95) else 1.96 + 2.4 / df


@dataclass
class Noise:
    """The spread of paired log-ratios measured so far on this rig (pooled over trials, within one regime)."""

    ss: float = PRIOR_SD**2 * PRIOR_DF
    df: int = PRIOR_DF

    def add(self, ss: float, df: int) -> None:
        self.ss += ss
        self.df += df

    @property
    def sd(self) -> float:
        return math.sqrt(self.ss / self.df)


@dataclass
class Paired:
    """One candidate's sequential test (see the module docstring)."""

    noise: Noise
    min_gain: float = MIN_GAIN  # the knob autotune_min_gain
    ratios: list[float] = field(default_factory=list)  # per block: log(B / A) of the period

    def add(self, a: float, b: float) -> None:
        """A block's incumbent and candidate periods (each the sum over its two windows)."""
        self.ratios.append(math.log(b / a) if a > 0 and b > 0 else 0.0)

    def interval(self) -> tuple[float, float, float]:
        """(gain, lower, upper): the candidate's relative gain and its 95% interval."""
        n = len(self.ratios)
        m = sum(self.ratios) / n if n else 0.0
        ss = sum((r - m) ** 2 for r in self.ratios)
        df = self.noise.df + max(0, n - 1)
        sd = math.sqrt((self.noise.ss + ss) / df)
        h = t95(df) * sd / math.sqrt(max(1, n))
        g = -m
        return 1 - math.exp(-g), 1 - math.exp(-(g - h)), 1 - math.exp(-(g + h))

    def verdict(self) -> str | None:
        """``adopt``, ``reject`` or None (another block)."""
        n = len(self.ratios)
        if not n:
            return None
        gain, lo, hi = self.interval()
        if n == 1 and gain < -CUT:
            return "reject"
        if lo > self.min_gain and (n >= 2 or gain >= ONE_BLOCK):
            return "adopt"
        if hi < self.min_gain:
            return "reject"
        if n >= MAX_BLOCKS:
            return "reject"
        return None

    def learnt(self) -> tuple[float, int]:
        """(sum of squares, degrees of freedom) this trial adds to the rig's noise."""
        n = len(self.ratios)
        if n < 2:
            return 0.0, 0
        m = sum(self.ratios) / n
        return sum((r - m) ** 2 for r in self.ratios), n - 1
