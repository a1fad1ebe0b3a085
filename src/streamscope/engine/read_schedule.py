"""One worker's chunk reads over an epoch: what to prefetch, in which order, and when each chunk is released.

Every dataset kind (StreamingDataset, CombinedStreamingDataset, ParallelStreamingDataset) reads its batches
through :class:`ScheduledReads`: the readers of chunks fetched into a cache start prefetching in order of
first use, and a chunk is released (its lease dropped, so it may be evicted) right after the worker's batch
that last uses it. Chunks read in place (local, uncompressed) need neither.

The release schedule holds the cache to its budget only if the dataset opens a chunk no earlier than the first
batch that reads it: a chunk opened for a later batch is leased (the prefetcher waits for it, and fetches
``prefetch_depth`` chunks past it) until that batch is done. Plain iteration (``for s in dataset``) goes through
the same schedule as the loader, one batch of one sample at a time, and decodes a run of samples of one chunk only
when the batch that needs it comes (``engine/run_decoder.py``).

A reader serves one iteration at a time (one reader per dataset and process): starting another ends the one
before, and a :class:`ScheduledReads` whose iteration was ended so acts on the reader no more (an iterator dropped
after the next one started, then collected, does not stop the new one's prefetching or release its chunks).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

__all__ = ["Schedule", "ScheduledReads", "schedule_from_uses"]

#: ``(chunk, first, last)`` per chunk in order of first use; ``first``/``last`` count the worker's own batches
#: (0 = the first batch it builds), as :meth:`~streamscope.engine.plan.EpochPlan.chunk_schedule_for_worker`.
Schedule = list[tuple[int, int, int]]


def schedule_from_uses(uses: Iterable[tuple[int, Iterable[int]]]) -> Schedule:
    """The schedule of ``(n, chunks)`` pairs: the chunks the worker's ``n``-th batch reads, ``n`` increasing."""
    first: dict[int, int] = {}
    last: dict[int, int] = {}
    for n, chunks in uses:
        for c in chunks:
            if c not in first:
                first[c] = n
            last[c] = n
    return [(c, f, last[c]) for c, f in first.items()]


class ScheduledReads:
    """Prefetch and release for the chunk readers of one worker's epoch.

    Args:
        readers: the chunk readers (one per dataset read).
        schedules: each reader's :data:`Schedule` (ignored for a reader without a cache; may be left empty).
    """

    def __init__(self, readers: Sequence[Any], schedules: Sequence[Schedule]) -> None:
        self._readers = readers
        self._releases: dict[int, list[tuple[int, int]]] = {}
        self._iterations: list[int | None] = []  # each started reader's iteration (None: not started here)
        for i, (reader, schedule) in enumerate(zip(readers, schedules)):
            if reader.cache is None:
                self._iterations.append(None)
                continue  # mapped in place: nothing to fetch, nothing leased
            reader.start([c for c, _, _ in schedule])
            self._iterations.append(getattr(reader, "iteration", None))
            for c, _, last in schedule:
                self._releases.setdefault(last, []).append((i, c))

    def _current(self, i: int) -> bool:
        """Whether reader ``i`` still serves this iteration (no other started on it since)."""
        mine = self._iterations[i]
        return mine is None or getattr(self._readers[i], "iteration", None) == mine

    def batch_done(self, n: int) -> None:
        """The worker's ``n``-th batch has been handed on: release the chunks it was the last to read."""
        for i, c in self._releases.get(n, ()):
            if self._current(i):
                self._readers[i].finished_with(c)

    def stop(self) -> None:
        """Stop every reader's prefetching (end of the epoch, or the iterator was dropped)."""
        for i, reader in enumerate(self._readers):
            if self._current(i):
                reader.stop()
