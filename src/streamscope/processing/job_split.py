"""How a job's inputs are dealt to its workers: the work items (remapped by the reader, batched, cut by
``fast_dev_run``), the number of workers, and one contiguous range of the items per global worker (node ``r`` runs
workers ``r*W .. r*W+W-1`` of ``N*W``), or one queue shared by the workers (``keep_data_ordered=False``, the user's
``queue``). The range arithmetic is :mod:`.split`'s; this module applies it to a job's options.
"""

from __future__ import annotations

import builtins
import hashlib
import os
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from streamscope._core import config as cfg
from streamscope._core.errors import OptimizeInputError
from streamscope.processing.executors import Executor
from streamscope.processing.nodes import NodeEnv
from streamscope.processing.options import JobOptions
from streamscope.processing.runner import JobRun
from streamscope.processing.split import aligned_ranges, even_ranges, weighted_ranges
from streamscope.processing.worker import Resume, WorkerJob

__all__ = ["JobSplit", "fingerprint", "split_job"]


@dataclass(frozen=True)
class JobSplit:
    """How a job's inputs are dealt: ``ranges[w]`` of ``items`` to global worker ``w`` of ``world`` (``workers``
    a node), this node's workers ``mine``; ``shared`` (from global input ``shared_offset``): this node's share
    handed out through one queue (``keep_data_ordered=False``), else None. ``n``: the inputs the job processes."""

    items: list[Any]
    n: int
    workers: int
    world: int
    ranges: list[tuple[int, int]]
    mine: range
    shared: list[Any] | None
    shared_offset: int

    def jobs(
        self,
        kind: str,
        node: NodeEnv,
        opts: JobOptions,
        staging: str,
        *,
        resume: dict[int, Resume] | None = None,
        writer_kwargs: dict[str, Any] | None = None,
        use_checkpoint: bool = False,
    ) -> list[WorkerJob]:
        """This node's workers as jobs of ``kind`` (optimize or map), each on its range of the inputs (or taking
        them from the user's queue ``opts.queue``)."""
        return [
            WorkerJob(
                kind=kind,
                worker=w,
                num_workers=self.workers,
                fn=opts.fn,
                inputs=self.items[self.ranges[w][0] : self.ranges[w][1]],
                offset=self.ranges[w][0],
                output_dir=opts.url,
                storage_options=opts.storage_options,
                staging_dir=staging,
                writer_kwargs=writer_kwargs or {},
                use_checkpoint=use_checkpoint,
                resume=resume[w] if resume is not None else Resume(),
                reader=opts.reader,
                source=opts.queue,
                num_nodes=node.num_nodes,
                node_rank=node.node_rank,
            )
            for w in self.mine
        ]

    def run(self, jobs: list[WorkerJob], desc: str, verbose: bool, start_method: str | None) -> JobRun:
        """``jobs`` to run, with the progress bar's total (None for the user's queue: unknown)."""
        if any(j.source is not None for j in jobs):
            total = None
        else:
            total = len(self.shared) if self.shared is not None else sum(len(j.inputs) for j in jobs)
        return JobRun(jobs, total, desc, verbose, start_method, self.shared, self.shared_offset)


def split_job(
    ex: Executor, node: NodeEnv, opts: JobOptions, *, align: int | None = None, strict_weights: bool = True
) -> JobSplit:
    """Deal the inputs (or, with the user's ``queue``, none: it feeds the workers) to the job's global workers:
    node r runs ranks ``r*workers .. r*workers + workers - 1``. ``align``: whole chunks of that many items per
    worker (optimize's align_chunking). Weights that do not fit the inputs raise with ``strict_weights`` (map),
    else warn and are ignored (LitData's optimize() ignores weights: code passing these runs there)."""
    keep: int | None = None
    queue, weights, batch_size = opts.queue, opts.weights, opts.batch_size
    if queue is not None:
        items: list[Any] = []
        n_given = n = 0
        workers = _num_workers(opts.num_workers, None, ex)
    else:
        items, n_given, keep = _prepare_inputs(
            opts.inputs, batch_size, opts.fast_dev_run, opts.reader, opts.num_workers
        )
        if keep is not None and not opts.keep_data_ordered:  # the workers share one queue: its first inputs
            items, keep = items[:keep], None
        n = len(items)
        workers = _num_workers(opts.num_workers, n, ex)
    world = workers * node.num_nodes
    if queue is not None or not opts.keep_data_ordered:
        ranges = [(0, 0)] * world  # items are handed out through a queue shared by the workers
    elif weights is not None:
        try:
            ranges = _weighted_split(weights, n_given, batch_size, n, world)
        except OptimizeInputError as exc:
            if strict_weights:
                raise
            warnings.warn(f"{exc}; optimize() ignores them (as LitData's does)", UserWarning, stacklevel=3)
            ranges = even_ranges(n, world)
    elif align is not None:
        ranges = aligned_ranges(n, world, align)
    else:
        ranges = even_ranges(n, world)
    if keep is not None:
        ranges = _keep_first(ranges, keep)
        n = sum(b - a for a, b in ranges)
    shared, shared_offset = None, 0
    if queue is None and not opts.keep_data_ordered:  # this node's share of the inputs, handed out by one queue
        a, b = even_ranges(len(items), node.num_nodes)[node.node_rank]
        shared, shared_offset = items[a:b], a
    mine = range(node.node_rank * workers, (node.node_rank + 1) * workers)
    return JobSplit(items, n, workers, world, ranges, mine, shared, shared_offset)


