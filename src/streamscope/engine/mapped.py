"""StreamingDataLoader over a map-style dataset that fetches whole batches (``__getitems__``), such as
``StreamingRawDataset``: the loader's protocol (epoch plan, batches built in workers, exact resume) around it.

The epoch plan is the dataset's indices, in order or in a permutation seeded by ``(seed, epoch)``, split among
the ranks (each rank takes every ``world_size``-th position; with several ranks the tail that does not divide
evenly is left out so every rank has as many batches), cut into batches of ``batch_size``. Worker ``w`` of
``W`` builds batches ``w, w+W, ...`` (as for a StreamingDataset), so the order and a resume position (a batch
count) do not depend on the number of workers. Before each batch the worker tells the dataset which indices it
will ask for next (``expect``, when the dataset has it), so its look-ahead fetches exactly those, shuffled or not.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from torch.utils.data import IterableDataset
from torch.utils.data._utils.collate import default_collate

from streamscope._core.errors import DatasetError
from streamscope.engine import batch_loop
from streamscope.engine.batch_mode import BatchMode, LoaderSettings
from streamscope.engine.batching import worker_items
from streamscope.engine.distributed import DistEnv, WorkerEnv
from streamscope.engine.plan_protocol import fingerprint_of, position_state, worker_batches
from streamscope.engine.resume import mapped_position

__all__ = ["MappedBatches", "MappedPlan", "fetches_batches"]

#: Most indices handed to the dataset's ``expect`` before a batch (the look-ahead reads only what it needs).
_EXPECT_MAX = 1024
#: Keys of the state that fix the order: a mid-epoch resume must match them.
_ORDER_KEYS = ("length", "shuffle", "seed", "drop_last", "world_size", "rank")


def fetches_batches(dataset: Any) -> bool:
    """True for a map-style dataset the loader can drive through :class:`MappedBatches` (one with a length,
    ``__getitems__`` and a knob board, as ``StreamingRawDataset``)."""
    return all(hasattr(dataset, a) for a in ("__len__", "__getitems__", "knobs")) and not isinstance(
        dataset, IterableDataset
    )


@dataclass(frozen=True)
class MappedPlan:
    """One epoch of one rank: the dataset indices in order, cut into batches (a
    :class:`~streamscope.engine.plan_protocol.Plan`; ``config`` is what defines the order besides epoch and rank)."""

    order: np.ndarray
    batch_size: int
    num_batches: int
    rank: int = 0
    epoch: int = 1
    config: dict[str, Any] = field(default_factory=dict)
    fingerprint: str = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "fingerprint", fingerprint_of(self.describe()))

    def describe(self) -> dict[str, Any]:
        """Everything that defines the order except epoch and rank."""
        return {**self.config, "batch_size": self.batch_size}

    def batches_for_worker(self, worker_id: int, num_workers: int, start_batch: int = 0) -> range:
        """The batches worker ``worker_id`` builds (the rule of every plan: ``worker_batches``)."""
        return worker_batches(self.num_batches, worker_id, num_workers, start_batch)

    def state(self, batches_consumed: int) -> dict[str, Any]:
        """JSON-serialisable state after ``batches_consumed`` batches."""
        return position_state(self, batches_consumed, "mapped")

    @property
    def num_samples(self) -> int:
        return min(len(self.order), self.num_batches * self.batch_size)

    def indices(self, j: int) -> list[int]:
        """The dataset indices of batch ``j``."""
        a = j * self.batch_size
        out: list[int] = self.order[a : min(a + self.batch_size, self.num_samples)].tolist()
        return out

    def batch_len(self, j: int) -> int:
        a = j * self.batch_size
        return max(0, min(a + self.batch_size, self.num_samples) - a)


class MappedBatches(LoaderSettings, IterableDataset[Any]):
    """The loader's view of a batch-fetching map-style dataset (see the module docstring).

    Args:
        dataset: the map-style dataset (``dataset.__getitems__(indices)`` returns the items of a batch).
        shuffle: a new permutation each epoch, seeded by ``(seed, epoch)``.
        drop_last: leave out the last batch when it is short.
        seed: the permutations' seed.
    """

    #: Workers read (epoch, start batch) from the loader's shared position, so persistent workers follow epochs.
    follows_shared_position = True

    def __init__(self, dataset: Any, shuffle: bool = False, drop_last: bool = False, seed: int = 42) -> None:
        self.dataset = dataset
        self.shuffle = bool(shuffle)
        self.drop_last = bool(drop_last)
        self.seed = int(seed)
        env = DistEnv.detect()
        self.world_size, self.rank = env.world_size, env.rank
        self.current_epoch = 1
        self.batch_size = 1
        self.num_workers = 0
        self._pending: Any = None
        self._batch_mode: BatchMode | None = None
        self._plans: dict[tuple[int, int], MappedPlan] = {}

    # --- what the loader and the tuner read ------------------------------------------------------------

    @property
    def knobs(self) -> Any:
        return self.dataset.knobs

    @property
    def input_dir(self) -> Any:
        return getattr(self.dataset, "input_dir", None)

    def tune_info(self) -> dict[str, Any]:
        """What the tuner needs to know of the dataset (its own ``tune_info(num_workers)``), else nothing."""
        info = getattr(self.dataset, "tune_info", None)
        return dict(info(self.num_workers)) if info is not None else {}

    # --- settings (the loader's protocol) ---------------------------------------------------------------

    def set_epoch(self, current_epoch: int) -> None:
        self.current_epoch = int(current_epoch)

    def set_batch_mode(self, mode: BatchMode | None) -> None:
        self._batch_mode = mode

    # --- plan --------------------------------------------------------------------------------------------

    def plan(self, epoch: int | None = None, batch_size: int | None = None) -> MappedPlan:
        epoch = self.current_epoch if epoch is None else int(epoch)
        b = self.batch_size if batch_size is None else int(batch_size)
        key = (epoch, b, self.shuffle, self.drop_last, self.seed)
        plan = self._plans.get(key)  # type: ignore[arg-type]
        if plan is not None:
            return plan
        n = len(self.dataset)
        if self.shuffle:
            order = np.random.default_rng([self.seed, epoch]).permutation(n)
        else:
            order = np.arange(n)
        w = max(1, self.world_size)
        if w > 1:
            order = order[: (n // w) * w][self.rank :: w]
        m = len(order)
        batches = m // b if self.drop_last else -(-m // b)
        if batches == 0:
            raise DatasetError(
                f"{type(self.dataset).__name__} has {n} items: rank {self.rank} of {w} gets no batch of {b}"
            )
        plan = MappedPlan(
            order=order, batch_size=b, num_batches=batches, rank=self.rank, epoch=epoch, config=self._order_state()
        )
        if len(self._plans) > 4:
            self._plans.clear()
        self._plans[key] = plan  # type: ignore[index]
        return plan

    def __len__(self) -> int:
        return self.plan().num_samples

    # --- batches -----------------------------------------------------------------------------------------

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
        """``(batch_number, batch)`` for the batches worker ``worker_id`` of ``num_workers`` builds."""
        plan = self.plan(epoch, batch_size)
        ids = plan.batches_for_worker(worker_id, num_workers, start_batch)
        expect = getattr(self.dataset, "expect", None)
        fetch = self.dataset.__getitems__
        join = collate_fn or default_collate

        def build(k: int, j: int) -> Any:
            if expect is not None:  # the look-ahead fetches exactly this worker's next items
                expect(_upcoming(plan, ids[k + 1 :]))
            samples = fetch(plan.indices(j))
            return join(samples) if collate else samples

        def done() -> None:
            if expect is not None:
                expect(())

        yield from batch_loop.iter_batches(plan, worker_id, num_workers, start_batch, build, done=done)

    def __iter__(self) -> Iterator[Any]:
        w = WorkerEnv.detect()
        mode = self._batch_mode
        if mode is None:  # plain iteration: this worker's items
            return (
                s
                for _, batch in self.iter_batches(
                    self.current_epoch, 0, w.worker_id, w.num_workers, self.batch_size, None, collate=False
                )
                for s in batch
            )
        epoch, start = mode.epoch_and_start()
        batches = self.iter_batches(epoch, start, w.worker_id, w.num_workers, mode.batch_size, mode.collate_fn)
        return iter(worker_items(batches, mode))

    # --- state -------------------------------------------------------------------------------------------

    def _order_state(self) -> dict[str, Any]:
        return {
            "length": len(self.dataset),
            "shuffle": self.shuffle,
            "seed": self.seed,
            "drop_last": self.drop_last,
            "world_size": self.world_size,
            "rank": self.rank,
        }

    def state_dict(
        self,
        num_samples_yielded: int,
        num_workers: int,
        batch_size: int,
        epoch: int | None = None,
        batches_consumed: int = 0,
    ) -> dict[str, Any]:
        return {
            "kind": "mapped",
            "dataset": type(self.dataset).__name__,
            "epoch": int(self.current_epoch if epoch is None else epoch),
            "batches_consumed": int(batches_consumed),
            "num_samples_yielded": int(num_samples_yielded),
            "num_workers": int(num_workers),
            "batch_size": int(batch_size),
            **self._order_state(),
        }

    def resume_position(self, state: dict[str, Any], batch_size: int) -> tuple[int, int]:
        """``(epoch, first batch)`` to resume from ``state``.

        Raises:
            StateDictError: the state is not one of this view, or its order differs (another dataset length,
                shuffle, seed, drop_last or world).
        """
        return mapped_position(state, self._order_state(), _ORDER_KEYS, type(self.dataset).__name__)


def _upcoming(plan: MappedPlan, ids: Sequence[int]) -> list[int]:
    """The indices of the batches ``ids`` (this worker's next ones), at most :data:`_EXPECT_MAX`."""
    out: list[int] = []
    for j in ids:
        out.extend(plan.indices(j))
        if len(out) >= _EXPECT_MAX:
            return out[:_EXPECT_MAX]
    return out
