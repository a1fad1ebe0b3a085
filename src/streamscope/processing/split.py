"""Splitting inputs into one contiguous range per worker.

Worker ``w`` gets inputs ``[a_w, b_w)`` and writes ``chunk-{w}-{k}.bin``; the index lists the workers' chunks in
rank order, so the dataset's sample order is the input order whatever the timing. This is what makes
optimize() deterministic.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["aligned_ranges", "even_ranges", "weighted_ranges"]


def even_ranges(n: int, workers: int) -> list[tuple[int, int]]:
    """Split ``n`` inputs into ``workers`` contiguous ranges; the remainder goes to the LAST workers (LitData)."""
    base, rem = divmod(n, workers)
    sizes = [base + (1 if w >= workers - rem else 0) for w in range(workers)]
    return _cumulate(sizes)


def aligned_ranges(n: int, workers: int, chunk_size: int) -> list[tuple[int, int]]:
    """``align_chunking``: every worker but the last gets whole multiples of ``chunk_size`` inputs.

    With one sample per input, the chunks then have the same boundaries as a single-worker run.
    """
    per = (n // chunk_size) // workers * chunk_size
    sizes = [per] * (workers - 1) + [n - per * (workers - 1)]
    return _cumulate(sizes)


def weighted_ranges(weights: Sequence[float], workers: int) -> list[tuple[int, int]]:
    """Contiguous ranges whose weight sums are as close as a greedy cut gets to ``total / workers``.

    Order is preserved (unlike LitData, which packs items by size and shuffles them per worker).
    """
    n = len(weights)
    total = float(sum(weights))
    if total <= 0:
        return even_ranges(n, workers)
    bounds = [0]
    acc = 0.0
    w = 1
    for i, wt in enumerate(weights):
        acc += float(wt)
        # cut after item i when the running sum reaches this worker's share, leaving >= 1 item per later worker
        while w < workers and acc >= total * w / workers and (i + 1) <= n - (workers - w):
            if i + 1 > bounds[-1]:
                bounds.append(i + 1)
            w += 1
    while len(bounds) < workers:
        bounds.append(n)
    bounds.append(n)
    return [(bounds[k], bounds[k + 1]) for k in range(workers)]


def _cumulate(sizes: list[int]) -> list[tuple[int, int]]:
    out = []
    a = 0
    for s in sizes:
        out.append((a, a + s))
        a += s
    return out
