"""The LitData setters of a dataset made of member StreamingDatasets (Combined, Parallel).

Each sets the wrapper's own value, passes it on to every member and drops what the wrapper derived from the
members (:meth:`MemberSetters._forget_plans`). ``set_epoch`` differs between the wrappers and stays with them.
"""

from __future__ import annotations

from typing import Any

from streamscope._core.board import BoardGroup
from streamscope._core.errors import DatasetError

__all__ = ["MemberSetters"]


class MemberSetters:
    """Mixin: ``set_shuffle``, ``set_drop_last``, ``set_batch_size``, ``set_num_workers`` over ``_datasets``."""

    _datasets: list[Any]
    _sub: dict[Any, Any]  # per-member plans (plan.member_plan)
    batch_size: int
    num_workers: int
    drop_last: bool

    @property
    def knobs(self) -> BoardGroup:
        """The members' live knobs as one board (reads from the first member, writes to all of them)."""
        return BoardGroup(d.knobs for d in self._datasets)

    def _forget_plans(self) -> None:
        """Drop plans derived from the members' settings (they are rebuilt where they are used)."""
        self._sub.clear()

    def set_shuffle(self, shuffle: bool) -> None:
        """Shuffle every dataset (or not)."""
        for d in self._datasets:
            d.set_shuffle(shuffle)
        self._forget_plans()

    def set_drop_last(self, drop_last: bool) -> None:
        """Keep only full batches."""
        self.drop_last = bool(drop_last)
        for d in self._datasets:
            d.set_drop_last(drop_last)
        self._forget_plans()

    def set_batch_size(self, batch_size: int) -> None:
        """Samples per batch (one number for all datasets)."""
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise DatasetError(f"batch_size must be an int >= 1 for a {type(self).__name__}, got {batch_size!r}")
        self.batch_size = batch_size
        for d in self._datasets:
            d.set_batch_size(batch_size)

    def set_num_workers(self, num_workers: int) -> None:
        """DataLoader workers (the order does not depend on it)."""
        self.num_workers = int(num_workers)
        for d in self._datasets:
            d.set_num_workers(num_workers)
