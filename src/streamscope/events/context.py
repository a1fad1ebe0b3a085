"""Rank and worker context of the current process (the fields every Litracer line carries).

Computed off the hot path (by the flusher, once per batch of events) from what is already loaded: torch is
never imported here. In a DataLoader worker the value is cached for the life of the process once
``torch.utils.data.get_worker_info()`` answers; in the main process it is recomputed per batch because
``torch.distributed`` may be initialised after the first event. A forked DataLoader worker takes the rank fields
its parent had as it forked (:func:`before_fork`) instead of asking ``torch.distributed`` and the environment
again: a fresh fork pays a page fault for every object that asks touches.
"""

from __future__ import annotations

import sys
from typing import Any

from streamscope._core.ranks import env_int, world_and_rank

__all__ = ["after_fork_in_child", "after_fork_in_parent", "before_fork", "env_fields", "pin"]


_cached: dict[str, int] | None = None
_forking: tuple[int, int, int] | None = None  # the rank fields of this process as it forks (see before_fork)
_inherited: tuple[int, int, int] | None = None  # a forked child's: its parent's as it forked


def _dist() -> tuple[int, int, int]:
    world, rank = world_and_rank(strict=False)
    local = env_int("LOCAL_WORLD_SIZE", default=0)
    nodes = env_int("NUM_NODES", "GROUP_WORLD_SIZE", default=0) or (max(1, world // local) if local else 1)
    return world, rank, nodes


def _worker() -> tuple[int, int] | None:
    """(num_workers, id) inside a DataLoader worker, None elsewhere."""
    data: Any = sys.modules.get("torch.utils.data")
    if data is None:
        return None
    try:
        info = data.get_worker_info()
    except Exception:
        return None
    if info is None:
        return None
    return int(info.num_workers), int(info.id)


def env_fields() -> dict[str, int]:
    """``dist_world_size, dist_global_rank, dist_num_nodes, worker_world_size, worker_rank`` of this process."""
    global _cached
    if _cached is not None:
        return _cached
    w = _worker()
    # a DataLoader worker shares its parent's process group; any other forked process may start its own
    world, rank, nodes = _inherited if w is not None and _inherited is not None else _dist()
    out = {
        "dist_world_size": world,
        "dist_global_rank": rank,
        "dist_num_nodes": nodes,
        "worker_world_size": w[0] if w else 1,
        "worker_rank": w[1] if w else 0,
    }
    if w is not None:
        _cached = out
    return out


def pin(fields: dict[str, int] | None) -> None:
    """Fix this process's fields (an optimize()/map() worker: its node as the rank, its worker number as the
    worker, as a DataLoader worker shows its rank and worker id); None forgets them (a pooled process, such as a
    Ray worker, moving on to another task)."""
    global _cached
    _cached = None if fields is None else {k: int(v) for k, v in fields.items()}


def before_fork() -> None:
    """In a process about to fork (while tracing): note its rank fields for the child."""
    global _forking
    _forking = _dist()


def after_fork_in_parent() -> None:
    global _forking
    _forking = None


def after_fork_in_child() -> None:
    """Forget the parent's cached context; keep its rank fields as it forked."""
    global _cached, _inherited, _forking
    _cached = None
    _inherited, _forking = _forking, None
