"""From the model's plan to one candidate move: the knobs a dataset has, the pins, the bounds, the budgets.

The capacity model (:mod:`streamscope.tune.model`) says how many downloads each reader should have in flight, how
deep it should prefetch and how many workers decode fast enough. This module maps that onto the knobs (chunked
datasets: ``download_concurrency`` and ``prefetch_depth``; raw files: ``raw_concurrency``, unless the raw-file
governor owns it, and ``raw_prefetch``), leaves pinned knobs alone, and caps the move by the budgets: never more
resident memory than 90% of the RAM budget (a worker costs what the workers cost on average now; the first one what
the main process does), never more cached chunks than 90% of the cache budget (each reader holds its current chunk,
one more and its prefetch depth).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from streamscope._core import config
from streamscope.tune.budgets import Budgets
from streamscope.tune.model import Plan
from streamscope.tune.target import TargetInfo

__all__ = ["HEADROOM", "WORKERS", "Move", "Policy", "Resources"]


#: The pseudo-knob of the number of DataLoader workers (moved between epochs, not on the board).
WORKERS = "num_workers"
#: Share of a budget a plan may fill.
HEADROOM = 0.9


@dataclass(frozen=True)
class Move:
    """One candidate: knobs to change together, with why."""

    changes: tuple[tuple[str, Any, Any], ...]  # (knob, old, new)
    reason: str
    cause: str

    @property
    def key(self) -> str:
        """Identity of the candidate (what a rejection remembers)."""
        return ",".join(f"{k}={new}" for k, _old, new in self.changes)

    @property
    def workers(self) -> int | None:
        """The workers it asks for, None when it moves only live knobs."""
        for k, _old, new in self.changes:
            if k == WORKERS:
                return int(new)
        return None

    def inverse(self) -> dict[str, Any]:
        return {k: old for k, old, _new in self.changes}

    def forward(self) -> dict[str, Any]:
        return {k: new for k, _old, new in self.changes}


@dataclass(frozen=True)
class Resources:
    """Resident memory now: the rank's process tree, its main process alone, the children counted.

    ``rank``: set when ``tree`` stands for another rank's memory (ranks tune together: the deciding rank's
    controller answers for every rank's RAM budget; ``tree`` is then that rank's share of its budget times this
    rank's budget)."""

    tree: int = 0
    own: int = 0
    children: int = 0
    rank: int | None = None

    def per_worker(self, workers: int) -> int:
        """What one more worker is expected to cost: the workers' average, or the main process's size."""
        if workers > 0 and self.children > 0:
            return max(1, (self.tree - self.own) // self.children)
        return max(1, self.own)


def _hi(knob: str) -> int:
    return int(config.KNOBS[knob].bounds[1])  # type: ignore[index]


class Policy:
    """Candidate moves from a plan (see the module docstring)."""

    def __init__(self, info: TargetInfo, budgets: Budgets) -> None:
        self.info = info
        self.budgets = budgets

    # --- caps -------------------------------------------------------------------------------------

    def depth_cap(self, cache_budget: int | None, readers: int) -> int:
        """Deepest prefetch the cache budget holds for ``readers`` readers (no cap when everything fits)."""
        hi = _hi("prefetch_depth")
        info = self.info
        if not info.uses_cache or not cache_budget or info.chunk_bytes <= 0:
            return hi
        if info.dataset_bytes and info.dataset_bytes <= cache_budget * HEADROOM:
            return hi  # the whole dataset fits: prefetching cannot push the cache over
        per_reader = int(cache_budget * HEADROOM) // (info.chunk_bytes * max(1, readers))
        return max(0, min(hi, per_reader - 2))

    def workers_cap(self, workers: int, res: Resources) -> int:
        """Most workers the cores, the knob and the RAM budget allow."""
        cap = self.budgets.max_workers
        if self.info.persistent_workers:
            return workers
        per = res.per_worker(workers)
        room = int(self.budgets.ram * HEADROOM) - res.tree
        fit = workers + max(0, room // per)
        return max(workers, min(cap, fit)) if cap > workers else workers

    # --- the knobs of in-flight downloads ---------------------------------------------------------

    def knob_names(self) -> tuple[str | None, str]:
        """(the in-flight knob or None when another controller owns it, the depth knob)."""
        if self.info.kind == "raw":
            return (None if self.info.raw_governed else "raw_concurrency"), "raw_prefetch"
        return "download_concurrency", "prefetch_depth"

    def in_flight(self, values: dict[str, Any], workers: int) -> int | None:
        """Downloads each reader may have under way now (None when unknown)."""
        ck, dk = self.knob_names()
        if self.info.kind == "raw":
            d = int(values.get(dk, -1))
            depth = self.info.raw_prefetch if d < 0 else d
            c = int(values.get("raw_concurrency", 0)) or self.info.raw_concurrency
            return max(1, min(c, depth)) if c > 0 and depth > 0 else (depth or None)
        c = int(values.get(ck or "", 1))
        depth = int(values.get(dk, 0))
        return max(1, min(c, depth + 1))

    # --- the move ---------------------------------------------------------------------------------

    def move(self, plan: Plan, values: dict[str, Any], pinned: set[str], workers: int, res: Resources) -> list[Move]:
        """Candidates for ``plan``, the stage that binds first: a live move (the downloads) or a workers move."""
        out: list[Move] = []
        if plan.bound == "untimed":
            m = self._double(values, pinned, plan.why) or self._one_more_reader(plan, values, pinned, workers, res)
            return [m] if m is not None else []
        if plan.bound == "cpu" and plan.workers != workers:
            m = self._workers(plan, values, pinned, workers, res)
            if m is not None:
                out.append(m)
        if plan.in_flight is not None and plan.bound in ("download", "step", "cpu"):
            m = self._downloads(plan, values, pinned, workers)
            if m is not None and (plan.bound == "download" or m.cause == "saturated"):
                out.append(m)
            now = self.in_flight(values, workers)
            if m is None and plan.bound == "download" and now is not None and now < plan.in_flight:
                # the downloads' knobs are the user's and hold fewer in flight than the plan wants per reader
                m = self._one_more_reader(plan, values, pinned, workers, res)
                if m is not None:
                    out.append(m)
        return out

    def _one_more_reader(
        self, plan: Plan, values: dict[str, Any], pinned: set[str], workers: int, res: Resources
    ) -> Move | None:
        """The look-ahead (or the GET limit) is the user's: one more reader fetches more at once."""
        more = Plan(None, None, max(workers + 1, 2), "cpu", plan.why, "one more reader")
        m = self._workers(more, values, pinned, workers, res)
        if m is None:
            return None
        return Move(m.changes, f"{plan.why.split(':')[0]}, the downloads' knobs pinned: one more reader", "download")

    def _downloads(self, plan: Plan, values: dict[str, Any], pinned: set[str], workers: int) -> Move | None:
        assert plan.in_flight is not None and plan.depth is not None
        ck, dk = self.knob_names()
        readers = max(1, workers)
        ch: list[tuple[str, Any, Any]] = []
        now = self.in_flight(values, workers)
        down = now is not None and plan.in_flight < now
        if self.info.kind == "raw":
            cur_d = int(values.get(dk, -1))
            base_d = self.info.raw_prefetch if cur_d < 0 else cur_d
            want_d = min(_hi(dk), max(1, plan.depth))
            if dk not in pinned and want_d != base_d:
                ch.append((dk, cur_d, want_d))
            if ck is not None and ck not in pinned:
                cur_c = int(values.get(ck, 0))
                base_c = cur_c or self.info.raw_concurrency
                # a process's GET limit serves all its threads: per-reader in flight times the look-ahead's share
                want_c = min(_hi(ck), max(1, plan.in_flight))
                if base_c > 0 and want_c != base_c:
                    ch.append((ck, cur_c, want_c))
        else:
            assert ck is not None
            dcap = self.depth_cap(self._cache(values), readers)
            cur_c = int(values.get(ck, 1))
            cur_d = int(values.get(dk, 0))
            want_c = min(_hi(ck), max(1, plan.in_flight))
            want_d = min(dcap, max(0, plan.depth)) if dk not in pinned else cur_d
            if ck not in pinned:
                want_c = min(want_c, max(1, want_d + 1))  # more at once than the depth allows would not start
                if want_c != cur_c:
                    ch.append((ck, cur_c, want_c))
            if dk not in pinned and want_d != cur_d:
                ch.append((dk, cur_d, want_d))
        if not ch:
            return None
        cause = "saturated" if down else "download"
        return Move(tuple(ch), f"{plan.why}: {plan.in_flight} in flight per reader x {readers}", cause)

    def _double(self, values: dict[str, Any], pinned: set[str], why: str) -> Move | None:
        """Twice the look-ahead (and the GETs at once, where the tuner owns them): downloads without a latency."""
        ck, dk = self.knob_names()
        ch: list[tuple[str, Any, Any]] = []
        if self.info.kind == "raw":
            if dk not in pinned:
                cur = int(values.get(dk, -1))
                base = self.info.raw_prefetch if cur < 0 else cur
                new = min(_hi(dk), max(1, 2 * base))
                if new > base:
                    ch.append((dk, cur, new))
            if ck is not None and ck not in pinned:
                cur = int(values.get(ck, 0))
                base = cur or self.info.raw_concurrency
                if base > 0 and min(_hi(ck), 2 * base) > base:
                    ch.append((ck, cur, min(_hi(ck), 2 * base)))
        else:
            if dk not in pinned:
                cur = int(values.get(dk, 0))
                new = min(max(1, 2 * cur), _hi(dk))
                if new > cur:
                    ch.append((dk, cur, new))
        return Move(tuple(ch), why, "download") if ch else None

    def _cache(self, values: dict[str, Any]) -> int | None:
        v = values.get("max_cache_size")
        return int(v) if v is not None else None

    def _workers(
        self, plan: Plan, values: dict[str, Any], pinned: set[str], workers: int, res: Resources
    ) -> Move | None:
        cap = self.workers_cap(workers, res)
        new = min(cap, plan.workers)
        if new <= workers:
            return None
        ch: list[tuple[str, Any, Any]] = [(WORKERS, workers, new)]
        reason = f"decode-bound ({plan.why_workers}): {new} workers (next epoch)"
        if new < plan.workers:
            reason += f" ({plan.workers} would keep up, the budgets allow {cap})"
        if self.info.kind != "raw":
            depth = int(values.get("prefetch_depth", 0))
            dcap = self.depth_cap(self._cache(values), new)
            if depth > dcap and "prefetch_depth" not in pinned:
                ch.append(("prefetch_depth", depth, dcap))  # more readers hold more chunks: the cache stays in budget
        return Move(tuple(ch), reason, "cpu")
