"""Which move to try: the wait's dominant cause picks the knob (tf.data's stage-based search), a resource model
sizes the move (Plumber's operational analysis), the budgets cap it.

Causes (see :meth:`streamscope.tune.signals.Window.causes`) and their moves, first that applies:

* ``download`` (the workers were downloading while the loop waited): per reader, Little's law gives the
  downloads that must be under way to feed the loop: ``in flight = chunk latency x chunks needed per second``,
  with ``chunks per second = batch size / samples per chunk / step time / readers``. The first move jumps
  ``download_concurrency`` there (at least doubling it, at most four times it) with ``prefetch_depth`` at twice that (downloads run within
  the prefetch depth); then a plain doubling; then a deeper prefetch alone; then one more reader (a worker; two
  from none, since one worker reads no more than the loop's own process did).
* ``cpu`` (decoding, decompressing, reading chunks): more workers, next epoch. A saturated worker makes one batch
  per ``workers x period`` (with none, the loop's own wait is the decoding), so ``decode time per batch / step
  time`` workers keep up; the move jumps there (at least one more), capped by the cores and the RAM budget.
* ``idle`` (the workers were doing nothing the split can name): a deeper prefetch.

Budgets: a move never plans more resident memory than 90% of the RAM budget (a worker costs what the workers
cost on average now; the first one what the main process does), nor more cached chunks than 90% of the cache
budget (each reader holds its current chunk, one more and its prefetch depth). ``raw_concurrency`` belongs to
the raw-file governor while it is on (``raw_adaptive_concurrency``), so the tuner never proposes it then.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from streamscope._core import config
from streamscope.tune.budgets import Budgets
from streamscope.tune.signals import Window
from streamscope.tune.target import TargetInfo

__all__ = ["HEADROOM", "JUMP", "Move", "Policy", "Resources", "SECOND_CAUSE", "WORKERS"]


#: The pseudo-knob of the number of DataLoader workers (moved between epochs, not on the board).
WORKERS = "num_workers"
#: Share of a budget a plan may fill.
HEADROOM = 0.9
#: The Little's-law move multiplies the download concurrency by at most this much.
JUMP = 4
#: A second cause is looked at when the first has no move left and it holds at least this share of the wait.
SECOND_CAUSE = 0.25


@dataclass(frozen=True)
class Move:
    """One try: knobs to change together, with why."""

    changes: tuple[tuple[str, Any, Any], ...]  # (knob, old, new)
    reason: str
    cause: str

    @property
    def key(self) -> str:
        """Identity of the move (what a rollback forbids for a while)."""
        return ",".join(f"{k}={new}" for k, _old, new in self.changes)

    @property
    def family(self) -> str:
        """The knobs it moves and which way (``download_concurrency+,prefetch_depth+``): moves of one family
        differ only in how far they go."""
        return ",".join(sorted(f"{k}{'+' if new > old else '-'}" for k, old, new in self.changes))

    @property
    def workers(self) -> int | None:
        """The workers it asks for, None when it moves only live knobs."""
        for k, _old, new in self.changes:
            if k == WORKERS:
                return int(new)
        return None

    def inverse(self) -> dict[str, Any]:
        return {k: old for k, old, _new in self.changes}


@dataclass(frozen=True)
class Resources:
    """Resident memory now: the rank's process tree, its main process alone, the children counted."""

    tree: int = 0
    own: int = 0
    children: int = 0

    def per_worker(self, workers: int) -> int:
        """What one more worker is expected to cost: the workers' average, or the main process's size."""
        if workers > 0 and self.children > 0:
            return max(1, (self.tree - self.own) // self.children)
        return max(1, self.own)


class Policy:
    """Candidate moves for a window, best first (see the module docstring)."""

    def __init__(self, info: TargetInfo, budgets: Budgets) -> None:
        self.info = info
        self.budgets = budgets

    # --- the models ------------------------------------------------------------------------------

    def depth_cap(self, cache_budget: int | None, readers: int) -> int:
        """Deepest prefetch the cache budget holds for ``readers`` readers (no cap when everything fits)."""
        hi = int(config.KNOBS["prefetch_depth"].bounds[1])  # type: ignore[index]
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

    # --- the moves -------------------------------------------------------------------------------

    def candidates(
        self,
        w: Window,
        values: dict[str, Any],
        pinned: set[str],
        workers: int,
        res: Resources,
    ) -> list[Move]:
        """The moves worth a try after window ``w`` (nothing pinned, within bounds and budgets), best first."""
        order = sorted(w.causes().items(), key=lambda kv: -kv[1])
        out: list[Move] = []
        for i, (cause, share) in enumerate(order):
            if i > 0 and share < SECOND_CAUSE:
                break
            if cause == "download":
                moves = self._download(w, values, pinned, workers, res, share)
            elif cause == "cpu":
                moves = self._cpu(w, values, pinned, workers, res, share)
            else:
                moves = self._idle(values, pinned, workers, share)
            for m in moves:
                if m.key not in {x.key for x in out}:
                    out.append(m)
        return out

    def _cache_budget(self, values: dict[str, Any]) -> int | None:
        v = values.get("max_cache_size")
        return int(v) if v is not None else None

    def _download(
        self, w: Window, values: dict[str, Any], pinned: set[str], workers: int, res: Resources, share: float
    ) -> list[Move]:
        info = self.info
        why = f"{share:.0%} of the wait downloading"
        if info.kind == "raw":
            # the look-ahead and the GET limit (the governor's while it runs), then one more reader
            raw = self._raw_download(values, pinned, why)
            return raw + self._more_workers(w, workers, res, values, pinned, f"{why}: one more reader", one=True)
        moves: list[Move] = []
        readers = max(1, workers)
        dcap = self.depth_cap(self._cache_budget(values), readers)
        depth = int(values.get("prefetch_depth", 0))
        conc = int(values.get("download_concurrency", 1))
        chi = int(config.KNOBS["download_concurrency"].bounds[1])  # type: ignore[index]
        can_c = "download_concurrency" not in pinned
        can_d = "prefetch_depth" not in pinned
        need = self.in_flight_needed(w, readers)

        def plan(c: int, d: int, reason: str) -> None:
            c = min(c, chi)
            if can_d:
                d = min(max(depth, d), max(depth, dcap))
            else:
                d = depth
            c = min(c, max(conc, d + 1))  # more downloads at once than the depth allows would not start
            ch: list[tuple[str, Any, Any]] = []
            if can_c and c > conc:
                ch.append(("download_concurrency", conc, c))
            if can_d and d > depth:
                ch.append(("prefetch_depth", depth, d))
            if ch:
                moves.append(Move(tuple(ch), reason, "download"))

        if need is not None and need > conc:
            # at most four times as many at once: the step estimate is the period less the wait, read from two
            # sources a tick apart, so a small step (a large need) is the least sure; doublings go on from there
            c = max(min(need, JUMP * conc), 2 * conc)
            plan(
                c,
                2 * c,
                f"{why}: {need} downloads at once per reader keep up (chunk latency {w.download_latency * 1e3:.0f} ms, "
                f"step {w.step * 1e3:.1f} ms)" + (f"; {c} first" if c < need else ""),
            )
        plan(2 * conc, 2 * 2 * conc, f"{why}: twice the downloads at once")
        if can_d:
            plan(conc, 2 * max(1, depth), f"{why}: prefetch twice as deep")
        moves.extend(self._more_workers(w, workers, res, values, pinned, f"{why}: one more reader", one=True))
        return moves

    def in_flight_needed(self, w: Window, readers: int) -> int | None:
        """Downloads each reader must have under way so the loop never waits (Little's law), None when the window
        does not tell (no downloads, unknown chunk size)."""
        spc = self.info.samples_per_chunk
        lat = w.download_latency
        if spc <= 0 or lat <= 0 or not w.waits:
            return None
        step = max(w.step, 1e-3)
        chunks_per_s = self.info.batch_size / spc / step / max(1, readers)
        return max(1, math.ceil(lat * chunks_per_s * 1.25))

    def _raw_download(self, values: dict[str, Any], pinned: set[str], why: str) -> list[Move]:
        moves: list[Move] = []
        if "raw_prefetch" not in pinned:
            cur = int(values.get("raw_prefetch", -1))
            depth = self.info.raw_prefetch if cur < 0 else cur
            hi = int(config.KNOBS["raw_prefetch"].bounds[1])  # type: ignore[index]
            new = min(hi, max(1, 2 * depth))
            if new > depth:
                moves.append(Move((("raw_prefetch", cur, new),), f"{why}: look twice as far ahead", "download"))
        if not self.info.raw_governed and "raw_concurrency" not in pinned:
            cur = int(values.get("raw_concurrency", 0))
            base = cur if cur > 0 else self.info.raw_concurrency  # 0 on the board: the process's default limit
            if base > 0:
                hi = int(config.KNOBS["raw_concurrency"].bounds[1])  # type: ignore[index]
                new = min(hi, 2 * base)
                if new > base:
                    moves.append(
                        Move(
                            (("raw_concurrency", cur, new),), f"{why}: twice the GETs at once ({base} now)", "download"
                        )
                    )
        return moves

    def _cpu(
        self, w: Window, values: dict[str, Any], pinned: set[str], workers: int, res: Resources, share: float
    ) -> list[Move]:
        return self._more_workers(w, workers, res, values, pinned, f"{share:.0%} of the wait decoding/reading")

    def workers_needed(self, w: Window, workers: int) -> int:
        """Workers that produce a batch every step (a saturated worker needs ``workers x period`` per batch;
        with none, the loop's wait is its decoding)."""
        decode = w.wait_per_batch if workers == 0 else workers * w.period
        return math.ceil(decode / max(w.step, 1e-3) * 1.1)

    def _more_workers(
        self,
        w: Window,
        workers: int,
        res: Resources,
        values: dict[str, Any],
        pinned: set[str],
        why: str,
        one: bool = False,
    ) -> list[Move]:
        cap = self.workers_cap(workers, res)
        if cap <= workers:
            return []
        # one more reader: from none, two (one worker reads what the loop's own process read: no more readers)
        want = max(workers + 1, 2) if one else max(workers + 1, self.workers_needed(w, workers))
        new = min(cap, want)
        ch: list[tuple[str, Any, Any]] = [(WORKERS, workers, new)]
        reason = f"{why}: {new} workers (next epoch)"
        if not one and new < want:
            reason += f" ({want} would keep up, the budgets allow {cap})"
        depth = int(values.get("prefetch_depth", 0))
        dcap = self.depth_cap(self._cache_budget(values), new)
        if depth > dcap and "prefetch_depth" not in pinned:
            ch.append(("prefetch_depth", depth, dcap))  # more readers hold more chunks: keep the cache in budget
        out = [Move(tuple(ch), reason, "cpu" if not one else "download")]
        if not one and new > workers + 1:
            out.append(Move(((WORKERS, workers, workers + 1),), f"{why}: one more worker (next epoch)", "cpu"))
        return out

    def _idle(self, values: dict[str, Any], pinned: set[str], workers: int, share: float) -> list[Move]:
        why = f"{share:.0%} of the wait with the workers idle"
        if self.info.kind == "raw":
            return self._raw_download(values, pinned, why)
        if "prefetch_depth" in pinned:
            return []
        depth = int(values.get("prefetch_depth", 0))
        dcap = self.depth_cap(self._cache_budget(values), max(1, workers))
        new = min(dcap, max(1, 2 * depth))
        if new <= depth:
            return []
        return [Move((("prefetch_depth", depth, new),), f"{why}: prefetch twice as deep", "idle")]
