"""The latency histogram's two layouts: a quantile is the true order statistic within its bucket's error, and a
merged histogram is the histogram of the concatenated values (the fixed layout's merge: tests/recording/test_metrics.py,
where SpanStats keeps its counts)."""

from __future__ import annotations

import bisect
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamscope._core.histogram import LOG_US, FixedBuckets, LogHistogram

BOUNDS = (1e-5, 2.5e-5, 1e-4, 1e-3, 2.5e-3, 1e-2, 0.1, 1.0, 60.0)
FIXED = FixedBuckets(BOUNDS)
# durations in µs from 0 to ~3 hours, exact zeros and values under the log floor included
DURATIONS_US = st.one_of(st.just(0.0), st.floats(0.0, 1e-3), st.floats(1e-3, 1e10))
DURATIONS_S = st.floats(0.0, 120.0)
QS = st.floats(0.0, 1.0)
# a value's bucket middle is within half a bucket of it; the slack covers the rounding of log2 at a bucket edge
HALF_BUCKET = 2.0 ** (1 / (2 * LOG_US.sub)) * (1 + 1e-9)


def order_statistic(values: list[float], q: float) -> float:
    """The ``ceil(q*n)``-th smallest value (at least the first)."""
    return sorted(values)[max(1, math.ceil(q * len(values))) - 1]


def log_hist(values: list[float]) -> LogHistogram:
    h = LogHistogram()
    for v in values:
        h.add(v)
    return h


def fixed_counts(values: list[float]) -> list[int]:
    counts = FIXED.zeros()
    for v in values:
        counts[FIXED.index(v)] += 1
    return counts


@settings(max_examples=200, deadline=None)
@given(st.lists(DURATIONS_US, min_size=1, max_size=300), QS)
def test_a_log_quantile_is_the_order_statistic_within_half_a_bucket(values, q):
    got, want = log_hist(values).quantile(q), order_statistic(values, q)
    if want < LOG_US.floor:  # the zero bucket reports the exact min, which is below the floor too
        assert 0.0 <= got < LOG_US.floor
    else:
        assert want / HALF_BUCKET <= got <= want * HALF_BUCKET
    assert min(values) <= got <= max(values)


@settings(max_examples=200, deadline=None)
@given(st.lists(DURATIONS_S, min_size=1, max_size=300), QS.filter(lambda q: q > 0))
def test_a_fixed_quantile_is_the_upper_bound_of_the_order_statistics_bucket(values, q):
    want = order_statistic(values, q)
    got = FIXED.quantile(fixed_counts(values), len(values), q, max(values))
    i = bisect.bisect_left(BOUNDS, want)
    assert got == (BOUNDS[i] if i < len(BOUNDS) else max(values))
    if i < len(BOUNDS):  # the bucket holds the value: (previous bound, bound]
        assert want <= got and (i == 0 or want > BOUNDS[i - 1])


@settings(max_examples=200, deadline=None)
@given(st.lists(DURATIONS_US, max_size=100), st.lists(DURATIONS_US, max_size=100))
def test_a_merged_log_histogram_is_the_histogram_of_both_lists(a, b):
    merged, whole = log_hist(a), log_hist(a + b)
    merged.merge(log_hist(b))
    assert (merged.count, merged.zero, merged.buckets, merged.min, merged.max) == (
        whole.count,
        whole.zero,
        whole.buckets,
        whole.min,
        whole.max,
    )
    assert merged.total == pytest.approx(whole.total, rel=1e-12, abs=1e-9)  # summed in another order
    for q in (0.0, 0.25, 0.5, 0.95, 1.0):
        assert merged.quantile(q) == whole.quantile(q)


def test_empty_histograms_and_values_past_the_bounds():
    assert LogHistogram().quantile(0.5) == 0.0 and LogHistogram().mean() == 0.0
    assert FIXED.quantile(FIXED.zeros(), 0, 0.5, 0.0) == 0.0
    counts = fixed_counts([0.5, 90.0, 100.0])
    assert FIXED.quantile(counts, 3, 0.3, 100.0) == 1.0
    assert FIXED.quantile(counts, 3, 0.9, 100.0) == 100.0  # past the last bound: the exact max
    assert FIXED.quantile(counts, 5, 1.0, 100.0) == 100.0  # more values counted than bucketed: the max
    h = log_hist([-5.0, 0.0])  # negative durations count as 0
    assert (h.count, h.zero, h.min, h.quantile(1.0)) == (2, 2, 0.0, 0.0)
