"""What StreamingDataLoader asks of a dataset it iterates: batches instead of samples, and how.

The loader sets a :class:`BatchMode` on the dataset (``set_batch_mode``) around ``iter(dataset)``; the dataset
captures it at that call, so an iterator made under a loader yields ``(batch_number, batch)`` even when it runs
later (torch's single-process loader), and the dataset iterated directly still yields plain samples.
"""

from __future__ import annotations

from collections.abc import Callable, MutableSequence
from dataclasses import dataclass
from typing import Any

from streamscope._core.errors import DatasetError
from streamscope.engine.observer import Ticket

__all__ = ["BatchMode", "LoaderSettings"]


@dataclass(frozen=True)
class BatchMode:
    """One loader iteration's request to its dataset (pickled to spawned workers with the dataset).

    Attributes:
        epoch: the epoch to read.
        start: the first batch of the epoch (a resumed loader starts past 0).
        batch_size: samples per batch.
        collate_fn: the user's collate function (None: the dataset's own batch decoding).
        position: the loader's live ``[epoch, start]``, read when the iterator starts (None: ``epoch``, ``start``).
        arena_flags: the shared flags of the batch arenas (None: batches are not grouped into arenas).
        ticket: what the loader's observer gives the workers (``engine.observer``: opaque here; its ``share``
            wraps a worker's items), else None.
    """

    epoch: int
    start: int
    batch_size: int
    collate_fn: Callable[[list[Any]], Any] | None = None
    position: MutableSequence[int] | None = None
    arena_flags: Any = None
    ticket: Ticket | None = None

    def epoch_and_start(self) -> tuple[int, int]:
        """The epoch and first batch to read: the loader's position when it has one."""
        if self.position is not None:
            return int(self.position[0]), int(self.position[1])
        return self.epoch, self.start


class LoaderSettings:
    """The settings StreamingDataLoader gives every dataset it drives (LitData's setter names)."""

    shuffle: bool
    drop_last: bool
    batch_size: int
    num_workers: int

    def set_shuffle(self, shuffle: bool) -> None:
        """Turn shuffling on or off."""
        self.shuffle = bool(shuffle)

    def set_drop_last(self, drop_last: bool) -> None:
        """Set drop_last."""
        self.drop_last = bool(drop_last)

    def set_batch_size(self, batch_size: int) -> None:
        """Batch size the epoch plan cuts batches with."""
        if not isinstance(batch_size, int) or batch_size < 1:
            raise DatasetError(f"batch_size must be an int >= 1, got {batch_size!r}")
        self.batch_size = batch_size

    def set_num_workers(self, num_workers: int) -> None:
        """Number of DataLoader workers (the plan does not depend on it)."""
        self.num_workers = int(num_workers)
