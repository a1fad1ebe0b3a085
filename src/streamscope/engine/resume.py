"""Resume, in one place: the state of a plan position, its checks, where a run continues, and the datasets' side.

Plan side (any :class:`~streamscope.engine.plan_protocol.Plan`): a plan's :meth:`state` is a :class:`ResumeState`
(epoch, ``batches_consumed``, fingerprint and the plan's ``describe()``); :func:`check_state` names every setting
in which a state and a plan differ; :func:`resume_point` says where to continue (a complete epoch continues at
batch 0 of the next one); :func:`resume_plan` continues an EpochPlan's epoch also with another world size or
batch size (elastic resume): the rest of the saved epoch, the samples no rank consumed, is cut into the new
ranks' slices and batches.

Dataset side (:class:`Resumable`, mixed into StreamingDataset, Combined and Parallel): a state holds
``current_epoch``, the dataset's identity (what defines the order) and the plan's exact position ``plan_state``.
Resuming checks all three and continues at the first batch not yet consumed. The loader of a map-style dataset
(StreamingRawDataset through ``engine/mapped.py``) records its epoch and ``batches_consumed`` with the settings that
fix its order: :func:`mapped_position` checks them and says where it continues.

States written by LitData (a StreamingDataset state has no ``plan_state``) are accepted too: the identity is
checked on LitData's own keys (input dir, seed, shuffle, drop_last, item loader, world size and the
``subsampled_files``/``region_of_interest`` selection), and the position is LitData's ``num_samples_yielded``
in ``current_epoch``: the first ``ceil(num_samples_yielded / batch_size)`` batches of the epoch count as
consumed. Where LitData's order equals streamscope's (no shuffle, ``num_workers`` 0 or 1, one rank) the resumed
loader yields exactly the samples LitData would still have yielded. Otherwise (shuffle, or several workers,
which make LitData interleave per-worker shares) the two engines order an epoch differently; the resumed
loader then yields the samples not yet reached in *streamscope's* order of that epoch: the same number of
samples as LitData would, and a complete epoch again from the next one on. A state saved after a complete
epoch continues with a full next epoch (see ``_litdata_resume_position`` for how its number is read).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypedDict

import numpy as np
from torch.utils.data import get_worker_info

from streamscope import events as ev
from streamscope._core.errors import StateDictError
from streamscope.engine.plan import EpochPlan, make_plan
from streamscope.engine.plan_protocol import Plan
from streamscope.events import kinds

__all__ = [
    "LITDATA_KEYS",
    "PassIterator",
    "ResumeState",
    "Resumable",
    "batches_from_samples",
    "check_state",
    "mapped_position",
    "member_identity_diffs",
    "resume_plan",
    "resume_point",
]


#: Keys of a StreamingDataset state_dict written by LitData 0.2.68 (enough to tell it from other dicts).
LITDATA_KEYS = frozenset({"num_samples_yielded", "num_workers", "batch_size", "current_epoch", "seed", "shuffle"})


class PassIterator:
    """The iterator of one plain pass over a dataset, with ``len()``: the dataset's length.

    LitData's ``iter(dataset)`` returns the dataset itself, so code written for it may call ``len(iter(ds))``.
    """

    __slots__ = ("_gen", "_owner")

    def __init__(self, gen: Iterator[Any], owner: Any) -> None:
        self._gen = gen
        self._owner = owner

    def __iter__(self) -> PassIterator:
        return self

    def __next__(self) -> Any:
        return next(self._gen)

    def __len__(self) -> int:
        return len(self._owner)

    def close(self) -> None:
        """Stop the pass early (its open spans and readers are closed)."""
        self._gen.close()  # type: ignore[attr-defined]


class Resumable:
    """Mixin: ``resume_position``, ``load_state_dict`` and ``reset_state_dict`` over ``plan`` and
    ``_check_identity`` (provided by the dataset class)."""

    force_override_state_dict: bool
    batch_size: int
    current_epoch: int
    _pending: tuple[int, int] | None
    _state_kind: str = "dataset"  # named in error messages

    def plan(self, epoch: int | None = None, batch_size: int | None = None) -> Any:  # pragma: no cover
        raise NotImplementedError

    #: ``(epoch, start_batch, worker_id, num_workers, batch_size, collate_fn, collate=True)`` ->
    #: ``(batch_number, batch)`` for this worker's batches (provided by the dataset class).
    iter_batches: Callable[..., Iterator[tuple[int, Any]]]

    def _plain_iter(self, span: str, worker_id: int, num_workers: int, rank: int) -> PassIterator:
        """:meth:`_plain_pass` as an iterator with ``len()``."""
        return PassIterator(self._plain_pass(span, worker_id, num_workers, rank), self)

    def _plain_pass(self, span: str, worker_id: int, num_workers: int, rank: int) -> Iterator[Any]:
        """The samples of one pass over this worker's batches outside a StreamingDataLoader.

        The pass starts where a loaded state left off (else at the start of ``current_epoch``); a complete
        pass moves to the next epoch, so the next pass reshuffles (LitData's datasets advance their epoch when
        a pass ends). The pass is one ``span`` of category ``epoch``.
        """
        if self._pending is not None:
            epoch, start = self._pending
            self._pending = None
            self.current_epoch = epoch
        else:
            epoch, start = self.current_epoch, 0
        try:
            with kinds.epoch(name=span, epoch=epoch, rank=rank, worker=worker_id):
                for _, samples in self.iter_batches(
                    epoch, start, worker_id, num_workers, self.batch_size, None, collate=False
                ):
                    yield from samples
        except Exception as exc:
            kinds.crash(exc)  # the error itself reaches the caller: no second traceback
            if ev.ACTIVE and get_worker_info() is not None:
                # a plain DataLoader worker: torch sends the error to the loop and may end this process before its
                # flusher runs, so the crash is written now, as a StreamingDataLoader worker's is (recording.loader_share)
                ev.flush(publish=False)
            raise
        if self._pass_advances_epoch():
            self.current_epoch = epoch + 1

    def _pass_advances_epoch(self) -> bool:
        """Whether a complete pass outside a StreamingDataLoader moves to the next epoch (see :meth:`_plain_pass`)."""
        return True

    def check_checkpoint_identity(self, state: dict[str, Any]) -> list[str]:  # pragma: no cover
        raise NotImplementedError

    def checkpoint_identity(self) -> dict[str, Any]:  # pragma: no cover
        raise NotImplementedError

    def litdata_state(self) -> dict[str, Any]:
        """Extra LitData keys of the state (StreamingDataset: ``subsampled_files``, ``region_of_interest``)."""
        return {}

    def state_dict(
        self,
        num_samples_yielded: int = 0,
        num_workers: int = 0,
        batch_size: int = 1,
        *,
        epoch: int | None = None,
        batches_consumed: int | None = None,
    ) -> dict[str, Any]:
        """Resume state: LitData's keys, what defines the order (``_identity``) and the plan position."""
        epoch = self.current_epoch if epoch is None else epoch
        b = self._state_batch_size(batch_size)
        plan = self.plan(epoch, b)
        if batches_consumed is None:
            batches_consumed = self._batches_started(plan, int(num_samples_yielded), b)
        return {
            "num_samples_yielded": int(num_samples_yielded),
            "num_workers": max(1, int(num_workers)),  # LitData records 0 workers as 1
            "batch_size": b,
            "current_epoch": int(epoch),
            **self.checkpoint_identity(),
            **self.litdata_state(),
            **self._elastic_state(int(num_samples_yielded), num_workers, b),
            "plan_state": plan.state(batches_consumed),
        }

    def _elastic_state(self, num_samples_yielded: int, num_workers: int, batch_size: Any) -> dict[str, Any]:
        """LitData 0.2.76's elastic-resume keys of a single dataset's state (none for a combination)."""
        return {}

    def _state_batch_size(self, batch_size: Any) -> Any:
        """The batch size as a state records it (an int; a combination may keep one per dataset)."""
        return int(batch_size)

    def _batches_started(self, plan: Any, num_samples_yielded: int, batch_size: Any) -> int:
        """Batches consumed once ``num_samples_yielded`` samples of ``plan`` were yielded (a partial one counts)."""
        return min(plan.num_batches, -(-num_samples_yielded // int(batch_size)))

    def resume_position(self, state: dict[str, Any], batch_size: int) -> tuple[int, int]:
        """Check ``state`` against this dataset and return ``(epoch, start_batch)`` to continue from.

        Raises:
            StateDictError: the state belongs to another dataset or configuration (unless
                ``force_override_state_dict``, which restarts the saved epoch from its beginning instead).
        """
        if isinstance(state, dict):
            self._resumed_from_state = state  # its initial_* keys carry over to the states saved from here
        if isinstance(state, dict) and "plan_state" not in state and LITDATA_KEYS <= set(state):
            return self._litdata_resume_position(state, batch_size)
        if not isinstance(state, dict) or "plan_state" not in state or "current_epoch" not in state:
            keys = sorted(state) if isinstance(state, dict) else type(state).__name__
            raise StateDictError(f"not a streamscope {type(self).__name__} state (no 'plan_state'; keys: {keys})")
        epoch = int(state["current_epoch"])
        try:
            diffs = self._resume_diffs(state)
            if diffs:
                raise StateDictError(f"the saved state does not match this {self._state_kind}: " + "; ".join(diffs))
            return self._plan_position(state, epoch, batch_size)
        except StateDictError:
            if self.force_override_state_dict:
                return epoch, 0
            raise

    def _resume_diffs(self, state: dict[str, Any]) -> list[str]:
        """The differences between ``state`` and this dataset that forbid resuming it here."""
        return self.check_checkpoint_identity(state)

    def _plan_position(self, state: dict[str, Any], epoch: int, batch_size: int) -> tuple[int, int]:
        """``(epoch, start_batch)`` of the checked ``state``'s ``plan_state`` in this dataset's plan."""
        plan = self.plan(epoch, batch_size)
        check_state(state["plan_state"], plan)
        return resume_point(epoch, int(state["plan_state"]["batches_consumed"]), plan.num_batches)

    def check_litdata_identity(self, state: dict[str, Any]) -> list[str]:
        """Differences between a LitData-written state and this dataset (LitData's keys and meaning)."""
        if not hasattr(self, "chunk_sizes"):
            return [f"a LitData StreamingDataset state cannot resume a {type(self).__name__}"]
        mine = self.checkpoint_identity()
        diffs = []
        url = state.get("input_dir_url")
        if url or mine["input_dir_url"]:
            if (url or None) != mine["input_dir_url"]:
                diffs.append(f"input_dir_url: saved {url!r}, now {mine['input_dir_url']!r}")
        else:
            saved = state.get("input_dir_path")
            now = mine["input_dir_path"]
            if not saved or os.path.realpath(str(saved)) != os.path.realpath(str(now)):
                diffs.append(f"input_dir_path: saved {saved!r}, now {now!r}")
        for key in ("seed", "shuffle", "drop_last", "world_size"):
            if key in state and state[key] != mine[key]:
                diffs.append(f"{key}: saved {state[key]!r}, now {mine[key]!r}")
        if (state.get("item_loader") or None) != (mine["item_loader"] or None):
            diffs.append(f"item_loader: saved {state.get('item_loader')!r}, now {mine['item_loader']!r}")
        if "subsampled_files" in state or "region_of_interest" in state:
            ours = self.litdata_state()
            files = list(state.get("subsampled_files") or [])
            roi = [tuple(int(x) for x in r) for r in state.get("region_of_interest") or []]
            if files != ours["subsampled_files"] or roi != [tuple(r) for r in ours["region_of_interest"]]:
                diffs.append(
                    f"subsampled_files/region_of_interest: saved {len(files)} regions of {sum(b - a for a, b in roi)} "
                    f"samples, now {len(ours['subsampled_files'])} regions of "
                    f"{sum(b - a for a, b in ours['region_of_interest'])} samples"
                )
        return diffs

    def _litdata_resume_position(self, state: dict[str, Any], batch_size: int) -> tuple[int, int]:
        """``(epoch, start_batch)`` for a state written by LitData (see the module docstring)."""
        try:
            epoch = max(1, int(state["current_epoch"]))
            yielded = int(state["num_samples_yielded"])
            saved_bs = int(state["batch_size"])
        except (TypeError, ValueError) as exc:
            raise StateDictError(f"malformed LitData {type(self).__name__} state: {exc}") from None
        if saved_bs != int(batch_size):
            raise StateDictError(f"the LitData state was saved with batch_size={saved_bs}, now {batch_size}")
        return self._litdata_position(
            epoch, yielded, int(state.get("num_workers", 1)), self.check_litdata_identity(state), batch_size
        )

    def _litdata_position(
        self, epoch: int, yielded: int, num_workers: int, diffs: list[str], batch_size: int
    ) -> tuple[int, int]:
        """``(epoch, start_batch)`` after ``yielded`` samples of ``epoch`` in this dataset's order, for a LitData
        state whose identity differs from this dataset by ``diffs`` (see :meth:`_litdata_resume_position`)."""
        if yielded < 0:
            raise StateDictError(f"the LitData state has num_samples_yielded={yielded} < 0")
        if diffs:
            if self.force_override_state_dict:
                return epoch, 0
            raise StateDictError(f"the saved LitData state does not match this {self._state_kind}: " + "; ".join(diffs))
        plan = self.plan(epoch, batch_size)
        # LitData counts batch_size per yielded batch, even for a short last one: clamp to the epoch
        consumed = min(plan.num_batches, batches_from_samples(yielded, batch_size))
        if consumed == plan.num_batches and num_workers <= 1:
            # LitData's dataset moves its own epoch on when a pass ends in the main process (num_workers=0,
            # recorded as 1), so a complete epoch there already names the next one. (With one worker process the
            # number is the finished epoch: that case resumes one epoch number early, with a full epoch of data.)
            return epoch, 0
        return resume_point(epoch, consumed, plan.num_batches)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Resume a plain-DataLoader iteration from ``state_dict`` output."""
        batch_size = int(state_dict.get("batch_size", self.batch_size))
        self.batch_size = batch_size
        self._pending = self.resume_position(state_dict, batch_size)
        self.current_epoch = self._pending[0]

    def reset_state_dict(self) -> None:
        """Forget a loaded, not yet used state."""
        self._pending = None


def member_identity_diffs(
    state: dict[str, Any], mine: dict[str, Any], keys: tuple[str, ...], datasets: list[Any]
) -> list[str]:
    """What differs between a saved wrapper state and this wrapper (Combined, Parallel): its own ``keys``, then
    the number of member datasets and each member's identity."""
    diffs = [f"{k}: saved {state[k]!r}, now {mine[k]!r}" for k in keys if k in state and state[k] != mine[k]]
    saved = state.get("datasets")
    if isinstance(saved, dict):
        if len(saved) != len(datasets):
            diffs.append(f"number of datasets: saved {len(saved)}, now {len(datasets)}")
        else:
            for i, d in enumerate(datasets):
                diffs += [f"dataset {i} {x}" for x in d.check_checkpoint_identity(saved.get(str(i), {}))]
    return diffs


# -- plan positions -------------------------------------------------------------------------------------


def resume_point(epoch: int, batches_consumed: int, num_batches: int) -> tuple[int, int]:
    """Where to continue after ``batches_consumed`` batches of ``epoch``: ``(epoch, start_batch)``.

    A complete epoch (``batches_consumed == num_batches``) continues at batch 0 of ``epoch + 1``.

    Raises:
        StateDictError: ``batches_consumed`` is negative or larger than the epoch.
    """
    if batches_consumed < 0 or batches_consumed > num_batches:
        raise StateDictError(
            f"batches_consumed={batches_consumed} is outside [0, {num_batches}] for epoch {epoch}: the state "
            f"does not belong to this plan"
        )
    if batches_consumed == num_batches:
        return epoch + 1, 0
    return epoch, batches_consumed


def batches_from_samples(num_samples_yielded: int, batch_size: int) -> int:
    """Batches consumed from a LitData-style ``num_samples_yielded`` (``batch_size`` counted per batch)."""
    return -(-int(num_samples_yielded) // int(batch_size))


@dataclass(frozen=True)
class ResumeState:
    """Position in the plan sequence: ``batches_consumed`` batches of ``epoch`` handed to the training loop."""

    epoch: int
    batches_consumed: int
    fingerprint: str
    config: Mapping[str, Any]

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable form (what :meth:`Plan.state` returns)."""
        return {
            "epoch": self.epoch,
            "batches_consumed": self.batches_consumed,
            "fingerprint": self.fingerprint,
            "plan": dict(self.config),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ResumeState:
        """Parse :meth:`to_dict` output.

        Raises:
            StateDictError: A key is missing or has the wrong type.
        """
        try:
            return cls(
                epoch=int(data["epoch"]),
                batches_consumed=int(data["batches_consumed"]),
                fingerprint=str(data["fingerprint"]),
                config=dict(data["plan"]),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise StateDictError(f"not a plan resume state (missing or bad key {exc})") from None

    def start(self, plan: Plan) -> tuple[int, int]:
        """Check this state against ``plan`` (a plan of the same configuration) and return ``(epoch, start)``."""
        check_state(self, plan)
        return resume_point(self.epoch, self.batches_consumed, plan.num_batches)


class _OrderSettings(TypedDict):
    """The arguments of :func:`make_plan` a resumed plan shares with the saved one."""

    drop_last: bool
    shuffle: bool
    seed: int
    shuffle_buffer: int
    regions: Sequence[Sequence[int]] | np.ndarray | None
    equal_batches: bool


def resume_plan(
    state: ResumeState | Mapping[str, Any],
    chunk_sizes: Sequence[int] | np.ndarray,
    *,
    world_size: int,
    rank: int,
    batch_size: int,
    drop_last: bool,
    shuffle: bool,
    seed: int,
    shuffle_buffer: int = 0,
    regions: Sequence[Sequence[int]] | np.ndarray | None = None,
    equal_batches: bool = True,
) -> tuple[EpochPlan, int]:
    """The plan and start batch that continue ``state``, also with another world size or batch size.

    The order settings (dataset, regions, seed, shuffle, shuffle_buffer, drop_last) must match the saved
    ones. With the saved world size and batch size this is ``(plan, batches_consumed)``. With another world
    size or batch size (elastic resume), the rest of the saved epoch is re-partitioned: the returned plan
    covers exactly the samples no rank has consumed yet (``resumed_from`` records the history) and starts at
    batch 0. A completed epoch continues with a fresh plan of the next epoch.

    Raises:
        StateDictError: an order setting differs (named) or the position is outside the saved epoch.
        PlanError: the remaining samples cannot feed the new world size.
    """
    st = state if isinstance(state, ResumeState) else ResumeState.from_dict(state)
    cfg = st.config
    common: _OrderSettings = {
        "drop_last": drop_last,
        "shuffle": shuffle,
        "seed": seed,
        "shuffle_buffer": shuffle_buffer,
        "regions": regions,
        "equal_batches": equal_batches,
    }
    try:
        saved_ws, saved_b = int(cfg["world_size"]), int(cfg["batch_size"])
        history = [tuple(int(x) for x in h) for h in cfg.get("resumed_from", [])]
    except (KeyError, TypeError, ValueError) as exc:
        raise StateDictError(f"not a plan resume state (bad 'plan' entry: {exc})") from None
    saved = make_plan(
        chunk_sizes, world_size=saved_ws, rank=0, batch_size=saved_b, epoch=st.epoch, resumed_from=history, **common
    )
    check_state(st, saved)
    epoch, start = resume_point(st.epoch, st.batches_consumed, saved.num_batches)
    if epoch != st.epoch:
        fresh = make_plan(chunk_sizes, world_size=world_size, rank=rank, batch_size=batch_size, epoch=epoch, **common)
        return fresh, 0
    if world_size == saved_ws and batch_size == saved_b:
        plan = make_plan(
            chunk_sizes,
            world_size=world_size,
            rank=rank,
            batch_size=batch_size,
            epoch=epoch,
            resumed_from=history,
            **common,
        )
        return plan, start
    history.append((saved_ws, saved_b, start))
    plan = make_plan(
        chunk_sizes,
        world_size=world_size,
        rank=rank,
        batch_size=batch_size,
        epoch=epoch,
        resumed_from=history,
        **common,
    )
    return plan, 0


_LABELS = {
    "dataset": "dataset (chunk sizes)",
    "regions": "subsample regions",
    "total_samples": "number of samples",
}


def check_state(state: ResumeState | Mapping[str, Any], plan: Plan) -> None:
    """Raise :class:`StateDictError` naming every setting in which ``state`` and ``plan`` differ."""
    st = state if isinstance(state, ResumeState) else ResumeState.from_dict(state)
    if st.fingerprint == plan.fingerprint:
        return
    mine = plan.describe()
    diffs = []
    for key in sorted(set(mine) | set(st.config)):
        old, new = st.config.get(key), mine.get(key)
        if old != new:
            diffs.append(f"{_LABELS.get(key, key)}: saved {old!r}, now {new!r}")
    if not diffs:
        diffs.append(f"fingerprint: saved {st.fingerprint!r}, now {plan.fingerprint!r}")
    raise StateDictError("the saved state does not match this dataset configuration: " + "; ".join(diffs))


def mapped_position(state: Any, mine: Mapping[str, Any], keys: Sequence[str], what: str) -> tuple[int, int]:
    """``(epoch, first batch)`` to resume a map-style dataset's loader (``engine/mapped.py``) from ``state``.

    Its state records the epoch, ``batches_consumed`` and the settings ``keys`` that fix the order (``mine``: this
    loader's), each of which must match; ``what`` names the dataset in errors.

    Raises:
        StateDictError: the state is not one of such a loader (no ``kind`` "mapped"), or its order differs.
    """
    if not isinstance(state, dict) or state.get("kind") != "mapped":
        raise StateDictError(f"not a state of a {what} loader (no kind 'mapped')")
    differ = [f"{k}: saved {state.get(k)!r}, now {mine[k]!r}" for k in keys if state.get(k) != mine[k]]
    if differ:
        raise StateDictError("the state was saved with another order: " + "; ".join(differ))
    return int(state["epoch"]), int(state["batches_consumed"])
