"""Contiguous per-worker ranges."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from streamscope.optimize.split import aligned_ranges, even_ranges, weighted_ranges


def _check_partition(ranges, n, workers):
    assert len(ranges) == workers
    assert ranges[0][0] == 0 and ranges[-1][1] == n
    for (a, b), (c, _) in zip(ranges, ranges[1:]):
        assert a <= b == c


@given(st.integers(1, 500), st.integers(1, 16))
def test_even_ranges_partition_and_balance(n, workers):
    r = even_ranges(n, workers)
    _check_partition(r, n, workers)
    sizes = [b - a for a, b in r]
    assert max(sizes) - min(sizes) <= 1
    assert sizes == sorted(sizes)  # remainder to the last workers, as LitData


def test_even_ranges_like_litdata():
    assert even_ranges(5, 2) == [(0, 2), (2, 5)]


@given(st.lists(st.integers(0, 100), min_size=1, max_size=300), st.integers(1, 8))
def test_weighted_ranges_partition(weights, workers):
    _check_partition(weighted_ranges(weights, workers), len(weights), workers)


def test_weighted_ranges_balance_weight():
    weights = [10] + [1] * 10
    assert weighted_ranges(weights, 2) == [(0, 1), (1, 11)]


@given(st.integers(1, 500), st.integers(1, 8), st.integers(1, 50))
def test_aligned_ranges(n, workers, chunk):
    r = aligned_ranges(n, workers, chunk)
    _check_partition(r, n, workers)
    assert all((b - a) % chunk == 0 for a, b in r[:-1])
