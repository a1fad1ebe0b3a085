"""Resume bookkeeping shared by StreamingDataset and CombinedStreamingDataset.

A state holds ``current_epoch``, the dataset's identity (what defines the order) and the plan's exact position
``plan_state``. Resuming checks all three and continues at the first batch not yet consumed.
"""

from __future__ import annotations

from typing import Any

from streamscope._core.errors import StateDictError
from streamscope.stream.plan import check_state, resume_point


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

    def _check_identity(self, state: dict[str, Any]) -> list[str]:  # pragma: no cover
        raise NotImplementedError

    def _identity(self) -> dict[str, Any]:  # pragma: no cover
        raise NotImplementedError

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
        plan = self.plan(epoch, batch_size)
        if batches_consumed is None:
            batches_consumed = min(plan.num_batches, -(-int(num_samples_yielded) // int(batch_size)))
        return {
            "num_samples_yielded": int(num_samples_yielded),
            "num_workers": max(1, int(num_workers)),  # LitData records 0 workers as 1
            "batch_size": int(batch_size),
            "current_epoch": int(epoch),
            **self._identity(),
            "plan_state": plan.state(batches_consumed),
        }

    def resume_position(self, state: dict[str, Any], batch_size: int) -> tuple[int, int]:
        """Check ``state`` against this dataset and return ``(epoch, start_batch)`` to continue from.

        Raises:
            StateDictError: the state belongs to another dataset or configuration (unless
                ``force_override_state_dict``, which restarts the saved epoch from its beginning instead).
        """
        if not isinstance(state, dict) or "plan_state" not in state or "current_epoch" not in state:
            keys = sorted(state) if isinstance(state, dict) else type(state).__name__
            raise StateDictError(f"not a streamscope {type(self).__name__} state (no 'plan_state'; keys: {keys})")
        epoch = int(state["current_epoch"])
        plan = self.plan(epoch, batch_size)
        try:
            diffs = self._check_identity(state)
            if diffs:
                raise StateDictError(f"the saved state does not match this {self._state_kind}: " + "; ".join(diffs))
            check_state(state["plan_state"], plan)
        except StateDictError:
            if self.force_override_state_dict:
                return epoch, 0
            raise
        return resume_point(epoch, int(state["plan_state"]["batches_consumed"]), plan.num_batches)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Resume a plain-DataLoader iteration from ``state_dict`` output."""
        batch_size = int(state_dict.get("batch_size", self.batch_size))
        self.batch_size = batch_size
        self._pending = self.resume_position(state_dict, batch_size)
        self.current_epoch = self._pending[0]

    def reset_state_dict(self) -> None:
        """Forget a loaded, not yet used state."""
        self._pending = None
