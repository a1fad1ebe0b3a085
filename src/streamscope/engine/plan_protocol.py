"""The contract every epoch plan keeps (:class:`Plan`), and the pieces of it the four plans share.

A plan is one rank's epoch: its batches, numbered ``0 .. num_batches - 1``, whatever the dataset kind
(:class:`~streamscope.engine.plan.EpochPlan` of a StreamingDataset,
:class:`~streamscope.engine.combined_plan.CombinedPlan`, :class:`~streamscope.engine.parallel.ParallelPlan`,
:class:`~streamscope.engine.mapped.MappedPlan` of a batch-fetching map-style dataset such as StreamingRawDataset).
It holds:

* identity: :meth:`Plan.describe` (everything that defines the order except epoch and rank, JSON-serialisable)
  and ``fingerprint``, the short hash of it (:func:`fingerprint_of`): two plans of one order have one fingerprint;
* the worker schedule: :meth:`Plan.batches_for_worker`, the one rule of every kind (:func:`worker_batches`):
  starting at batch ``s``, worker ``w`` of ``W`` builds ``s + w, s + w + W, ...``, so PyTorch's round robin hands
  the training loop ``s, s + 1, ...`` and a position does not depend on the number of workers;
* state: :meth:`Plan.state` records a mid-epoch position (``batches_consumed`` batches handed to the loop) with
  the identity (:func:`position_state`); :mod:`streamscope.engine.resume` checks it against a plan and resumes.

Which chunks a worker reads, in which order, is each dataset's to say from its plan (``chunk_schedule_for_worker``
of an EpochPlan; Combined and Parallel map their batches onto their members' plans): the shared loop of
:mod:`streamscope.engine.batch_loop` takes the schedules and the batch builder as arguments.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from typing import Any, Protocol, runtime_checkable

from streamscope._core.errors import PlanError, StateDictError

__all__ = ["Plan", "fingerprint_of", "position_state", "worker_batches"]


@runtime_checkable
class Plan(Protocol):
    """One rank's epoch of any dataset kind (see the module docstring)."""

    @property
    def epoch(self) -> int:
        """The epoch this plan orders."""
        ...

    @property
    def rank(self) -> int:
        """The DDP rank whose share this is."""
        ...

    @property
    def num_batches(self) -> int:
        """Batches of this rank in the epoch."""
        ...

    @property
    def num_samples(self) -> int:
        """Samples of this rank in the epoch."""
        ...

    @property
    def fingerprint(self) -> str:
        """Short hash of :meth:`describe` (:func:`fingerprint_of`)."""
        ...

    def describe(self) -> dict[str, Any]:
        """Everything that defines the order except epoch and rank (JSON-serialisable)."""
        ...

    def batch_len(self, j: int) -> int:
        """Samples in batch ``j``."""
        ...

    def batches_for_worker(self, worker_id: int, num_workers: int, start_batch: int = 0) -> Iterable[int]:
        """The batches worker ``worker_id`` of ``num_workers`` builds from ``start_batch`` on."""
        ...

    def state(self, batches_consumed: int) -> dict[str, Any]:
        """A JSON-serialisable state after ``batches_consumed`` batches of this epoch."""
        ...


def fingerprint_of(config: Mapping[str, Any]) -> str:
    """The fingerprint of a plan whose :meth:`Plan.describe` is ``config``: 16 hex digits of its sha256."""
    blob = json.dumps(dict(config), sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def worker_batches(num_batches: int, worker_id: int, num_workers: int, start_batch: int = 0) -> range:
    """Batches worker ``worker_id`` builds: ``start_batch + worker_id + k * num_workers`` below ``num_batches``.

    ``num_workers=0`` (iteration in the main process) counts as one worker.

    Raises:
        PlanError: ``worker_id`` is not a worker of ``num_workers``, or ``start_batch`` is negative.
    """
    nw = max(1, int(num_workers))
    if not 0 <= worker_id < nw:
        raise PlanError(f"worker_id {worker_id} out of range for num_workers={nw}")
    if start_batch < 0:
        raise PlanError(f"start_batch must be >= 0, got {start_batch}")
    return range(int(start_batch) + int(worker_id), int(num_batches), nw)


def position_state(plan: Plan, batches_consumed: int, what: str) -> dict[str, Any]:
    """``plan``'s state after ``batches_consumed`` batches (the form :class:`~streamscope.engine.resume.ResumeState`
    reads): epoch, position, fingerprint and the describing ``plan`` entry.

    Raises:
        StateDictError: the position is outside ``[0, num_batches]`` (``what`` names the plan's kind).
    """
    if not 0 <= batches_consumed <= plan.num_batches:
        raise StateDictError(
            f"batches_consumed={batches_consumed} outside [0, {plan.num_batches}] for {what} epoch {plan.epoch}"
        )
    return {
        "epoch": int(plan.epoch),
        "batches_consumed": int(batches_consumed),
        "fingerprint": plan.fingerprint,
        "plan": plan.describe(),
    }