def fingerprint(items: list[Any]) -> str:
    """A digest of the work items (their reprs' first 256 characters): what a resumed or joining run must share."""
    h = hashlib.sha256()
    for it in items:
        h.update(repr(it)[:256].encode("utf-8", "replace"))
        h.update(b"\x00")
    return h.hexdigest()


def _prepare_inputs(
    inputs: Any, batch_size: int | None, fast_dev_run: bool | int, reader: Any = None, num_workers: int | None = None
) -> tuple[list[Any], int, int | None]:
    """The work items (remapped by the reader, batched), the number of inputs given, and how many work items
    each worker keeps for ``fast_dev_run`` (None: all)."""
    if isinstance(inputs, (str, bytes)) or not hasattr(inputs, "__len__") or not hasattr(inputs, "__getitem__"):
        try:
            inputs = builtins.list(inputs)
        except TypeError:
            raise OptimizeInputError(f"inputs must be a sequence, got {type(inputs).__name__}") from None
    if len(inputs) == 0:
        raise OptimizeInputError("inputs is empty: there is nothing to process")
    items = builtins.list(inputs)
    if reader is not None and callable(getattr(reader, "remap_items", None)):
        items = builtins.list(reader.remap_items(items, num_workers or os.cpu_count() or 1))
        if not items:
            raise OptimizeInputError(f"{type(reader).__name__}.remap_items() returned no work items")
    n_given = len(items)
    if batch_size is not None and batch_size > 1:
        items = [items[p : p + batch_size] for p in range(0, len(items), batch_size)]
    keep = None
    if fast_dev_run:
        keep = int(cfg.get("optimize_fast_dev_run_items")) if fast_dev_run is True else int(fast_dev_run)
    return items, n_given, keep


def _keep_first(ranges: list[tuple[int, int]], keep: int | None) -> list[tuple[int, int]]:
    """``fast_dev_run``: each worker's range cut to its first ``keep`` work items, as LitData ("items per
    process"), so a dev run writes the chunks of the full run's first ``keep`` items of every worker."""
    return ranges if keep is None else [(a, min(b, a + keep)) for a, b in ranges]


def _weighted_split(
    weights: Sequence[float], n_given: int, batch_size: int | None, n: int, workers: int
) -> list[tuple[int, int]]:
    """The workers' ranges of the ``n`` work items from ``weights``: one per work item (LitData's rule: per
    batch with ``batch_size``), or one per input, summed per batch.

    Raises:
        OptimizeInputError: neither length fits (a ValueError led by LitData's sentence).
    """
    w = list(weights)
    batch = batch_size if batch_size is not None and batch_size > 1 else None
    batched = batch is not None
    n_work = -(-n_given // batch) if batch is not None else n_given
    if len(w) == n_work:
        per_item = w
    elif batch is not None and len(w) == n_given:
        per_item = [sum(w[p : p + batch]) for p in range(0, n_given, batch)]
    else:
        of = f"{n_given} inputs" + (f" ({n_work} batches of {batch_size})" if batched else "")
        raise OptimizeInputError(
            f"The provided weights length should match the inputs' length. weights has {len(w)} entries for {of}"
        )
    return weighted_ranges(per_item[:n], workers)


def _num_workers(num_workers: int | None, n: int | None, executor: Executor | None = None) -> int:
    """Workers to start (on this node): at most one per input (``n`` None: the number of inputs is not known,
    queue mode). None: the executor's default (worker processes: one per CPU of this machine)."""
    if num_workers is None:
        num_workers = executor.default_workers() if executor is not None else (os.cpu_count() or 1)
    if num_workers < 0:
        raise OptimizeInputError(f"num_workers must be >= 0, got {num_workers}")
    return max(1, num_workers if n is None else min(num_workers, n))
