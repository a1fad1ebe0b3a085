"""The one batch loop of every dataset kind: a worker's batches of a plan, built one by one, its chunk reads
scheduled and released as the batches go.

Each kind's ``iter_batches`` (StreamingDataset, Combined, Parallel, the map-style view of ``engine/mapped.py``)
says only what differs: how batch ``j`` is built (``build``), which readers it reads through and, for a cached
dataset, the chunks each of this worker's batches uses (``schedules``). The loop owns what they share: the
worker's batch numbers (:meth:`~streamscope.engine.plan_protocol.Plan.batches_for_worker`, one rule for every
kind, so a resume position does not depend on the number of workers), the prefetch order and the release of a
chunk after the last batch that uses it (:class:`~streamscope.engine.read_schedule.ScheduledReads`), and stopping
the reads when the consumer stops early (the generator is closed) or a batch fails.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

from streamscope.engine.plan_protocol import Plan
from streamscope.engine.read_schedule import Schedule, ScheduledReads

__all__ = ["iter_batches"]


def iter_batches(
    plan: Plan,
    worker_id: int,
    num_workers: int,
    start_batch: int,
    build: Callable[[int, int], Any],
    readers: Sequence[Any] = (),
    schedules: Callable[[Sequence[int]], Sequence[Schedule]] | None = None,
    done: Callable[[], None] | None = None,
    stop: Callable[[], None] | None = None,
) -> Iterator[tuple[int, Any]]:
    """``(batch_number, batch)`` for the batches worker ``worker_id`` of ``num_workers`` builds from ``start_batch``.

    Args:
        plan: the epoch's plan of this rank.
        build: ``build(n, j)`` -> batch ``j``, the ``n``-th of this worker's batches (0, 1, ...).
        readers: the chunk readers the batches read through (one per dataset read).
        schedules: this worker's batch numbers -> one schedule per reader (``[]``: read on demand); None: no
            schedule.
        done: called once after the last batch (not when the consumer stops early).
        stop: called once when the loop ends, however (after the reads stopped), if it started.
    """
    ids = plan.batches_for_worker(worker_id, max(1, num_workers), start_batch)
    if not isinstance(ids, (range, list)):  # a plan that hands out an iterator: the schedules need a sequence
        ids = list(ids)
    reads = ScheduledReads(readers, schedules(ids) if schedules is not None else [[] for _ in readers])
    try:
        for n, j in enumerate(ids):
            yield j, build(n, j)
            reads.batch_done(n)
        if done is not None:
            done()
    finally:
        reads.stop()
        if stop is not None:
            stop()
