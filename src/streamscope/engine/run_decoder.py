"""Plain iteration's decoding: the samples of a block of batches, one run of one chunk at a time, when asked.

A block (``engine/dataset.py``) is up to 65,536 consecutive samples of a worker's batches. Plain iteration
(``for s in dataset``: batches of one sample) decodes a run of samples of one chunk in one item-loader call
(``read_samples``), much faster than one call per sample. Decoding the whole block up front opened every chunk of
it before the first sample was yielded: each one fetched and leased until its last batch was done, so a remote
dataset filled the cache whole whatever ``max_cache_size`` said (issue 31, item 5). :class:`RunDecoder` decodes a
run only when the batch that reads its first sample comes, so the chunks are opened in the order and at the
batch the release schedule (``engine/read_schedule.py``) expects, and at most one run's samples are held.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = ["RunDecoder"]


class RunDecoder:
    """The samples at ``(ci[k], ii[k])`` handed out batch by batch, in order.

    Args:
        ci, ii: the block's chunk and item arrays (positions in batch order).
        decode_run: ``(chunk, items) -> samples``: opens ``chunk`` and decodes ``items`` of it.
    """

    __slots__ = ("_decode", "_ends", "_i", "_ii", "_next", "_run", "_run_chunks", "_starts")

    def __init__(self, ci: np.ndarray, ii: np.ndarray, decode_run: Callable[[int, np.ndarray], list[Any]]) -> None:
        cuts = (np.flatnonzero(ci[1:] != ci[:-1]) + 1).tolist() if len(ci) else []
        self._starts: list[int] = [0, *cuts]
        self._ends: list[int] = [*cuts, len(ci)]
        self._run_chunks: list[int] = ci[self._starts].tolist() if len(ci) else []
        self._ii = ii
        self._decode = decode_run
        self._next = 0  # the next run to decode
        self._run: list[Any] = []  # the samples of the run being handed out
        self._i = 0  # the next of them

    def take(self, n: int) -> list[Any]:
        """The next ``n`` samples (a batch's), decoding the runs they start as they come."""
        out: list[Any] = []
        while len(out) < n:
            if self._i >= len(self._run):
                if self._next >= len(self._starts):
                    raise IndexError(f"the block has no sample left ({len(out)} of {n} given)")
                r = self._next
                self._next += 1
                self._run = self._decode(self._run_chunks[r], self._ii[self._starts[r] : self._ends[r]])
                self._i = 0
            k = min(n - len(out), len(self._run) - self._i)
            if k == len(self._run) and not out:
                out = self._run  # the whole run is the batch: no copy
            else:
                out.extend(self._run[self._i : self._i + k])
            self._i += k
        if self._i >= len(self._run):
            self._run = []  # handed out: not held while the next batch waits
            self._i = 0
        return out
