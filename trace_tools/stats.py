"""Bounded-memory latency statistics for the trace tools, and how they print.

:class:`LogHist` is streamscope's log-bucketed histogram (:class:`streamscope._core.histogram.LogHistogram`:
buckets 2**(1/32) wide, exact count, total, min and max), here in microseconds: a percentile is within about 1.1 %
of the true order statistic, in at most a few hundred buckets whatever the number of samples.
"""

from __future__ import annotations

from streamscope._core.histogram import LOG_US
from streamscope._core.histogram import LogHistogram as LogHist

__all__ = ["FLOOR_US", "SUB", "LogHist", "fmt_us"]

SUB = LOG_US.sub  # buckets per doubling
FLOOR_US = LOG_US.floor  # durations below this (including 0) go to the zero bucket


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
