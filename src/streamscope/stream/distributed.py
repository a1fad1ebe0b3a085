"""Where this process sits: DDP rank and world size, DataLoader worker id and count."""

from __future__ import annotations

import os
from dataclasses import dataclass

from streamscope._core.errors import DatasetError

__all__ = ["DistEnv", "WorkerEnv"]


@dataclass(frozen=True)
class DistEnv:
    """World size and global rank of this training process."""

    world_size: int
    rank: int

    @classmethod
    def detect(cls) -> DistEnv:
        """From ``torch.distributed`` when initialised, else ``WORLD_SIZE`` and ``RANK`` (or ``GLOBAL_RANK``)."""
        try:
            import torch.distributed as dist

            if dist.is_available() and dist.is_initialized():
                return cls(dist.get_world_size(), dist.get_rank())
        except ImportError:  # pragma: no cover - torch is a dependency
            pass
        try:
            world = int(os.environ.get("WORLD_SIZE", "1"))
            rank_raw = os.environ.get("RANK", os.environ.get("GLOBAL_RANK", "0"))
            rank = int(rank_raw)
        except ValueError as exc:
            raise DatasetError(f"WORLD_SIZE/RANK environment variables are not integers: {exc}") from None
        if world < 1 or not 0 <= rank < world:
            raise DatasetError(f"invalid distributed environment: RANK={rank} with WORLD_SIZE={world}")
        return cls(world, rank)


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
