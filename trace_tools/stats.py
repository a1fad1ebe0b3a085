"""Bounded-memory latency statistics: a log-bucketed histogram with exact count, total, min and max.

Percentiles come from buckets 2**(1/32) wide (about 2.2 % apart), reported as the bucket's geometric middle clamped
to the exact min/max, so a percentile is within about 1.1 % of the true order statistic. Memory per histogram is at
most a few hundred buckets whatever the number of samples.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

SUB = 32  # buckets per doubling
FLOOR_US = 0.001  # durations below this (including 0) go to the zero bucket


@dataclass
class LogHist:
    """Histogram of durations in microseconds."""

    count: int = 0
    total: float = 0.0
    min: float = math.inf
    max: float = 0.0
    zero: int = 0
    buckets: dict[int, int] = field(default_factory=dict)

    def add(self, us: float) -> None:
        """Add one duration (negative values count as 0)."""
        if us < 0.0:
            us = 0.0
        self.count += 1
        self.total += us
        if us < self.min:
            self.min = us
        if us > self.max:
            self.max = us
        if us < FLOOR_US:
            self.zero += 1
            return
        i = int(math.log2(us / FLOOR_US) * SUB)
        b = self.buckets
        b[i] = b.get(i, 0) + 1

    def merge(self, other: LogHist) -> None:
        """Add ``other``'s samples to this histogram."""
        self.count += other.count
        self.total += other.total
        self.min = min(self.min, other.min)
        self.max = max(self.max, other.max)
        self.zero += other.zero
        for i, n in other.buckets.items():
            self.buckets[i] = self.buckets.get(i, 0) + n

    @staticmethod
    def edge(i: int) -> float:
        """Lower edge of bucket ``i`` in microseconds."""
        return FLOOR_US * 2.0 ** (i / SUB)

    def quantile(self, q: float) -> float:
        """The ``q``-quantile (0..1) in microseconds; 0 when empty."""
        if self.count == 0:
            return 0.0
        rank = max(1, math.ceil(q * self.count))
        seen = self.zero
        if seen >= rank:
            return max(0.0, self.min)
        for i in sorted(self.buckets):
            seen += self.buckets[i]
            if seen >= rank:
                mid = math.sqrt(self.edge(i) * self.edge(i + 1))
                return min(max(mid, self.min), self.max)
        return self.max

    def mean(self) -> float:
        """Mean duration in microseconds (0 when empty)."""
        return self.total / self.count if self.count else 0.0


def fmt_us(us: float) -> str:
    """A duration in microseconds as a short human string."""
    if us != us:
        return "-"
    a = abs(us)
    if a < 1000.0:
        return f"{us:.1f}us"
    if a < 1_000_000.0:
        return f"{us / 1000.0:.2f}ms"
    return f"{us / 1_000_000.0:.3f}s"
