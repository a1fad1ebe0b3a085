"""Where this process sits: DDP rank and world size, DataLoader worker id and count.

:class:`DistEnv` and :class:`WorkerEnv` are the engine's; :class:`_DistributedEnv` and :class:`_WorkerEnv` are
LitData's classes of the same facts (``litdata.utilities.env``), with LitData's fields, equality and repr, for the
clients that read ``StreamingDataset.distributed_env`` / ``worker_env`` (issue 31, item 10).
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import Any

from streamscope._core.errors import DatasetError
from streamscope._core.ranks import world_and_rank

__all__ = ["DistEnv", "WorkerEnv", "_DistributedEnv", "_WorkerEnv", "detect_num_nodes", "writer_rank"]


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


def writer_rank() -> int:
    """The rank of a writer of chunks as LitData's ``BinaryWriter.rank`` finds it: ``DATA_OPTIMIZER_GLOBAL_RANK``
    if set (an optimize worker), else ``global_rank * num_workers + worker_id``.

    Raises:
        DatasetError: the distributed environment's values are not integers or not a valid rank.
    """
    env = os.getenv("DATA_OPTIMIZER_GLOBAL_RANK")
    if env:
        return int(env)
    worker = WorkerEnv.detect()
    return DistEnv.detect().rank * worker.num_workers + worker.worker_id


def detect_num_nodes(world_size: int) -> int:
    """Nodes of the job as LitData 0.2.76 counts them (``_DistributedEnv.detect``): the world size over this
    machine's GPUs when a process group is initialised on a machine with GPUs, else 1; ``NNODES`` wins.

    Raises:
        DatasetError: ``NNODES`` is not an integer >= 1.
    """
    nodes = 1
    dist: Any = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized():
        import torch

        gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if gpus and world_size // gpus >= 1:
            nodes = world_size // gpus
    raw = os.environ.get("NNODES")
    if raw:
        try:
            nodes = int(raw)
        except ValueError:
            raise DatasetError(f"NNODES={raw!r} is not an integer") from None
        if nodes < 1:
            raise DatasetError(f"NNODES={nodes} must be >= 1")
    return nodes


class _DistributedEnv:
    """LitData's ``_DistributedEnv``: the distributed job this process belongs to.

    Args:
        world_size: training processes in the job.
        global_rank: this process's rank among them.
        num_nodes: machines of the job.

    ``StreamingDataset.distributed_env`` hands out one bound to its dataset: setting a field on it (or assigning
    a whole ``_DistributedEnv`` to ``distributed_env``, as LitData's clients and tests do) moves the dataset to that
    world size and rank.
    """

    _FIELDS = ("world_size", "global_rank", "num_nodes")

    def __init__(self, world_size: int, global_rank: int, num_nodes: int) -> None:
        self.world_size = world_size
        self.global_rank = global_rank
        self.num_nodes = num_nodes

    @classmethod
    def detect(cls) -> _DistributedEnv:
        """This process's job: ``torch.distributed`` when initialised, else ``WORLD_SIZE`` and ``RANK`` (or
        ``GLOBAL_RANK``); ``num_nodes`` from :func:`detect_num_nodes`.

        Raises:
            DatasetError: the environment's values are not integers or not a valid rank of the world.
        """
        world, rank = world_and_rank(strict=True)
        return cls(world_size=world, global_rank=rank, num_nodes=detect_num_nodes(world))

    def __setattr__(self, name: str, value: Any) -> None:
        object.__setattr__(self, name, value)
        owner = self.__dict__.get("_owner")
        if owner is not None and name in self._FIELDS:
            owner.distributed_env = self  # the dataset checks and takes the new values

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, _DistributedEnv):
            return NotImplemented
        return (self.world_size, self.global_rank, self.num_nodes) == (
            other.world_size,
            other.global_rank,
            other.num_nodes,
        )

    def __hash__(self) -> int:
        return hash((self.world_size, self.global_rank, self.num_nodes))

    def __getstate__(self) -> dict[str, Any]:
        return {k: self.__dict__[k] for k in self._FIELDS}  # not the dataset it is bound to

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    def __repr__(self) -> str:
        return (
            f"_DistributedEnv(world_size={self.world_size}, global_rank={self.global_rank}, num_nodes={self.num_nodes})"
        )

    def __str__(self) -> str:
        return repr(self)


class _WorkerEnv:
    """LitData's ``_WorkerEnv``: the DataLoader workers of this training process.

    Args:
        world_size: DataLoader workers of this process (1 in the main process).
        rank: this worker's id among them.
    """

    def __init__(self, world_size: int, rank: int) -> None:
        self.world_size = world_size
        self.rank = rank

    @classmethod
    def detect(cls) -> _WorkerEnv:
        """From ``torch.utils.data.get_worker_info()`` (1 worker of rank 0 outside a worker)."""
        w = WorkerEnv.detect()
        return cls(world_size=w.num_workers, rank=w.worker_id)

    def __repr__(self) -> str:
        return f"_WorkerEnv(world_size: {self.world_size}, rank: {self.rank})"

    def __str__(self) -> str:
        return repr(self)
