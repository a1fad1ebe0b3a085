"""ParallelStreamingDataset: one sample from each of several StreamingDatasets at a time, with exact resume.

LitData's arguments and meaning (``datasets, length=None, force_override_state_dict=False, transform=None,
seed=42, resume=True, reset_rngs=False``). Each dataset contributes its own per-rank sample sequence (its own
shuffle, seed and subsample); position ``p`` of the parallel stream is the tuple of the ``p``-th samples.

``length``
    ``None``: an epoch is as long as the shortest dataset on a rank (``min(len(d) // world_size)``, so every
    rank gets the same number of batches). Dataset ``i`` reads its order of the loader's epoch.
    ``int``: the datasets are cycled; an epoch yields ``length`` tuples in all (rank ``r`` of ``W``:
    ``length // W + (r < length % W)``, LitData's split). Pass ``c`` over dataset ``i`` uses that dataset's
    epoch ``c + 1`` order, as LitData's cycling does. With ``resume=True`` epoch ``e`` continues the stream
    where epoch ``e - 1`` ended (positions ``[(e-1)*length, e*length)``); with ``resume=False`` every epoch
    yields positions ``[0, length)``, i.e. the same tuples. These are a StreamingDataLoader's epochs: iterating
    the dataset itself starts at position 0 every time (LitData's ``resume`` "tells the dataloader").
    ``float("inf")``: cycled without end (an epoch is ``2**31`` positions per rank; ``len()`` raises
    ``TypeError`` as in LitData).

``transform(samples)`` or ``transform(samples, rngs)`` replaces each tuple; ``rngs`` holds ``random``,
``numpy`` and ``torch`` generators seeded per batch from ``(seed, rank, epoch, position of the batch)`` (with
``reset_rngs=True``: from the batch number within the epoch only, so every epoch draws the same numbers; with
cycling and ``resume=True`` positions never repeat and the epoch is left out), so the
draws do not depend on the number of workers and a resumed run draws what the uninterrupted run would have.
(LitData seeds them once per worker iteration, so its draws depend on the worker count; the generators,
their kinds and the keys are the same.)

Iteration follows the single-dataset protocol (see :mod:`streamscope.engine.combined`): a plain
``torch.utils.data.DataLoader`` gets tuples; under :class:`~streamscope.engine.dataloader.StreamingDataLoader`
workers yield ``(batch_number, batch)`` with the batch collated per dataset (``default_collate`` of a list of
tuples is a list with one collated batch per dataset, as LitData's loader yields). The state records the batch
position, so resuming is exact with any number of workers.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import random
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import torch
from torch.utils.data import IterableDataset
from torch.utils.data._utils.collate import default_collate

from streamscope._core.errors import DatasetError, NotAStreamingDatasetError, PlanError
from streamscope.engine import batch_loop
from streamscope.engine.batch_mode import BatchMode
from streamscope.engine.batching import worker_items
from streamscope.engine.dataset import StreamingDataset
from streamscope.engine.distributed import WorkerEnv
from streamscope.engine.member_plans import member_plan
from streamscope.engine.members import MemberSetters
from streamscope.engine.plan import EpochPlan
from streamscope.engine.plan_protocol import fingerprint_of, position_state, worker_batches
from streamscope.engine.read_schedule import Schedule, schedule_from_uses
from streamscope.engine.resume import Resumable, member_identity_diffs

__all__ = ["ParallelPlan", "ParallelStreamingDataset"]

PARALLEL_PLAN_VERSION = 1
#: Positions per rank in one epoch of an infinite (``length=float("inf")``) parallel dataset.
INFINITE_EPOCH = 2**31


class ParallelPlan:
    """The batches of one rank for one epoch of a parallel dataset: stream positions cut into batches.

    Batch ``j`` covers stream positions ``base + j*B .. base + min((j+1)*B, n)``; position ``p`` is sample
    ``p % n_i`` of dataset ``i``'s rank sequence in that dataset's pass ``p // n_i``.
    """

    def __init__(self, epoch: int, rank: int, base: int, n: int, config: dict[str, Any]) -> None:
        self.epoch = int(epoch)
        self.rank = int(rank)
        self.base = int(base)
        self.num_samples = int(n)
        self.batch_size = int(config["batch_size"])
        b = self.batch_size
        self.num_batches = n // b if config["drop_last"] else -(-n // b)
        self._config = config
        self.fingerprint = fingerprint_of(config)

    def describe(self) -> dict[str, Any]:
        """Everything that defines the parallel order except epoch and rank."""
        return dict(self._config)

    def _check(self, j: int) -> int:
        if not 0 <= j < self.num_batches:
            raise IndexError(f"batch {j} out of range: rank {self.rank} has {self.num_batches} parallel batches")
        return int(j)

    def positions(self, j: int) -> tuple[int, int]:
        """Stream positions ``[start, end)`` of batch ``j``."""
        j = self._check(j)
        a = j * self.batch_size
        return self.base + a, self.base + min(a + self.batch_size, self.num_samples)

    def batch_len(self, j: int) -> int:
        """Samples in batch ``j``."""
        a, b = self.positions(j)
        return b - a

    def batches_for_worker(self, worker_id: int, num_workers: int, start_batch: int = 0) -> range:
        """Batches worker ``worker_id`` builds: ``start_batch + worker_id + i * num_workers``."""
        return worker_batches(self.num_batches, worker_id, num_workers, start_batch)

    def state(self, batches_consumed: int) -> dict[str, Any]:
        """JSON-serialisable resume state after ``batches_consumed`` batches."""
        return position_state(self, batches_consumed, "parallel")


def _transform_nargs(transform: Callable[..., Any]) -> int:
    try:
        params = inspect.signature(transform).parameters.values()
    except (TypeError, ValueError):  # builtins without a signature: called with the samples only
        return 1
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return sum(p.kind in kinds for p in params)


def _rngs(seed: int, rank: int, key: Sequence[int]) -> dict[str, Any]:
    """LitData's three generators, seeded from ``(seed, rank, *key)`` by a stable hash."""
    blob = json.dumps([int(seed), int(rank), *[int(k) for k in key]]).encode()
    s = int.from_bytes(hashlib.sha256(blob).digest()[:8], "little") % (2**32 - 1)
    return {
        "random": random.Random(s),  # noqa: S311 - user-facing generator, not for security
        "numpy": np.random.default_rng(s),
        "torch": torch.Generator().manual_seed(s),
    }


