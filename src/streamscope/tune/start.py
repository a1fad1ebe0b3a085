"""The tuner's check before the first batch: the budgets the loader must run in, and the unpinned knob values
brought inside them (an error when a budget cannot hold the loader at all)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from streamscope._core.errors import TuneBudgetError
from streamscope.tune.budgets import Budgets
from streamscope.tune.policy import Policy, Resources
from streamscope.tune.target import Target

__all__ = ["fit_budgets"]


def fit_budgets(
    target: Target,
    policy: Policy,
    budgets: Budgets,
    res: Resources,
    cache_free: int | None,
    emit: Callable[[str, dict[str, Any]], None],
) -> dict[str, Any]:
    """Check the RAM, cache and disk budgets; set what does not fit (``budget`` events); returns the values set.

    Raises:
        TuneBudgetError: a budget the loader cannot run in at all.
    """
    b = budgets
    if res.own and b.ram <= res.own:
        raise TuneBudgetError(
            f"the auto-tuner's RAM budget is {b.ram / 1e6:,.0f} MB ({b.ram_source}) but this rank's main process "
            f"already uses {res.own / 1e6:,.0f} MB: set STREAMSCOPE_AUTOTUNE_RAM_BUDGET (knob "
            f"autotune_ram_budget) higher, or autotune=False"
        )
    info = target.info
    board = target.board()
    readers = max(1, target.workers())
    good: dict[str, Any] = {}
    if not (info.uses_cache and info.chunk_bytes > 0 and board is not None):
        return good
    budget = int(board.value("max_cache_size"))
    need = 2 * info.chunk_bytes * readers
    if budget < need and (not info.dataset_bytes or budget < info.dataset_bytes):
        raise TuneBudgetError(
            f"the cache budget max_cache_size={budget:,} bytes ({board.source('max_cache_size')}) cannot hold "
            f"the chunks {readers} reader(s) need at once ({need:,} bytes: two chunks of up to "
            f"{info.chunk_bytes:,} bytes each): raise max_cache_size (argument, STREAMSCOPE_MAX_CACHE_SIZE "
            f"or MAX_CACHE_SIZE)"
        )
    if cache_free is not None and cache_free < need:
        raise TuneBudgetError(
            f"the disk of the cache ({info.cache_dir}) has {cache_free:,} bytes free, less than the "
            f"{need:,} bytes {readers} reader(s) need at once: free space there or set cache_dir elsewhere"
        )
    if cache_free is not None and budget > cache_free * 0.9 and not board.pinned("max_cache_size"):
        new = max(need, int(cache_free * 0.9) // (1 << 20) * (1 << 20))
        if board.propose("max_cache_size", new, "the disk budget: 90% of the cache disk's free space"):
            good["max_cache_size"] = new
            emit("budget", {"knob": "max_cache_size", "old": budget, "new": new, "reason": "disk"})
    dcap = policy.depth_cap(int(board.value("max_cache_size")), readers)
    depth = int(board.value("prefetch_depth"))
    if depth > dcap and not board.pinned("prefetch_depth"):
        if board.propose("prefetch_depth", dcap, "the cache budget holds no deeper prefetch"):
            good["prefetch_depth"] = dcap
            emit("budget", {"knob": "prefetch_depth", "old": depth, "new": dcap, "reason": "cache"})
    return good
