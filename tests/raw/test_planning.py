from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from streamscope.raw.planning import LookAhead, adaptive_concurrency, batch_budget, effective_prefetch, median_size


def test_adaptive_concurrency_follows_median_and_workers():
    assert adaptive_concurrency(100_000, 1) == 128  # small files: latency-bound, capped per process
    assert adaptive_concurrency(100_000, 2) == 256  # 512 budget split over 2 workers
    assert adaptive_concurrency(64 * 1024 * 1024, 1) == 32  # big files: floor
    assert adaptive_concurrency(64 * 1024 * 1024, 16) == 8  # per-worker floor
    assert adaptive_concurrency(2 * 1024 * 1024, 1) == 32


def test_effective_prefetch_is_worker_aware():
    assert effective_prefetch(16, 1) == 16
    assert effective_prefetch(16, 8) == 8
    assert effective_prefetch(16, 32) == 2
    assert effective_prefetch(0, 4) == 0


def test_median_and_budget():
    assert median_size([]) == 256 * 1024
    assert median_size([0, 10, 20, 30]) == 20
    assert batch_budget([1, 2], 0, 1.0) is None
    assert batch_budget([100], 5.0, 1000.0) == 5.0
    assert batch_budget([10_000], 5.0, 1000.0) == 30.0  # 3x the object's time at the floor throughput


@settings(max_examples=60, deadline=None)
@given(
    workers=st.integers(1, 8),
    batch=st.integers(1, 70),
    length=st.integers(1, 2000),
    depth=st.integers(1, 64),
)
def test_lookahead_predicts_each_workers_next_batch(workers, batch, length, depth):
    """Simulate torch's assignment (batch k -> worker k % W, sequential sampler); count exact hits."""
    starts = list(range(0, length, batch))
    per_worker = {w: [s for k, s in enumerate(starts) if k % workers == w] for w in range(workers)}
    for w, mine in per_worker.items():
        la = LookAhead()
        for j, s in enumerate(mine):
            idx = list(range(s, min(s + batch, length)))
            predicted = la.observe(idx, workers, length, depth)
            assert len(predicted) <= depth
            assert all(0 <= p < length for p in predicted)
            if j + 1 < len(mine):
                nxt = set(range(mine[j + 1], min(mine[j + 1] + batch, length)))
                # every prediction up to the next batch's size is in the next batch
                assert predicted[: min(depth, len(nxt))] == sorted(nxt)[: min(depth, len(nxt))], (w, j)


def test_lookahead_learns_stride_and_stops_on_shuffle():
    la = LookAhead()
    assert la.observe([0, 1, 2, 3], 1, 100, 4) == [4, 5, 6, 7]
    # a stride other than the guess (e.g. a sampler that skips) is learned from history
    assert la.observe([10, 11, 12, 13], 1, 100, 4) == [20, 21, 22, 23]
    assert la.observe([7, 3, 9], 1, 100, 4) == []  # shuffled: no guess
    assert la.observe([98, 99], 1, 100, 4) == []  # nothing beyond the end
