"""Subsampling and upsampling a dataset as a list of item regions (LitData's ``subsample`` semantics).

``subsample = k + f`` with an integer ``k >= 0`` and a fraction ``0 <= f < 1`` selects:

* ``k`` full copies of the chunk list. With ``shuffle=True`` each copy is a new permutation of the previous
  copy's order, drawn from one ``numpy.random.RandomState([seed])`` stream, as LitData does; without
  shuffle every copy is in index order.
* then, when ``f > 0``, the first ``int(total_items * f)`` items of the chunk list (permuted once more when
  shuffling): whole chunks, and the last one cut short.

The result is a list of ``(chunk_index, start, end)`` regions (a chunk may appear several times) that
:func:`~streamscope.engine.plan.make_plan` runs over. LitData records the same selection as
``subsampled_files`` plus ``region_of_interest`` in its state dict; :func:`regions_to_litdata` and
:func:`regions_from_litdata` convert between the two.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from streamscope._core.errors import PlanError

__all__ = ["regions_from_litdata", "regions_to_litdata", "subsample_regions"]


def _take_prefix(order: list[int], sizes: Sequence[int], count: int) -> list[tuple[int, int, int]]:
    out: list[tuple[int, int, int]] = []
    left = count
    for c in order:
        if left <= 0:
            break
        size = int(sizes[c])
        take = min(size, left)
        out.append((c, 0, take))
        left -= take
    return out


def subsample_regions(
    chunk_sizes: Sequence[int], subsample: float, shuffle: bool, seed: int
) -> list[tuple[int, int, int]]:
    """The regions ``(chunk_index, start, end)`` selected by ``subsample`` (see the module docstring).

    Args:
        chunk_sizes: Items per chunk, in index order.
        subsample: Positive factor; ``< 1`` keeps a fraction, ``> 1`` repeats the data.
        shuffle: Pick chunks in a ``seed``-determined random order instead of index order.
        seed: Seed of that order (``0 <= seed < 2**32``, as for LitData).

    Returns:
        The regions; ``[]`` when the factor selects no item.

    Raises:
        PlanError: ``subsample`` is not a positive finite number, the seed is out of range, or a size is
            negative.
    """
    if isinstance(subsample, bool) or not isinstance(subsample, (int, float)) or not math.isfinite(subsample):
        raise PlanError(f"subsample must be a positive number, got {subsample!r}")
    if subsample <= 0:
        raise PlanError(f"subsample must be > 0, got {subsample}")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or not 0 <= int(seed) < 2**32:
        raise PlanError(f"seed must be an int in [0, 2**32) for subsampling, got {seed!r}")
    sizes = [int(s) for s in chunk_sizes]
    if any(s < 0 for s in sizes):
        raise PlanError(f"chunk {next(i for i, s in enumerate(sizes) if s < 0)} has a negative size")
    n = len(sizes)
    if math.isclose(subsample, 1.0):
        return [(c, 0, sizes[c]) for c in range(n)]

    sampler = np.random.RandomState([int(seed)]) if shuffle else None
    order = list(range(n))
    out: list[tuple[int, int, int]] = []
    # The same float arithmetic as LitData, so int(total * f) rounds identically for the same factor.
    rest = float(subsample)
    while rest >= 1.0:
        if sampler is not None:
            perm = sampler.permutation(n)
            order = [order[i] for i in perm.tolist()]
        out.extend((c, 0, sizes[c]) for c in order)
        rest -= 1.0
    if rest > 0:
        if sampler is not None:
            perm = sampler.permutation(n)
            order = [order[i] for i in perm.tolist()]
        count = int(sum(sizes) * rest)
        out.extend(_take_prefix(order, sizes, count))
    return out


def regions_to_litdata(
    regions: Sequence[tuple[int, int, int]], chunk_filenames: Sequence[str]
) -> tuple[list[str], list[tuple[int, int]]]:
    """``(subsampled_files, region_of_interest)`` as LitData stores them in ``state_dict``."""
    files = [chunk_filenames[c] for c, _, _ in regions]
    roi = [(int(s), int(e)) for _, s, e in regions]
    return files, roi


def regions_from_litdata(
    subsampled_files: Sequence[str], region_of_interest: Sequence[Sequence[int]], chunk_filenames: Sequence[str]
) -> list[tuple[int, int, int]]:
    """Regions from LitData's ``subsampled_files`` and ``region_of_interest``.

    Raises:
        PlanError: The lists differ in length or a file is not a chunk of this dataset.
    """
    if len(subsampled_files) != len(region_of_interest):
        raise PlanError(
            f"subsampled_files has {len(subsampled_files)} entries but region_of_interest has {len(region_of_interest)}"
        )
    index = {name: i for i, name in enumerate(chunk_filenames)}
    out: list[tuple[int, int, int]] = []
    for name, roi in zip(subsampled_files, region_of_interest):
        if name not in index:
            raise PlanError(f"subsampled file {name!r} is not a chunk of this dataset")
        out.append((index[name], int(roi[0]), int(roi[1])))
    return out