class ParallelStreamingDataset(MemberSetters, Resumable, IterableDataset):
    """Stream several :class:`StreamingDataset` objects side by side: each item holds one sample of each.

    Args:
        datasets: the datasets (at least one), all built in the same distributed environment.
        length: ``None`` (stop with the shortest dataset), an int (cycle the datasets until that many items per
            epoch) or ``float("inf")`` (cycle forever).
        force_override_state_dict: accept a state whose configuration differs (restart its epoch).
        transform: ``transform(samples)`` or ``transform(samples, rngs)`` applied to each tuple of samples.
        seed: seed of the generators passed to ``transform``.
        resume: with an int or infinite ``length``, continue each epoch where the previous one ended (else every
            epoch yields the same items). Ignored when ``length`` is None. Acts through a StreamingDataLoader's
            epochs: iterating the dataset itself starts the stream again each time, as in LitData.
        reset_rngs: seed the ``transform`` generators the same way in every epoch.
    """

    _state_kind = "parallel dataset"
    #: Workers read (epoch, start batch) from the loader's shared position, so persistent workers follow epochs.
    follows_shared_position = True

    def __init__(
        self,
        datasets: list[StreamingDataset],
        length: int | float | None = None,
        force_override_state_dict: bool = False,
        transform: Callable[..., Any] | None = None,
        seed: int = 42,
        resume: bool = True,
        reset_rngs: bool = False,
    ) -> None:
        super().__init__()
        if isinstance(datasets, StreamingDataset) or not isinstance(datasets, (list, tuple)) or not datasets:
            raise NotAStreamingDatasetError(
                "ParallelStreamingDataset needs a non-empty list of StreamingDataset objects"
            )
        for i, d in enumerate(datasets):
            if not isinstance(d, StreamingDataset):
                raise NotAStreamingDatasetError(f"datasets[{i}] is a {type(d).__name__}, not a StreamingDataset")
        if length is not None and not (
            (isinstance(length, int) and not isinstance(length, bool) and length >= 0) or length == float("inf")
        ):
            raise DatasetError(f"length must be None, an int >= 0 or float('inf'), got {length!r}")
        nargs = None
        if transform is not None:
            if not callable(transform):
                raise DatasetError(f"transform must be callable, got {type(transform).__name__}")
            nargs = _transform_nargs(transform)
            if nargs not in (1, 2):
                raise DatasetError(f"transform must take 1 or 2 positional arguments (samples[, rngs]), got {nargs}")
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise DatasetError(f"seed must be an int, got {seed!r}")
        envs = {(d.world_size, d.rank) for d in datasets}
        if len(envs) != 1:
            raise DatasetError(f"the datasets were built in different distributed environments: {sorted(envs)}")
        self._datasets = list(datasets)
        self._length = length
        self.force_override_state_dict = force_override_state_dict
        self._transform = transform
        self._transform_nargs = nargs
        self._seed = int(seed)
        self.resume = bool(resume)
        self._reset_rngs = bool(reset_rngs)
        self.world_size, self.rank = envs.pop()
        self.drop_last = False
        self.batch_size = 1
        self.num_workers = 1
        self.current_epoch = 1
        self._pending: tuple[int, int] | None = None
        self._batch_mode: BatchMode | None = None  # set by StreamingDataLoader (set_batch_mode)
        self._sub: dict[tuple[int, int], EpochPlan] = {}

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_sub"] = {}  # rebuilt where used
        return state

    # --- LitData API -------------------------------------------------------------------------------

    @property
    def datasets(self) -> list[StreamingDataset]:
        """The parallel datasets."""
        return self._datasets

    def is_cycling(self) -> bool:
        """True when ``length`` is an int or infinite (datasets restart when exhausted)."""
        return self._length is not None

    def is_infinite(self) -> bool:
        """True when ``length`` is ``float("inf")``."""
        return self._length is not None and not isinstance(self._length, int)

    def set_epoch(self, current_epoch: int) -> None:
        """Epoch of the next iteration (ignored while a loaded state is pending)."""
        if self._pending is None:
            self.current_epoch = int(current_epoch)

    def get_all_lens(self) -> list[int]:
        """Samples per dataset on this rank (one pass)."""
        return [self._sub_plan(i, 1).num_samples for i in range(len(self._datasets))]

    def get_len(self, num_workers: int = 0, batch_size: int = 1) -> int | None:
        """Items per epoch as LitData counts them: the shortest dataset, ``length``, or None when infinite."""
        if self._length is None:
            return self._epoch_positions()
        if self.is_infinite():
            return None
        return int(self._length)

    def __len__(self) -> int:
        n = self.get_len(self.num_workers, self.batch_size)
        if n is None:
            raise TypeError("an infinite ParallelStreamingDataset (length=float('inf')) has no len()")
        return n

    # --- plans -------------------------------------------------------------------------------------

    def _sub_plan(self, i: int, epoch: int) -> EpochPlan:
        """Dataset ``i``'s own order of ``epoch`` on this rank: every sample once, as in its own plan."""
        return member_plan(self._sub, self._datasets, i, epoch, self.world_size, self.rank)

    def _epoch_positions(self) -> int:
        """Stream positions of one epoch on this rank."""
        if self._length is None:
            return min(d.total_items // self.world_size for d in self._datasets)
        if self.is_infinite():
            return INFINITE_EPOCH
        n = int(self._length)
        return n // self.world_size + (self.rank < n % self.world_size)

    def plan(self, epoch: int | None = None, batch_size: int | None = None) -> ParallelPlan:
        """The plan of this rank for ``epoch``."""
        epoch = self.current_epoch if epoch is None else int(epoch)
        b = self.batch_size if batch_size is None else int(batch_size)
        if epoch < 1:
            raise PlanError(f"epoch must be >= 1, got {epoch}")
        n = self._epoch_positions()
        base = (epoch - 1) * n if (self.is_cycling() and self.resume) else 0
        config = {
            "parallel_plan_version": PARALLEL_PLAN_VERSION,
            "length": None if self._length is None else ("inf" if self.is_infinite() else int(self._length)),
            "resume": self.resume if self.is_cycling() else None,
            "world_size": self.world_size,
            "batch_size": b,
            "drop_last": self.drop_last,
            "dataset_fingerprints": [self._sub_plan(i, 1).fingerprint for i in range(len(self._datasets))],
        }
        plan = ParallelPlan(epoch, self.rank, base, n, config)
        if plan.num_batches == 0:
            raise PlanError(
                f"the parallel datasets leave no batch of {b} on rank {self.rank} of {self.world_size} "
                f"({n} items per epoch, drop_last={self.drop_last})"
            )
        return plan

    # --- reading -----------------------------------------------------------------------------------

    def _locations(self, i: int, epoch: int, start: int, end: int) -> tuple[np.ndarray, np.ndarray]:
        """(chunk indexes, item indexes) of stream positions ``[start, end)`` in dataset ``i``."""
        n_i = self._sub_plan(i, 1).num_samples
        if n_i == 0:
            raise DatasetError(f"dataset {i} of the ParallelStreamingDataset has no sample on rank {self.rank}")
        cis, iis = [], []
        p = start
        while p < end:
            cycle, k = divmod(p, n_i)
            take = min(end - p, n_i - k)
            ep = cycle + 1 if self.is_cycling() else epoch
            ci, ii = self._sub_plan(i, ep).sample_range(k, k + take)
            cis.append(ci)
            iis.append(ii)
            p += take
        if len(cis) == 1:
            return cis[0], iis[0]
        return np.concatenate(cis), np.concatenate(iis)

    def _rng_key(self, plan: ParallelPlan, j: int) -> list[int]:
        if self._reset_rngs:
            return [j]
        if self._length is None or not self.resume:
            return [plan.epoch, plan.positions(j)[0]]
        return [plan.positions(j)[0]]  # positions never repeat when the stream continues across epochs

    def iter_batches(
        self,
        epoch: int,
        start_batch: int,
        worker_id: int,
        num_workers: int,
        batch_size: int,
        collate_fn: Callable[[list[Any]], Any] | None,
        collate: bool = True,
    ) -> Iterator[tuple[int, Any]]:
        """Yield ``(batch_number, batch)`` for the batches this worker builds."""
        plan = self.plan(epoch, batch_size)
        readers = [d.chunk_reader() for d in self._datasets]

        def schedules(batch_ids: Sequence[int]) -> list[Schedule]:
            # finite epochs with cached datasets: prefetch each dataset's chunks in first-use order (an infinite
            # one has no end to schedule to: its readers fetch on demand)
            out: list[Schedule] = [[] for _ in readers]
            if not self.is_infinite():
                for i, r in enumerate(readers):
                    if r.cache is not None:
                        out[i] = schedule_from_uses(
                            (n, np.unique(self._locations(i, epoch, *plan.positions(j))[0]).tolist())
                            for n, j in enumerate(batch_ids)
                        )
            return out

        def build(n: int, j: int) -> Any:
            a, b = plan.positions(j)
            columns = []
            for i, d in enumerate(self._datasets):
                ci, ii = self._locations(i, epoch, a, b)
                columns.append(d.samples_at(readers[i], ci, ii))
            items: list[Any] = list(zip(*columns))
            if self._transform is not None:
                if self._transform_nargs == 2:
                    rngs = _rngs(self._seed, self.rank, self._rng_key(plan, j))
                    items = [self._transform(t, rngs) for t in items]
                else:
                    items = [self._transform(t) for t in items]
            return items if not collate else (collate_fn or default_collate)(items)

        yield from batch_loop.iter_batches(plan, worker_id, num_workers, start_batch, build, readers, schedules)

    def set_batch_mode(self, mode: BatchMode | None) -> None:
        """Yield ``(batch_number, batch)`` per ``mode`` from the next ``iter()`` on (None: plain samples again)."""
        self._batch_mode = mode

    def __iter__(self) -> Iterator[Any]:
        """Tuples of this worker's batches (plain DataLoader), or ``(batch_number, batch)`` in batch mode (read
        when ``iter()`` is called, see :meth:`StreamingDataset.__iter__`)."""
        w = WorkerEnv.detect()
        mode = self._batch_mode
        if mode is None:
            return self._plain_iter("parallel", w.worker_id, w.num_workers, self.rank)
        epoch, start = mode.epoch_and_start()
        batches = self.iter_batches(epoch, start, w.worker_id, w.num_workers, mode.batch_size, mode.collate_fn)
        return worker_items(batches, mode)

    def _pass_advances_epoch(self) -> bool:
        """A cycling dataset with ``resume=True`` starts every pass outside a StreamingDataLoader at the start of
        its stream, as LitData's does (its ``resume`` acts through the loader's epochs: its own test iterates a
        dataset twice and expects the same samples); any other pass moves to the next epoch."""
        return not (self.is_cycling() and self.resume)

    # --- state -------------------------------------------------------------------------------------

    def state_dict(  # type: ignore[override]
        self,
        num_workers: int = 0,
        batch_size: int = 1,
        num_samples_yielded: Any = None,
        *,
        epoch: int | None = None,
        batches_consumed: int | None = None,
    ) -> dict[str, Any]:
        """Resume state (LitData's signature ``state_dict(num_workers, batch_size, num_samples_yielded=None)``).

        :class:`~streamscope.engine.dataloader.StreamingDataLoader` calls it as
        ``state_dict(num_samples_yielded, num_workers, batch_size, epoch=..., batches_consumed=...)``, the order of
        StreamingDataset's method; the keyword ``batches_consumed`` tells the two calls apart.
        """
        if batches_consumed is not None:  # the loader's call (StreamingDataset argument order)
            num_samples_yielded, num_workers, batch_size = num_workers, batch_size, num_samples_yielded
        if isinstance(num_samples_yielded, (list, tuple)):  # LitData passes per-dataset counts
            num_samples_yielded = max((int(x) for x in num_samples_yielded), default=0)
        return super().state_dict(
            int(num_samples_yielded or 0), num_workers, batch_size, epoch=epoch, batches_consumed=batches_consumed
        )

    def litdata_state(self) -> dict[str, Any]:
        # LitData's per-dataset entries ("0", "1", ...): each dataset's identity and selection
        return {str(i): {**d.checkpoint_identity(), **d.litdata_state()} for i, d in enumerate(self._datasets)}

    def checkpoint_identity(self) -> dict[str, Any]:
        return {
            "length": None if self._length is None else ("inf" if self.is_infinite() else int(self._length)),
            "seed": self._seed,
            "resume": self.resume,
            "reset_rngs": self._reset_rngs,
            "world_size": self.world_size,
            "datasets": {str(i): d.checkpoint_identity() for i, d in enumerate(self._datasets)},
        }

    def check_checkpoint_identity(self, state: dict[str, Any]) -> list[str]:
        return member_identity_diffs(
            state, self.checkpoint_identity(), ("length", "seed", "resume", "reset_rngs", "world_size"), self._datasets
        )
