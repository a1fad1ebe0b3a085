"""Pure policies of raw-file streaming: download concurrency, batch time budget, look-ahead prediction.

No I/O here, so each rule is tested directly.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

__all__ = [
    "ConcurrencyGovernor",
    "DEFAULT_MEDIAN_BYTES",
    "LookAhead",
    "adaptive_concurrency",
    "batch_budget",
    "effective_prefetch",
    "median_size",
]


_MIB = 1024 * 1024
DEFAULT_MEDIAN_BYTES = 256 * 1024


def median_size(sizes: Sequence[int]) -> int:
    """Median of the positive sizes (256 KiB when there are none)."""
    positive = [s for s in sizes if s > 0]
    return int(statistics.median(positive)) if positive else DEFAULT_MEDIAN_BYTES


def adaptive_concurrency(median_bytes: int, num_workers: int) -> int:
    """In-flight GETs per process when the user gave no number.

    The same rule as LitData: aim for 50 MiB/s in flight per ``median_bytes`` object, with at least 240 for
    objects under 1 MiB (request latency, not bandwidth, bounds small files), clamped to 32..512 for the
    whole loader; one process takes at most 128, ``W`` workers split the budget with a floor of 8 each.
    """
    median_bytes = max(1, median_bytes)
    budget = int(100 * _MIB * 0.5 // median_bytes)
    if median_bytes < _MIB:
        budget = max(budget, 240)
    budget = min(max(budget, 32), 512)
    if num_workers <= 1:
        return min(budget, 128)
    return max(8, budget // num_workers)


def effective_prefetch(max_prefetch: int, num_workers: int) -> int:
    """Per-worker look-ahead: ``max_prefetch``, capped so all workers together hold about 64 items."""
    if max_prefetch <= 0:
        return 0
    if num_workers <= 1:
        return max_prefetch
    return max(1, min(max_prefetch, 64 // num_workers))


def batch_budget(sizes: Sequence[int], download_timeout: float, min_throughput: float) -> float | None:
    """Seconds a batch of objects of ``sizes`` may take before it is declared stuck (None: no limit).

    At least ``download_timeout``; more for big objects (3x their time at ``min_throughput``) and for big
    batches (3x the whole batch's time at ``min_throughput``).
    """
    if download_timeout <= 0:
        return None
    per_item = max((3.0 * s / min_throughput for s in sizes), default=0.0)
    whole = 3.0 * sum(sizes) / min_throughput
    return max(download_timeout, per_item, whole)


class LookAhead:
    """Predicts the next indices one DataLoader worker will be asked for, from its own history.

    With a map-style dataset and a sequential (batch) sampler, torch hands batch ``k`` to worker
    ``k % W``, so one worker sees contiguous runs ``[s, s+n)`` whose starts advance by ``W*n``. The stride is
    learned from the last two contiguous runs; before there are two, it is guessed as ``W*n``. A batch that is
    not a contiguous ascending run (a shuffled sampler) predicts nothing.
    """

    def __init__(self) -> None:
        self.last_start: int | None = None
        self.stride: int | None = None

    def observe(self, indices: Sequence[int], num_workers: int, length: int, budget: int) -> list[int]:
        """Record a batch; return up to ``budget`` indices (< ``length``) this worker is likely to need next."""
        n = len(indices)
        if n == 0:
            return []
        start = indices[0]
        contiguous = all(indices[i] == start + i for i in range(n))
        if not contiguous:
            self.last_start = None
            self.stride = None
            return []
        if self.last_start is not None and start > self.last_start:
            self.stride = start - self.last_start
        elif self.stride is None or (self.last_start is not None and start <= self.last_start):
            self.stride = max(1, num_workers) * n
        self.last_start = start
        if budget <= 0:
            return []
        stride = max(self.stride, n)
        out: list[int] = []
        nxt = start + stride
        while len(out) < budget and nxt < length:
            take = min(n, budget - len(out), length - nxt)
            out.extend(range(nxt, nxt + take))
            nxt += stride
        return out


class ConcurrencyGovernor:
    """Adaptive in-flight GET limit from measured latency (a gradient limiter, like TCP Vegas).

    Little's law says throughput = in-flight / latency, so more concurrency helps only while latency stays
    flat. Each update compares the median GET latency since the last update with the best median of the
    last ``window`` updates (the baseline): while latency stays within ``tolerance`` x the baseline the limit
    grows by ``sqrt(limit)``; beyond that the server (or our CPU) is saturated and the limit shrinks in
    proportion (at most by half per update). The limit stays within ``[floor, cap]``; ``cap`` is the static
    size-based default. The long window keeps the baseline from drifting up under sustained overload.
    """

    def __init__(self, cap: int, floor: int = 4, start: int = 32, tolerance: float = 1.5, window: int = 500) -> None:
        self.cap = max(1, cap)
        self.floor = max(1, min(floor, self.cap))
        self.limit = float(min(self.cap, max(self.floor, start)))
        self.tolerance = tolerance
        self._medians: list[float] = []
        self._window = window

    def update(self, latencies: Sequence[float], cap: int | None = None) -> int:
        """Feed the GET latencies (seconds) seen since the last call; return the new limit."""
        if cap is not None:
            self.cap = max(1, cap)
            self.floor = min(self.floor, self.cap)
        if len(latencies) >= 4:
            current = statistics.median(latencies)
            self._medians.append(current)
            del self._medians[: -self._window]
            baseline = min(self._medians)
            gradient = min(1.0, max(0.5, self.tolerance * baseline / max(current, 1e-9)))
            if gradient >= 1.0:
                self.limit += self.limit**0.5
            else:
                self.limit *= gradient
        self.limit = min(float(self.cap), max(float(self.floor), self.limit))
        return int(self.limit)
