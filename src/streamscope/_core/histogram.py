"""Latency histograms: bucket counts beside the exact count, total and max, and quantiles read from the buckets.

One walk over the cumulative counts (:func:`reached`) serves two bucket layouts, each chosen for what reads
it:

* :class:`FixedBuckets`: explicit upper bounds, a value going to the first bound at or above it (Prometheus's
  ``le``, OpenTelemetry's explicit buckets) and a last bucket for everything above. A quantile is its bucket's upper
  bound (the exact max past the last bound). The metrics (``streamscope.events``) keep these, dense, because the
  exporters publish exactly these buckets.
* :class:`LogBuckets`: buckets ``2**(1/sub)`` wide above a floor and a zero bucket below it, kept sparse. A quantile
  is its bucket's geometric middle clamped to the exact min and max: within ``2**(1/(2*sub))`` of the true order
  statistic (about 1.1 % for ``sub=32``) whatever the range of the values, in at most a few hundred buckets.
  :class:`LogHistogram` holds them (the trace tools' summaries).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

__all__ = ["LOG_US", "FixedBuckets", "LogBuckets", "LogHistogram", "reached"]


def reached(counts: Iterable[tuple[int, int]], target: float) -> int | None:
    """The first bucket ``i`` (of ``(i, count)`` pairs in bucket order) where the running count reaches ``target``:
    the bucket of the ``ceil(target)``-th smallest value; None if the counts never reach it."""
    seen = 0
    for i, c in counts:
        seen += c
        if seen >= target:
            return i
    return None


@dataclass(frozen=True)
class FixedBuckets:
    """Buckets with explicit upper bounds (ascending) and one more above the last."""

    bounds: tuple[float, ...]

    def index(self, value: float) -> int:
        """The bucket of ``value``: the first bound ``>= value``, ``len(bounds)`` above them all."""
        return bisect.bisect_left(self.bounds, value)

    def zeros(self) -> list[int]:
        """Empty counts, one per bucket."""
        return [0] * (len(self.bounds) + 1)

    def quantile(self, counts: Sequence[int], count: int, q: float, max_value: float) -> float:
        """Upper bound of the bucket where a fraction ``q`` of ``count`` values is reached (the bucket of the
        ``ceil(q*count)``-th smallest value; the first bucket for ``q=0``), ``max_value`` past the bounds; 0 when
        empty. ``count`` may exceed ``sum(counts)`` (values known only by number: the walk then
        ends on ``max_value``)."""
        if not count:
            return 0.0
        i = reached(enumerate(counts), q * count)
        return self.bounds[i] if i is not None and i < len(self.bounds) else max_value


@dataclass(frozen=True)
class LogBuckets:
    """Buckets ``[floor * 2**(i/sub), floor * 2**((i+1)/sub))`` for ``i >= 0``, and the zero bucket ``-1`` below
    ``floor``."""

    sub: int = 32
    floor: float = 0.001

    def index(self, value: float) -> int:
        """The bucket of ``value`` (``-1``: below the floor, zero and negative values included)."""
        if value < self.floor:
            return -1
        return int(math.log2(value / self.floor) * self.sub)

    def edge(self, i: int) -> float:
        """Lower edge of bucket ``i``."""
        return self.floor * float(2.0 ** (i / self.sub))  # float(): typeshed types float ** float as Any

    def middle(self, i: int, lo: float, hi: float) -> float:
        """The value a quantile in bucket ``i`` reports, given the exact min ``lo`` and max ``hi``: the geometric
        middle clamped to them (``max(0, lo)`` in the zero bucket)."""
        if i < 0:
            return max(0.0, lo)
        return min(max(math.sqrt(self.edge(i) * self.edge(i + 1)), lo), hi)


#: The layout of :class:`LogHistogram`: 32 buckets a doubling from 1 ns (in µs), about 2.2 % wide.
LOG_US = LogBuckets(sub=32, floor=0.001)
_SUB, _FLOOR = LOG_US.sub, LOG_US.floor  # LOG_US.index, inlined in LogHistogram.add (a trace's every span)


@dataclass
class LogHistogram:
    """Histogram of durations in microseconds over :data:`LOG_US`, with exact count, total, min and max."""

    count: int = 0
    total: float = 0.0
    min: float = math.inf
    max: float = 0.0
    zero: int = 0  # values below the layout's floor
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
        if us < _FLOOR:
            self.zero += 1
            return
        i = int(math.log2(us / _FLOOR) * _SUB)
        b = self.buckets
        b[i] = b.get(i, 0) + 1

    def merge(self, other: LogHistogram) -> None:
        """Add ``other``'s values to this histogram."""
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
        return LOG_US.edge(i)

    def quantile(self, q: float) -> float:
        """The ``q``-quantile (0..1) in microseconds, the ``ceil(q*count)``-th smallest value (at least the first)
        within the layout's error; 0 when empty."""
        if self.count == 0:
            return 0.0
        rank = max(1, math.ceil(q * self.count))
        if self.zero >= rank:
            return LOG_US.middle(-1, self.min, self.max)
        keys = sorted(self.buckets)
        i = reached(zip(keys, map(self.buckets.__getitem__, keys)), rank - self.zero)
        return self.max if i is None else LOG_US.middle(i, self.min, self.max)

    def mean(self) -> float:
        """Mean duration in microseconds (0 when empty)."""
        return self.total / self.count if self.count else 0.0
