"""CombinedStreamingDataset: several StreamingDatasets mixed by weight, with exact resume.

LitData's arguments and meaning (``datasets, seed=42, weights=None, iterate_over_all=True,
batching_method="stratified" | "per_stream", force_override_state_dict=False``). The order of an epoch is a
:class:`~streamscope.engine.combined_plan.CombinedPlan`: which dataset each sample of each batch comes from,
drawn by ``(seed, epoch, rank)``; each dataset contributes its own per-rank sample sequence (its own shuffle,
seed, subsample and shuffle buffer), consumed in order. See :mod:`streamscope.engine.combined_plan` for the
mixing rules and how ranks get equal batch counts.

Iteration follows the single-dataset protocol: with a plain ``torch.utils.data.DataLoader`` the dataset
yields samples (worker ``w`` of ``W`` builds batches ``w, w+W, ...`` of ``batch_size`` samples, default 1);
under :class:`~streamscope.engine.dataloader.StreamingDataLoader` (batch mode) workers yield
``(batch_number, batch)`` and the loader checks the order and counts batches for ``state_dict``. The state
records the batch position, so resuming is exact whatever the number of workers, after datasets are
exhausted, and with ``per_stream`` batches (unlike LitData 0.2.68, litdata-facts §8.11).

As in LitData, ``set_batch_size`` also takes one batch size per dataset for ``per_stream`` batching: a batch
drawn from dataset ``d`` then holds at most ``batch_size[d]`` samples.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
from torch.utils.data import IterableDataset
from torch.utils.data._utils.collate import default_collate

from streamscope._core.errors import DatasetError, StateDictError
from streamscope.engine import batch_loop
from streamscope.engine.batch_mode import BatchMode
from streamscope.engine.batching import worker_items
from streamscope.engine.combined_plan import BATCHING_METHODS, CombinedPlan, check_batch_size, make_combined_plan
from streamscope.engine.dataset import StreamingDataset
from streamscope.engine.distributed import WorkerEnv
from streamscope.engine.member_plans import member_plan
from streamscope.engine.members import MemberSetters
from streamscope.engine.plan import EpochPlan
from streamscope.engine.read_schedule import Schedule, schedule_from_uses
from streamscope.engine.resume import LITDATA_KEYS, Resumable, member_identity_diffs

__all__ = ["CombinedStreamingDataset"]


def _litdata_member_states(state: Any, n: int) -> list[dict[str, Any]] | None:
    """The member states of a state LitData wrote for a combination of ``n`` datasets (``{"0": ..., "1": ...}``,
    each a StreamingDataset state), else None."""
    if not isinstance(state, dict) or "plan_state" in state or set(state) != {str(i) for i in range(n)}:
        return None
    subs = [state[str(i)] for i in range(n)]
    return subs if all(isinstance(s, dict) and LITDATA_KEYS <= set(s) for s in subs) else None


class CombinedStreamingDataset(MemberSetters, Resumable, IterableDataset[Any]):
    """Iterate several :class:`StreamingDataset` objects as one, mixing them by weight.

    Args:
        datasets: the datasets (at least one), all built in the same distributed environment.
        seed: seed of the mixing draws (each dataset keeps its own shuffle seed).
        weights: relative sampling weight per dataset; default proportional to the datasets' sizes. Only
            with ``iterate_over_all=False``: passing weights with ``iterate_over_all=True`` (the default)
            raises :class:`~streamscope.DatasetError` (a ``ValueError``), as LitData does.
        iterate_over_all: continue until every dataset is exhausted (draws in proportion to the datasets'
            sizes, renormalised as datasets run out) or stop at the first exhausted dataset.
        batching_method: ``"stratified"`` (each sample drawn by weight) or ``"per_stream"`` (each batch
            from one dataset).
        force_override_state_dict: accept a state whose configuration differs (restart its epoch).

    Batch size (set by the loader, or :meth:`set_batch_size`): one int for every dataset, or with
    ``"per_stream"`` a list of one int per dataset (LitData's ``set_batch_size([b_0, b_1, ...])``): a batch
    from dataset ``d`` then holds at most ``b_d`` samples (fewer at the dataset's end or when ranks must be
    evened out). Iterated directly, the dataset yields its samples batch after batch, so dataset ``d``'s runs
    are at most ``b_d`` long while other datasets are left. ``StreamingDataLoader(combined, batch_size=[2, 3])``
    yields those batches, with exact resume (LitData's loader rejects a list: torch's batch_size check).
    """

    _state_kind = "combination of datasets"

    def __init__(
        self,
        datasets: Sequence[StreamingDataset],
        seed: int = 42,
        weights: Sequence[float] | None = None,
        iterate_over_all: bool = True,
        batching_method: str = "stratified",
        force_override_state_dict: bool = False,
    ) -> None:
        super().__init__()
        if isinstance(datasets, StreamingDataset) or not isinstance(datasets, (list, tuple)) or not datasets:
            raise DatasetError("CombinedStreamingDataset needs a non-empty list of StreamingDataset objects")
        for i, d in enumerate(datasets):
            if not isinstance(d, StreamingDataset):
                raise DatasetError(f"datasets[{i}] is a {type(d).__name__}, not a StreamingDataset")
        if batching_method not in BATCHING_METHODS:
            raise DatasetError(f"batching_method must be one of {BATCHING_METHODS}, got {batching_method!r}")
        if weights is not None:
            if len(weights) != len(datasets):
                raise DatasetError(f"{len(weights)} weights for {len(datasets)} datasets")
            if any((not isinstance(w, (int, float))) or isinstance(w, bool) or not w >= 0 for w in weights):
                raise DatasetError(f"weights must be numbers >= 0, got {list(weights)}")
            if sum(weights) <= 0:
                raise DatasetError(f"weights sum to zero: {list(weights)}")
        if weights is not None and iterate_over_all:
            raise DatasetError(
                f"weights={list(weights)} cannot be used with iterate_over_all=True (the default), as in LitData: "
                f"iterating over all the datasets draws them in proportion to their sizes. Pass "
                f"iterate_over_all=False to sample by weight (the epoch then ends when a dataset is exhausted), or "
                f"leave weights out"
            )
        if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
            raise DatasetError(f"seed must be an int >= 0, got {seed!r}")
        envs = {(d.world_size, d.rank) for d in datasets}
        if len(envs) != 1:
            raise DatasetError(f"the datasets were built in different distributed environments: {sorted(envs)}")
        self._datasets = list(datasets)
        self._seed = int(seed)
        self._weights = None if weights is None else [float(w) for w in weights]
        self._iterate_over_all = bool(iterate_over_all)
        self.batching_method = batching_method
        self.force_override_state_dict = force_override_state_dict
        self.world_size, self.rank = envs.pop()
        self.drop_last = any(d.drop_last for d in self._datasets)
        #: samples per batch: an int, or (``"per_stream"`` only) one per dataset (see :meth:`set_batch_size`)
        self.batch_size: Any = 1
        self.num_workers = 0
        self.current_epoch = 1
        self._pending: tuple[int, int] | None = None
        self._batch_mode: BatchMode | None = None  # set by StreamingDataLoader (set_batch_mode)
        self._plans: dict[tuple[Any, ...], CombinedPlan] = {}
        self._sub: dict[tuple[int, int], EpochPlan] = {}

    def __getstate__(self) -> dict[str, Any]:
        # plans are rebuilt where they are used (a combined plan holds one int per sample: keep it out of
        # the pickles sent to spawned workers)
        state = dict(self.__dict__)
        state["_plans"] = {}
        state["_sub"] = {}
        return state

    # --- LitData setters ---------------------------------------------------------------------------

    @property
    def datasets(self) -> list[StreamingDataset]:
        """The combined datasets."""
        return self._datasets

    def set_epoch(self, current_epoch: int) -> None:
        """Epoch of the next iteration (ignored while a loaded state is pending)."""
        if self._pending is None:
            self.current_epoch = int(current_epoch)
        for d in self._datasets:
            d.set_epoch(current_epoch)

    def set_batch_size(self, batch_size: int | Sequence[int]) -> None:
        """Samples per batch: one int for every dataset, or (``batching_method="per_stream"`` only) a list or
        tuple of one int >= 1 per dataset, each passed on to its dataset (LitData's per-dataset batch sizes).

        Raises:
            DatasetError: (a ``ValueError``) a size that is not an int >= 1, a list whose length is not the
                number of datasets (LitData raises ``ValueError`` too), or a list with ``"stratified"`` batching.
        """
        if not isinstance(batch_size, (list, tuple)):
            super().set_batch_size(batch_size)  # type: ignore[arg-type]
            return
        sizes = check_batch_size(batch_size, len(self._datasets), self.batching_method, DatasetError)
        assert isinstance(sizes, tuple)
        self.batch_size = list(sizes) if isinstance(batch_size, list) else sizes
        for d, b in zip(self._datasets, sizes):
            d.set_batch_size(b)

    def _plan_batch_size(self, batch_size: Any) -> int | tuple[int, ...]:
        """``batch_size`` (None: this dataset's) as the plan cache and :func:`make_combined_plan` take it."""
        b = self.batch_size if batch_size is None else batch_size
        if isinstance(b, (list, tuple)):
            return check_batch_size(b, len(self._datasets), self.batching_method, DatasetError)
        return int(b)

    def _forget_plans(self) -> None:
        """Drop the combined and per-member plans (rebuilt where they are used)."""
        self._plans.clear()
        self._sub.clear()

    # --- plans -------------------------------------------------------------------------------------

    def _sub_plan(self, i: int, epoch: int) -> EpochPlan:
        """Dataset ``i``'s own order on this rank: every sample once, rank slices as in its own plan."""
        return member_plan(self._sub, self._datasets, i, epoch, self.world_size, self.rank)

    def plan(self, epoch: int | None = None, batch_size: int | Sequence[int] | None = None) -> CombinedPlan:
        """The combined plan of this rank for ``epoch`` (cached); ``batch_size`` may be one per dataset."""
        epoch = self.current_epoch if epoch is None else int(epoch)
        b = self._plan_batch_size(batch_size)
        key = (epoch, b, self.drop_last)
        plan = self._plans.get(key)
        if plan is None:
            subs = [self._sub_plan(i, epoch) for i in range(len(self._datasets))]
            if len(self._plans) > 4:
                self._plans.clear()
            plan = make_combined_plan(
                [p.total_samples for p in subs],
                world_size=self.world_size,
                rank=self.rank,
                batch_size=b,
                seed=self._seed,
                epoch=epoch,
                weights=self._weights,
                iterate_over_all=self._iterate_over_all,
                batching_method=self.batching_method,
                drop_last=self.drop_last,
                dataset_fingerprints=[p.fingerprint for p in subs],
            )
            self._plans[key] = plan
        return plan

    def __len__(self) -> int:
        return self.plan().num_samples

    def get_len(self, num_workers: int = 0, batch_size: int | Sequence[int] = 1) -> int:
        """Samples this rank yields per epoch with this batch size (LitData signature)."""
        return self.plan(batch_size=batch_size).num_samples

    # --- reading -----------------------------------------------------------------------------------

    def _locations(
        self, epoch: int, d: np.ndarray, k: np.ndarray
    ) -> list[tuple[int, np.ndarray, np.ndarray, np.ndarray]]:
        """Per dataset in the batch: (dataset, positions in the batch, chunk indexes, item indexes)."""
        out = []
        for i in np.unique(d).tolist():
            pos = np.flatnonzero(d == i)
            ks = k[pos]  # consecutive and increasing: a dataset's samples are consumed in order
            ci, ii = self._sub_plan(i, epoch).sample_range(int(ks[0]), int(ks[-1]) + 1)
            out.append((i, pos, ci, ii))
        return out

    def iter_batches(
        self,
        epoch: int,
        start_batch: int,
        worker_id: int,
        num_workers: int,
        batch_size: int | Sequence[int],
        collate_fn: Callable[[list[Any]], Any] | None,
        collate: bool = True,
    ) -> Iterator[tuple[int, Any]]:
        """Yield ``(batch_number, batch)`` for the batches this worker builds."""
        plan = self.plan(epoch, batch_size)
        readers = [d.chunk_reader() for d in self._datasets]

        def schedules(batch_ids: Sequence[int]) -> list[Schedule]:
            # per dataset: the chunks each of this worker's batches reads there
            uses: list[list[tuple[int, list[int]]]] = [[] for _ in self._datasets]
            if any(r.cache is not None for r in readers):
                for n, j in enumerate(batch_ids):
                    for i, _, ci, _ in self._locations(epoch, *plan.batch_arrays(j)):
                        if readers[i].cache is not None:
                            uses[i].append((n, np.unique(ci).tolist()))
            return [schedule_from_uses(u) for u in uses]

        def build(n: int, j: int) -> Any:
            d, k = plan.batch_arrays(j)
            samples: list[Any] = [None] * len(d)
            for i, pos, ci, ii in self._locations(epoch, d, k):
                for p, s in zip(pos.tolist(), self._datasets[i].samples_at(readers[i], ci, ii)):
                    samples[p] = s
            return samples if not collate else (collate_fn or default_collate)(samples)

        yield from batch_loop.iter_batches(plan, worker_id, num_workers, start_batch, build, readers, schedules)

    def __iter__(self) -> Iterator[Any]:
        """Samples of this worker's batches (plain DataLoader), or ``(batch_number, batch)`` in batch mode.

        Batch mode is read when ``iter()`` is called, not when the iterator first runs:
        :class:`~streamscope.engine.dataloader.StreamingDataLoader` sets it only while it creates its iterator
        (torch's single-process loader calls ``iter(dataset)`` then, and runs the iterator later).
        """
        return self._iter(self._batch_mode, WorkerEnv.detect())

    def set_batch_mode(self, mode: BatchMode | None) -> None:
        """Yield ``(batch_number, batch)`` per ``mode`` from the next ``iter()`` on (None: plain samples again)."""
        self._batch_mode = mode

    def _iter(self, mode: BatchMode | None, w: WorkerEnv) -> Iterator[Any]:
        """The generator of :meth:`__iter__` for the batch ``mode`` captured there (None: plain samples)."""
        if mode is not None:
            batches = self.iter_batches(
                mode.epoch, mode.start, w.worker_id, w.num_workers, mode.batch_size, mode.collate_fn
            )
            yield from worker_items(batches, mode)
            return
        yield from self._plain_pass("combined", w.worker_id, w.num_workers, self.rank)

    # --- state -------------------------------------------------------------------------------------

    def _state_batch_size(self, batch_size: Any) -> Any:
        """One int, or (per-dataset sizes) the checked sizes as a list, as the state records them."""
        if not isinstance(batch_size, (list, tuple)):
            return int(batch_size)
        return list(check_batch_size(batch_size, len(self._datasets), self.batching_method, DatasetError))

    def _batches_started(self, plan: Any, num_samples_yielded: int, batch_size: Any) -> int:
        """With per-dataset sizes the batches that begin within ``num_samples_yielded`` samples are consumed."""
        if isinstance(batch_size, list):
            return int(plan.batches_started(num_samples_yielded))
        return super()._batches_started(plan, num_samples_yielded, batch_size)

    def resume_position(self, state: dict[str, Any], batch_size: Any) -> tuple[int, int]:
        """``(epoch, start_batch)`` to continue from; a state LitData's StreamingDataLoader wrote for a
        combination (one StreamingDataset state per dataset, under ``"0"``, ``"1"``, ...) is taken too.

        LitData's per-dataset counts cannot be replayed in streamscope's order of the epoch (the two engines
        interleave the datasets differently), so, as for a single dataset's LitData state, the epoch continues
        after as many samples as LitData's datasets yielded in all, in this combination's order.
        """
        subs = _litdata_member_states(state, len(self._datasets))
        if subs is None:
            return super().resume_position(state, batch_size)
        try:
            epoch = max(1, int(subs[0]["current_epoch"]))
            yielded = sum(int(s["num_samples_yielded"]) for s in subs)
            saved = {int(s["batch_size"]) for s in subs}
            num_workers = int(subs[0].get("num_workers", 1))
        except (TypeError, ValueError) as exc:
            raise StateDictError(f"malformed LitData {type(self).__name__} state: {exc}") from None
        if isinstance(batch_size, (list, tuple)) or saved != {int(batch_size)}:
            raise StateDictError(f"the LitData state was saved with batch_size={sorted(saved)}, now {batch_size}")
        diffs = [
            f"dataset {i}: {d}"
            for i, (ds, sub) in enumerate(zip(self._datasets, subs))
            for d in ds.check_litdata_identity(sub)
        ]
        return self._litdata_position(epoch, yielded, num_workers, diffs, int(batch_size))

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Resume a plain-DataLoader iteration from :meth:`state_dict` output (per-dataset batch sizes too).

        Raises:
            StateDictError: the state belongs to another configuration (unless ``force_override_state_dict``:
                the saved epoch then restarts, with this dataset's batch size when the saved sizes do not fit).
        """
        sizes = state_dict.get("batch_size") if isinstance(state_dict, dict) else None
        if not isinstance(sizes, (list, tuple)):
            super().load_state_dict(state_dict)
            return
        try:
            b = list(check_batch_size(sizes, len(self._datasets), self.batching_method, StateDictError))
        except StateDictError as exc:
            if not self.force_override_state_dict:
                raise StateDictError(f"the saved state does not fit this {self._state_kind}: {exc}") from None
            self._pending = (max(1, int(state_dict.get("current_epoch", 1))), 0)
            self.current_epoch = self._pending[0]
            return
        self.batch_size = b
        self._pending = self.resume_position(state_dict, b)
        self.current_epoch = self._pending[0]

    def checkpoint_identity(self) -> dict[str, Any]:
        return {
            "seed": self._seed,
            "weights": self._weights,
            "iterate_over_all": self._iterate_over_all,
            "batching_method": self.batching_method,
            "world_size": self.world_size,
            "datasets": {str(i): d.checkpoint_identity() for i, d in enumerate(self._datasets)},
        }

    def check_checkpoint_identity(self, state: dict[str, Any]) -> list[str]:
        return member_identity_diffs(
            state,
            self.checkpoint_identity(),
            ("seed", "weights", "iterate_over_all", "batching_method", "world_size"),
            self._datasets,
        )
