"""Where this process sits in a distributed job: world size and global rank, asked in one place.

``torch.distributed`` when a process group is initialised, else the launcher's environment (``WORLD_SIZE``,
``RANK`` or ``GLOBAL_RANK``). torch is never imported here: a process group can only be initialised once
``torch.distributed`` is loaded, so looking it up in ``sys.modules`` answers the same question for free.

Two callers want different things from a bad environment: the read and write paths (``strict=True``) stop
with an error naming the variables, the tracer (``strict=False``) must never break, and falls back to a single
process.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from streamscope._core.errors import DatasetError

__all__ = ["env_int", "world_and_rank"]


def env_int(*names: str, default: int) -> int:
    """The first of ``names`` set to an integer in the environment, else ``default`` (bad values are skipped)."""
    for n in names:
        raw = os.environ.get(n)
        if raw:
            try:
                return int(raw)
            except ValueError:
                continue
    return default


def world_and_rank(*, strict: bool = True) -> tuple[int, int]:
    """``(world_size, global_rank)`` of this process.

    Raises:
        DatasetError: ``strict`` and the environment's values are not integers or not a valid rank of the world.
    """
    dist: Any = sys.modules.get("torch.distributed")
    try:
        if dist is not None and dist.is_available() and dist.is_initialized():
            return int(dist.get_world_size()), int(dist.get_rank())
    except Exception:
        if strict:
            raise
        return 1, 0  # a half-initialised process group must not break tracing
    if not strict:
        return env_int("WORLD_SIZE", default=1), env_int("RANK", "GLOBAL_RANK", default=0)
    try:
        world = int(os.environ.get("WORLD_SIZE", "1"))
        rank = int(os.environ.get("RANK", os.environ.get("GLOBAL_RANK", "0")))
    except ValueError as exc:
        raise DatasetError(f"WORLD_SIZE/RANK environment variables are not integers: {exc}") from None
    if world < 1 or not 0 <= rank < world:
        raise DatasetError(f"invalid distributed environment: RANK={rank} with WORLD_SIZE={world}")
    return world, rank
