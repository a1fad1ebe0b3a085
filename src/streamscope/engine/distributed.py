"""Where this process sits: DDP rank and world size, DataLoader worker id and count."""

from __future__ import annotations

from dataclasses import dataclass

from streamscope._core.ranks import world_and_rank

__all__ = ["DistEnv", "WorkerEnv"]


@dataclass(frozen=True)
class DistEnv:
    """World size and global rank of this training process."""

    world_size: int
    rank: int

    @classmethod
    def detect(cls) -> DistEnv:
        """From ``torch.distributed`` when initialised, else ``WORLD_SIZE`` and ``RANK`` (or ``GLOBAL_RANK``).

        Raises:
            DatasetError: the environment's values are not integers or not a valid rank of the world.
        """
        return cls(*world_and_rank(strict=True))


@dataclass(frozen=True)
class WorkerEnv:
    """DataLoader worker id and count (0 of 1 in the main process)."""

    worker_id: int
    num_workers: int

    @classmethod
    def detect(cls) -> WorkerEnv:
        """From ``torch.utils.data.get_worker_info()``."""
        from torch.utils.data import get_worker_info

        info = get_worker_info()
        if info is None:
            return cls(0, 1)
        return cls(info.id, info.num_workers)
