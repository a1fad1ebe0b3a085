"""train_test_split: carve a StreamingDataset into non-overlapping subsets (LitData's semantics).

The dataset's regions (whole chunks, or its subsample regions) are optionally permuted with
``numpy.random.RandomState([seed])``; then consecutive item counts ``int(len * split)`` are cut off the front,
the last region of each split cut short and its remainder starting the next split.
"""

from __future__ import annotations

import bisect
import warnings
from collections.abc import Sequence
from typing import Protocol, TypeVar

import numpy as np

from streamscope._core.errors import DatasetError

__all__ = ["Regioned", "subset_dataset", "train_test_split"]

_D = TypeVar("_D", bound="Regioned")


class Regioned(Protocol):
    """What a split needs of a dataset (a StreamingDataset has it): its chunk sizes, its regions (None: whole
    chunks) and a copy of itself over other regions. A protocol, so the dataset imports this module and not the
    reverse."""

    @property
    def chunk_sizes(self) -> Sequence[int]: ...

    @property
    def regions(self) -> Sequence[tuple[int, int, int]] | None: ...

    def with_regions(self: _D, regions: Sequence[tuple[int, int, int]]) -> _D: ...


def _take(
    regions: list[tuple[int, int, int]], count: int
) -> tuple[list[tuple[int, int, int]], list[tuple[int, int, int]]]:
    taken: list[tuple[int, int, int]] = []
    left = count
    rest = list(regions)
    while left > 0 and rest:
        c, a, b = rest.pop(0)
        if b - a <= left:
            taken.append((c, a, b))
            left -= b - a
        else:
            taken.append((c, a, a + left))
            rest.insert(0, (c, a + left, b))
            left = 0
    return taken, rest


def train_test_split(streaming_dataset: _D, splits: list[float], seed: int = 42, shuffle: bool = True) -> list[_D]:
    """Split ``streaming_dataset`` into ``len(splits)`` non-overlapping datasets.

    Args:
        streaming_dataset: the dataset to split.
        splits: fractions in [0, 1] summing to at most 1 (e.g. ``[0.8, 0.1, 0.1]``).
        seed: seed of the region permutation.
        shuffle: permute the regions before cutting.

    Returns:
        One dataset per split. A split that selects no sample (``0.0``, or a fraction too small for the
        dataset) is an empty dataset: ``len()`` is 0 and iterating it yields nothing (a warning says so).

    Raises:
        DatasetError: a split is not a float in [0, 1], or the splits sum to more than 1.
    """
    if any(not isinstance(s, float) for s in splits):
        raise DatasetError(f"each split must be a float, got {splits!r}")
    if not all(0 <= s <= 1 for s in splits):
        raise DatasetError(f"each split must be in [0, 1], got {splits!r}")
    if sum(splits) > 1:
        raise DatasetError(f"the splits sum to {sum(splits)}, more than 1")
    ds = streaming_dataset
    regions = ds.regions or [(c, 0, n) for c, n in enumerate(ds.chunk_sizes)]
    regions = [r for r in regions if r[2] > r[1]]
    if shuffle:
        order = np.random.RandomState([seed]).permutation(len(regions)).tolist()
        regions = [regions[i] for i in order]
    total = sum(b - a for _, a, b in regions)
    out = []
    for i, s in enumerate(splits):
        count = int(total * s)
        if count == 0:
            warnings.warn(
                f"train_test_split: split {i} ({s}) of {total} samples selects no sample: that dataset is empty "
                f"(len 0, iterating it yields nothing)",
                stacklevel=2,
            )
        taken, regions = _take(regions, count)
        out.append(ds.with_regions(taken))
    return out


def subset_dataset(streaming_dataset: _D, indices: Sequence[int] | slice) -> _D:
    """``StreamingDataset.subset``: a copy that runs over ``indices`` only (LitData 0.2.76).

    ``indices`` are positions in the dataset's unshuffled order (a slice, a range or a list, in the order
    given; runs of consecutive positions within one chunk become one region).

    Raises:
        DatasetError: a position is outside ``[0, len)``.
    """
    ds = streaming_dataset
    regions = [r for r in (ds.regions or [(c, 0, n) for c, n in enumerate(ds.chunk_sizes)]) if r[2] > r[1]]
    starts = np.cumsum([0] + [b - a for _, a, b in regions]).tolist()
    total = starts[-1]
    positions = range(*indices.indices(total)) if isinstance(indices, slice) else indices
    out: list[tuple[int, int, int]] = []
    for pos in positions:
        if isinstance(pos, bool) or not isinstance(pos, (int, np.integer)) or not 0 <= pos < total:
            raise DatasetError(f"subset positions must be ints in [0, {total - 1}], got {pos!r}")
        r = bisect.bisect_right(starts, int(pos)) - 1
        chunk, a, _ = regions[r]
        local = a + int(pos) - starts[r]
        if out and out[-1][0] == chunk and out[-1][2] == local:
            out[-1] = (chunk, out[-1][1], local + 1)
        else:
            out.append((chunk, local, local + 1))
    return ds.with_regions(out)
