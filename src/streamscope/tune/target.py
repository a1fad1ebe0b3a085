"""What the tuner tunes: a loader seen through a narrow interface (``api`` adapts the StreamingDataLoader).

``tune`` may not import ``stream``: the loader is handed to the tuner as a :class:`Target`, built in ``api``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

__all__ = ["Target", "TargetInfo"]


@dataclass(frozen=True)
class TargetInfo:
    """What the tuner knows of a loader's data, fixed for the run."""

    batch_size: int = 1
    samples_per_chunk: float = 0.0  # mean samples per chunk (0: unknown)
    chunk_bytes: int = 0  # the largest chunk, bytes (0: unknown)
    dataset_bytes: int = 0  # this rank's chunks together, bytes (0: unknown)
    uses_cache: bool = False  # chunks go through the local cache (remote or compressed data)
    cache_dir: str | None = None
    kind: str = "chunks"  # "chunks" (StreamingDataset) or "raw" (StreamingRawDataset)
    persistent_workers: bool = False
    raw_governed: bool = False  # raw files: the per-worker governor owns raw_concurrency (see README)
    raw_prefetch: int = 0  # raw files: the dataset's own look-ahead (the board's -1)
    raw_concurrency: int = 0  # raw files: a process's GET limit when the board's is 0 and no governor runs


class Target(Protocol):
    """A loader the tuner moves (every method is called from the tuner's thread)."""

    info: TargetInfo

    def board(self) -> Any:
        """The loader's knob board (``KnobBoard`` or ``BoardGroup``), or None when it has none."""
        ...

    def workers(self) -> int:
        """The DataLoader workers of the epoch that runs (or the next one, between epochs)."""
        ...

    def running_workers(self) -> int:
        """The DataLoader workers of the epoch that runs (a request for the next one aside)."""
        ...

    def request_workers(self, n: int) -> None:
        """Run the next epoch with ``n`` workers."""
        ...

    def epoch(self) -> int:
        """Epochs started so far."""
        ...

    def iterating(self) -> bool:
        """True while an epoch runs."""
        ...

    def epoch_record(self, e: int) -> tuple[float, int] | None:
        """Epoch ``e`` once the loop is done with it: (seconds from its start to the loop's last batch of it, its
        batches), or None when unknown."""
        ...

    def progress(self) -> tuple[int, float]:
        """(batches handed to the loop so far, the loop's total wait for them in seconds), read live."""
        ...

    def starts(self) -> tuple[int, float]:
        """(the loop's waits so far that were among the first ``START_WAITS`` per worker of their epoch, their
        seconds: part of :meth:`progress`'s wait), as of the last :meth:`progress`; (0, 0.0) when unknown."""
        ...
