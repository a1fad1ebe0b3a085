"""What the tuner measures: cumulative readings of the merged metrics, and windows between two of them.

A :class:`Reading` holds the run's counters at one moment (``streamscope.events.metrics_view()``, read without
side effects). The loop's wait is the ``streamscope.loader.wait.duration`` histogram's sum, as of the main
process's last flusher tick (the view lags the loop by up to one ``metrics_interval``); the batches are
``streamscope.loader.batches``, read live. The histogram's count is no batch count: the loop waits once per worker
message, and a worker sends its batches in groups; it only tells whether the wait has ticked since the last
reading. A :class:`Window` is the difference of two readings; a :class:`Measure` is a run of consecutive windows
(one per reading), whose spread says how noisy the wait is. The lag between the two sources shifts a window's wait
by up to one tick against its batches; in a steady state that cancels, and the controller skips the readings just
after a move (see :mod:`streamscope.tune.controller`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from streamscope.events.registry import STAGES, M

__all__ = ["CPU_STAGES", "Measure", "Reading", "Window", "read_view", "window"]


#: Stages of the wait split whose cure is more CPU in the workers (decoding, decompressing, reading chunks).
CPU_STAGES = ("decode", "decompress", "read")


@dataclass(frozen=True)
class Reading:
    """The run's cumulative counters at monotonic time ``t`` (seconds)."""

    t: float
    waits: int = 0  # batches handed to the loop (the wait's denominator)
    wait_s: float = 0.0  # the loop's wait, total seconds
    stages: dict[str, float] = field(default_factory=dict)  # the wait split, cumulative seconds
    downloads: int = 0  # chunk downloads finished
    download_s: float = 0.0  # their total time
    cache_bytes: float = 0.0
    evictions: float = 0.0
    stalls: int = -1  # the wait histogram's count: changes when the wait ticked (-1: same as ``waits``)

    @property
    def ticks(self) -> int:
        return self.waits if self.stalls < 0 else self.stalls


def read_view(view: Any, t: float) -> Reading:
    """A :class:`Reading` from a ``MetricsView`` taken at monotonic time ``t``."""
    h = view.histogram(M.LOADER_WAIT_DURATION)
    dl = view.histogram(M.DOWNLOAD_DURATION)
    return Reading(
        t=t,
        waits=int(view.value(M.LOADER_BATCHES)),
        wait_s=float(h.sum),
        stalls=int(h.count),
        stages={s: float(view.value(M.LOADER_WAIT_STAGE, stage=s)) for s in STAGES},
        downloads=int(dl.count),
        download_s=float(dl.sum),
        cache_bytes=float(view.value(M.CACHE_SIZE)),
        evictions=float(view.value(M.CACHE_EVICTIONS)),
    )


@dataclass(frozen=True)
class Window:
    """What happened between two readings."""

    t0: float
    t1: float
    waits: int
    wait_s: float
    stages: dict[str, float]
    downloads: int
    download_s: float

    @property
    def seconds(self) -> float:
        return max(0.0, self.t1 - self.t0)

    @property
    def wait_per_batch(self) -> float:
        """The objective: seconds the loop waited per batch (0 without batches)."""
        return self.wait_s / self.waits if self.waits else 0.0

    @property
    def period(self) -> float:
        """Seconds per batch of the loop (its wait and its own step)."""
        return self.seconds / self.waits if self.waits else math.inf

    @property
    def step(self) -> float:
        """The loop's own time per batch (the training step): the period less the wait."""
        return max(0.0, self.period - self.wait_per_batch) if self.waits else 0.0

    @property
    def input_bound(self) -> float:
        """Share of the loop's time spent waiting for data (0..1)."""
        p = self.period
        return min(1.0, self.wait_per_batch / p) if self.waits and p > 0 else 0.0

    def shares(self) -> dict[str, float]:
        """Each stage's share of the wait (they sum to 1; all 0 without a wait)."""
        pos = {s: max(0.0, v) for s, v in self.stages.items()}
        total = sum(pos.values())
        if total <= 0:
            return {s: 0.0 for s in STAGES}
        return {s: pos.get(s, 0.0) / total for s in STAGES}

    def causes(self) -> dict[str, float]:
        """The wait's shares by cure: ``download`` (more downloads at once), ``cpu`` (decode, decompress and
        read: more workers), ``idle`` (the workers did nothing the split can name: deeper prefetch)."""
        sh = self.shares()
        return {"download": sh["download"], "cpu": sum(sh[s] for s in CPU_STAGES), "idle": sh["idle"]}

    def dominant(self) -> tuple[str, float]:
        """The cause the wait was mostly spent on (see :meth:`causes`) and its share."""
        c = self.causes()
        k = max(c, key=lambda x: c[x])
        return k, c[k]

    @property
    def download_latency(self) -> float:
        """Mean seconds per chunk download in the window (0 without downloads)."""
        return self.download_s / self.downloads if self.downloads else 0.0


def window(a: Reading, b: Reading) -> Window:
    return Window(
        t0=a.t,
        t1=b.t,
        waits=max(0, b.waits - a.waits),
        wait_s=max(0.0, b.wait_s - a.wait_s),
        stages={s: b.stages.get(s, 0.0) - a.stages.get(s, 0.0) for s in STAGES},
        downloads=max(0, b.downloads - a.downloads),
        download_s=max(0.0, b.download_s - a.download_s),
    )


@dataclass
class Measure:
    """Consecutive windows of one configuration (one per reading), summed."""

    parts: list[Window] = field(default_factory=list)

    def add(self, w: Window) -> None:
        self.parts.append(w)

    @property
    def total(self) -> Window:
        ps = self.parts
        if not ps:
            return Window(0.0, 0.0, 0, 0.0, {s: 0.0 for s in STAGES}, 0, 0.0)
        return Window(
            t0=ps[0].t0,
            t1=ps[-1].t1,
            waits=sum(p.waits for p in ps),
            wait_s=sum(p.wait_s for p in ps),
            stages={s: sum(p.stages.get(s, 0.0) for p in ps) for s in STAGES},
            downloads=sum(p.downloads for p in ps),
            download_s=sum(p.download_s for p in ps),
        )

    @property
    def seconds(self) -> float:
        return self.total.seconds

    @property
    def waits(self) -> int:
        return sum(p.waits for p in self.parts)

    def rel_error(self) -> float:
        """Relative standard error of the wait per batch, from the spread of the windows' values (weighted by
        their batches); 0.25 when there are too few windows to tell."""
        vals = [(p.wait_per_batch, p.waits) for p in self.parts if p.waits]
        n = len(vals)
        total = sum(w for _, w in vals)
        if n < 2 or total <= 0:
            return 0.25
        mean = sum(v * w for v, w in vals) / total
        if mean <= 0:
            return 0.0
        var = sum(w * (v - mean) ** 2 for v, w in vals) / total
        return math.sqrt(var / (n - 1)) / mean
