"""Per-epoch totals the tuner keeps (seconds, batches, workers) and how much consecutive epochs of one configuration
differ: the yardstick of a ``num_workers`` check, which only an epoch's start can apply."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from streamscope.tune.paired import Noise
from streamscope.tune.signals import Window

__all__ = ["EPOCH_NOISE", "EpochBook"]

#: Relative spread assumed of an epoch's period before two epochs of one configuration were measured.
EPOCH_NOISE = 0.03
#: Epochs kept (the oldest goes).
KEPT = 64


@dataclass
class EpochBook:
    """``epoch -> [seconds, batches, workers, counted from its start]`` and the epoch-to-epoch noise."""

    epochs: dict[int, list[float]] = field(default_factory=dict)
    noise: Noise = field(default_factory=lambda: Noise(EPOCH_NOISE**2, 1))

    def count(self, w: Window, e0: int, e1: int, workers: int, moved_epoch: int) -> None:
        """Add window ``w`` (from epoch ``e0`` to ``e1``): a window across an epoch's start counts for the new one.
        ``moved_epoch``: the last epoch in which the tuner moved a knob."""
        rec = self.epochs.get(e1)
        if rec is None:
            # two whole epochs before it, of one configuration and no move, tell how much consecutive epochs
            # differ (drift included)
            rec = self.epochs[e1] = [
                0.0,
                0.0,
                float(workers),
                float(e0 != e1 and e0 in self.epochs or not self.epochs and e1 <= 1),
            ]
            a, b = self.epochs.get(e1 - 2), self.epochs.get(e1 - 1)
            if a and b and a[3] and b[3] and a[2] == b[2] and moved_epoch < e1 - 2 and a[1] > 0 and b[1] > 0:
                self.noise.add(math.log((b[0] / b[1]) / (a[0] / a[1])) ** 2 / 2, 1)
        rec[0] += w.seconds
        rec[1] += w.batches
        if len(self.epochs) > KEPT:
            del self.epochs[min(self.epochs)]

    def exact(self, e: int, seconds: float, batches: int) -> None:
        """Epoch ``e``'s exact time and batches (the target's record, once the loop is done with it), in place of
        what its windows summed: a window across an epoch's edge counts wholly for the new epoch, which for epochs
        of a few windows errs by a window's share (measured: 2 s then 3 s for epochs of 2.5 s)."""
        rec = self.epochs.get(e)
        if rec is not None and batches > 0 and seconds > 0:
            rec[0], rec[1], rec[3] = seconds, float(batches), 1.0

    def since_start(self, e: int) -> bool:
        """Epoch ``e`` was counted from its start."""
        rec = self.epochs.get(e)
        return rec is not None and rec[3] > 0

    def period(self, e: int) -> float:
        """Seconds per batch of epoch ``e`` (0: none counted)."""
        rec = self.epochs.get(e)
        return rec[0] / rec[1] if rec and rec[1] > 0 else 0.0

    def seconds(self, e: int) -> float:
        rec = self.epochs.get(e)
        return rec[0] if rec else 0.0

    def batches(self, e: int) -> int:
        rec = self.epochs.get(e)
        return int(rec[1]) if rec else 0

    def a_b(self, e0: int) -> tuple[float, float, float] | None:
        """After one epoch of each (``e0`` the incumbent's, ``e0 + 1`` the candidate's): the candidate's gain in
        throughput and its bounds at three standard deviations of consecutive epochs (drift included), or None."""
        return self.a_b_periods(self.period(e0), self.period(e0 + 1))

    def a_b_periods(self, pa: float, pb: float) -> tuple[float, float, float] | None:
        """:meth:`a_b` for two periods of whole epochs (seconds per batch), the incumbent's ``pa``."""
        if pa <= 0 or pb <= 0:
            return None
        r = math.log(pb / pa)
        se = self.noise.sd * math.sqrt(2)
        return 1 - math.exp(r), 1 - math.exp(r + 3 * se), 1 - math.exp(r - 3 * se)

    def a_b_b_a(self, e0: int) -> tuple[float, float, float] | None:
        """Epochs ``e0`` and ``e0 + 3`` the incumbent's, ``e0 + 1`` and ``e0 + 2`` the candidate's: the gain and its
        95% bounds, or None when an epoch had no batches. The incumbent's two epochs add to the noise."""
        a = [self.period(e0), self.period(e0 + 3)]
        b = [self.period(e0 + 1), self.period(e0 + 2)]
        if min(a + b) <= 0:
            return None
        self.noise.add(math.log(a[1] / a[0]) ** 2 / 2, 1)
        r = math.log(sum(b) / sum(a))
        se = self.noise.sd
        return 1 - math.exp(r), 1 - math.exp(r + 2 * se), 1 - math.exp(r - 2 * se)
