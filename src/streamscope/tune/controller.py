"""The tuner's state machine: measure, try one move, measure again, keep it or roll it back.

A pure function of its inputs (readings of the metrics, resident memory, the clock passed in), so tests drive it
with simulated time and metrics. :class:`~streamscope.tune.runner.TunerThread` feeds it in the main process.

Phases:

``warmup``     until the loop has had batches for one whole reading (the first batch's start-up is left out);
``baseline``   measure the configuration that runs (at least ``MIN_PARTS`` readings and ``MIN_WAITS`` batches);
``settle``     a move was made: skip the readings until it has taken effect (a live knob: one and a half
               metrics intervals; workers: the next epoch's first batches);
``trial``      measure the new configuration as long as the baseline, longer while the verdict is unclear
               (at most ``MAX_EXTENSIONS`` times more); keep the move if the wait per batch dropped by more than
               ``autotune_min_gain`` beyond twice the noise, roll it back if it cannot have; when still unclear
               after the extensions, a live-knob move (cheap, within the budgets) is kept on its measured gain,
               a move of workers (cores, memory, a restart) only if the gain beats the noise;
``stable``     nothing to try (the loop does not wait, or every move is used up): look again after a pause that
               doubles up to ``autotune_period_max``; a wait that grew well beyond the noise starts the search again.

A rolled-back move is not tried again for ``TABU_S`` seconds (twice that after its second rollback, ...), and no
move of its family (the same knobs, the same way) is tried after ``FAMILY_TRIES`` rollbacks of the family until the
wait changes regime. Values only grow, and a move kept must beat the noise: the knobs cannot flap between values.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from streamscope._core.errors import TuneBudgetError
from streamscope.tune.budgets import Budgets
from streamscope.tune.policy import WORKERS, Move, Policy, Resources
from streamscope.tune.signals import Measure, Reading, Window, window
from streamscope.tune.target import Target

__all__ = [
    "Controller",
    "Decision",
    "Emit",
    "FAMILY_TRIES",
    "INPUT_BOUND",
    "MAX_EXTENSIONS",
    "MAX_MEASURE_S",
    "MIN_PARTS",
    "MIN_WAITS",
    "MIN_WAIT_S",
    "REGIME",
    "TABU_S",
]


#: Readings a measurement spans at least (its spread is the noise estimate).
MIN_PARTS = 3
#: Batches a measurement spans at least.
MIN_WAITS = 8
#: A measurement that has not got its batches after this long is used as it is (a slow loop).
MAX_MEASURE_S = 30.0
#: How many times a trial may be extended while its verdict is unclear.
MAX_EXTENSIONS = 3
#: The loop counts as waiting for data when its wait is above this share of its time ...
INPUT_BOUND = 0.02
#: ... and above this many seconds per batch.
MIN_WAIT_S = 2e-4
#: A rolled-back move rests this long before it may be tried again (once).
TABU_S = 30.0
#: Rollbacks after which a family of moves (the same knobs moved the same way) rests until the regime changes.
FAMILY_TRIES = 2
#: The wait must grow by this much (relative, and beyond the noise) to count as a new regime.
REGIME = 0.25


@dataclass
class Decision:
    """One tried move and its verdict."""

    number: int
    move: Move
    t: float
    epoch: int
    wait_before: float
    wait_after: float | None = None
    outcome: str = "trying"  # trying | kept | rolled back | abandoned
    note: str = ""

    def fields(self) -> list[dict[str, Any]]:
        """The ``tune`` event fields of this decision, one per knob it moved."""
        out = []
        for knob, old, new in self.move.changes:
            f: dict[str, Any] = {
                "decision": self.number,
                "knob": knob,
                "old": old,
                "new": new,
                "reason": self.move.reason + (f" - {self.note}" if self.note else ""),
                "cause": self.move.cause,
                "outcome": self.outcome,
                "wait_before_ms": round(self.wait_before * 1e3, 3),
                "epoch": self.epoch,
            }
            if self.wait_after is not None:
                f["wait_after_ms"] = round(self.wait_after * 1e3, 3)
            out.append(f)
        return out


Emit = Callable[[str, dict[str, Any]], None]


@dataclass
class _Tabu:
    until: float
    count: int


@dataclass
class Controller:
    """See the module docstring. ``tick``: the metrics interval (seconds between two readings that differ)."""

    target: Target
    policy: Policy
    budgets: Budgets
    emit: Emit
    tick: float = 1.0
    period_max: float = 60.0
    min_gain: float = 0.05

    phase: str = "warmup"
    decisions: list[Decision] = field(default_factory=list)
    good: dict[str, Any] = field(default_factory=dict)  # the values the tuner set and kept (its state_dict)
    _last: Reading | None = None
    _warm: int = 0
    _measure: Measure = field(default_factory=Measure)
    _base: Measure | None = None
    _ref: Measure | None = None  # the measurement the stable phase compares with
    _trial: Decision | None = None
    _settle_until: float = 0.0
    _settle_epoch: int = -1
    _extensions: int = 0
    _period: float = 0.0
    _next: float = 0.0
    _tabu: dict[str, _Tabu] = field(default_factory=dict)
    _family: dict[str, int] = field(default_factory=dict)
    _ram_warned: bool = False
    _settled_why: str = ""
    _stable_look: float = 0.0
    _later: tuple[int, dict[str, Any], str] | None = None  # (epoch, knob -> value, reason): restored after it

    # --- start ------------------------------------------------------------------------------------

    def start(self, now: float, res: Resources, cache_free: int | None = None) -> None:
        """Check the budgets before the first batch and bring unpinned values inside them.

        Raises:
            TuneBudgetError: a budget the loader cannot run in at all.
        """
        b = self.budgets
        if res.own and b.ram <= res.own:
            raise TuneBudgetError(
                f"the auto-tuner's RAM budget is {b.ram / 1e6:,.0f} MB ({b.ram_source}) but this rank's main process "
                f"already uses {res.own / 1e6:,.0f} MB: set STREAMSCOPE_AUTOTUNE_RAM_BUDGET (knob "
                f"autotune_ram_budget) higher, or autotune=False"
            )
        info = self.target.info
        board = self.target.board()
        workers = self.target.workers()
        readers = max(1, workers)
        if info.uses_cache and info.chunk_bytes > 0 and board is not None:
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
                    self.good["max_cache_size"] = new
                    self.emit("budget", {"knob": "max_cache_size", "old": budget, "new": new, "reason": "disk"})
            dcap = self.policy.depth_cap(int(board.value("max_cache_size")), readers)
            depth = int(board.value("prefetch_depth"))
            if depth > dcap and not board.pinned("prefetch_depth"):
                if board.propose("prefetch_depth", dcap, "the cache budget holds no deeper prefetch"):
                    self.good["prefetch_depth"] = dcap
                    self.emit("budget", {"knob": "prefetch_depth", "old": depth, "new": dcap, "reason": "cache"})
        self._next = now
        self._period = self.tick

    # --- the loop ---------------------------------------------------------------------------------

    def next_wake(self) -> float:
        """When :meth:`step` wants the next reading (monotonic seconds)."""
        return self._next

    def step(self, now: float, reading: Reading, res: Resources) -> None:
        """Feed one reading of the metrics (and the resident memory now); may move knobs and emit events."""
        self._next = now + self.tick
        self._apply_later()
        if self._ram(now, res):
            self._last = reading
            return
        if not self.target.iterating():
            self._last = None  # time between epochs (or after the loop) is no batch's
            return
        last = self._last
        if last is None:
            self._last = reading
            return
        if reading.ticks == last.ticks and reading.wait_s == last.wait_s and now - last.t < 5 * self.tick:
            return  # the metrics have not moved since the last reading (their tick has not come yet)
        self._last = reading
        if reading.waits < last.waits or reading.wait_s < last.wait_s:
            self._measure = Measure()  # the counters went back (another run directory): start over
            return
        w = window(last, reading)
        getattr(self, f"_on_{self.phase}")(now, w, res)

    # --- phases -----------------------------------------------------------------------------------

    def _on_warmup(self, now: float, w: Window, res: Resources) -> None:
        if w.waits:
            self._warm += 1
        if self._warm >= 2:
            self._begin("baseline")

    def _measured(self, w: Window) -> bool:
        self._measure.add(w)
        m = self._measure
        if len(m.parts) >= MIN_PARTS and m.waits >= MIN_WAITS:
            return True
        return m.seconds >= MAX_MEASURE_S and m.waits >= 2

    def _on_baseline(self, now: float, w: Window, res: Resources) -> None:
        if self._measured(w):
            self._base = self._measure
            self._decide(now, res)

    def _on_settle(self, now: float, w: Window, res: Resources) -> None:
        if self._settle_epoch >= 0:
            if self.target.epoch() <= self._settle_epoch:
                return
            if not w.waits:
                return
            self._settle_epoch = -1
            self._settle_until = now + 1.5 * self.tick  # the new epoch's first batches are its start-up
            return
        if now >= self._settle_until:
            self._begin("trial" if self._trial is not None else "baseline")

    def _on_trial(self, now: float, w: Window, res: Resources) -> None:
        if not self._measured(w):
            return
        trial = self._trial
        base = self._base
        assert trial is not None and base is not None
        if len(self._measure.parts) < min(len(base.parts), 2 * MIN_PARTS) and self._measure.seconds < MAX_MEASURE_S:
            return  # about as long as the baseline
        w0, w1 = base.total.wait_per_batch, self._measure.total.wait_per_batch
        gain = (w0 - w1) / w0 if w0 > 0 else 0.0
        se = math.hypot(base.rel_error(), self._measure.rel_error())
        if gain - 2 * se >= self.min_gain:
            verdict = "kept"
        elif gain + 2 * se < self.min_gain or w0 <= 0:
            verdict = "rolled back"
        elif self._extensions < MAX_EXTENSIONS and self._measure.seconds < MAX_MEASURE_S:
            self._extensions += 1
            return  # unclear: measure longer
        elif trial.move.workers is None:
            # a live-knob move costs only what the budgets already allow (more downloads, a deeper prefetch) and
            # is undone at once: after the extensions, the measured gain decides
            verdict = "kept" if gain >= self.min_gain else "rolled back"
        else:
            # more workers cost cores and memory for the whole run and a restart to undo: the gain must beat
            # the noise
            verdict = "kept" if gain - se >= self.min_gain else "rolled back"
        trial.wait_after = w1
        trial.note = f"wait {w0 * 1e3:.2f} -> {w1 * 1e3:.2f} ms per batch ({-gain:+.0%}, noise {se:.0%})"
        self._trial = None
        if verdict == "kept":
            trial.outcome = "kept"
            for k, _old, new in trial.move.changes:
                self.good[k] = new
            self._report(trial)
            self._base = self._measure
            self._decide(now, res)
        else:
            self._roll_back(now, trial, "rolled back")

    def _on_stable(self, now: float, w: Window, res: Resources) -> None:
        self._measure.add(w)
        if now < self._stable_look:
            return
        m = self._measure
        ref = self._ref
        look = m.waits >= MIN_WAITS and len(m.parts) >= MIN_PARTS
        if look:
            mt = m.total
            waiting = mt.input_bound >= INPUT_BOUND and mt.wait_per_batch >= MIN_WAIT_S
            grew = False
            if ref is not None and ref.waits:
                r = ref.total.wait_per_batch
                noise = math.hypot(ref.rel_error(), m.rel_error())
                grew = mt.wait_per_batch > r * (1 + max(REGIME, 3 * noise)) + MIN_WAIT_S
            if waiting and grew:
                self._tabu.clear()  # a new regime: what failed before may work now
                self._family.clear()
                self._resume(now, res, f"the wait grew to {mt.wait_per_batch * 1e3:.2f} ms per batch")
                return
            if waiting and self._candidates(m.total, res, now):
                self._resume(now, res, "moves to try again")
                return
        self._period = min(self.period_max, max(self.tick, 2 * self._period))
        self._stable_look = now + self._period
        self._next = self._stable_look
        if look:
            self._measure = Measure()

    # --- decisions --------------------------------------------------------------------------------

    def _begin(self, phase: str) -> None:
        self.phase = phase
        self._measure = Measure()
        self._extensions = 0

    def _values(self) -> tuple[dict[str, Any], set[str]]:
        board = self.target.board()
        if board is None:
            return {}, set()
        values = board.snapshot()
        pinned = {n for n in values if board.pinned(n)}
        return values, pinned

    def _candidates(self, w: Window, res: Resources, now: float) -> list[Move]:
        values, pinned = self._values()
        moves = self.policy.candidates(w, values, pinned, self.target.workers(), res)
        out = []
        for m in moves:
            t = self._tabu.get(m.key)
            if t is not None and now < t.until:
                continue
            if self._family.get(m.family, 0) >= FAMILY_TRIES:
                continue
            out.append(m)
        return out

    def _decide(self, now: float, res: Resources) -> None:
        base = self._base
        assert base is not None
        w = base.total
        if w.input_bound < INPUT_BOUND or w.wait_per_batch < MIN_WAIT_S:
            self._stable(now, f"the loop waits {w.wait_per_batch * 1e3:.2f} ms per batch ({w.input_bound:.1%})")
            return
        moves = self._candidates(w, res, now)
        if not moves:
            self._stable(now, "no move left within the budgets")
            return
        self._apply(now, moves[0], w.wait_per_batch)

    def _apply(self, now: float, move: Move, wait_before: float) -> None:
        d = Decision(len(self.decisions) + 1, move, now, self.target.epoch(), wait_before)
        board = self.target.board()
        applied: list[tuple[str, Any, Any]] = []
        for knob, old, new in move.changes:
            if knob == WORKERS:
                self.target.request_workers(int(new))
                applied.append((knob, old, new))
            elif board is not None and board.propose(knob, new, move.reason):
                applied.append((knob, old, new))
        if not applied:
            return
        d.move = Move(tuple(applied), move.reason, move.cause)
        self.decisions.append(d)
        self._trial = d
        self._settle(now, move.workers is not None)

    def _settle(self, now: float, epoch: bool) -> None:
        self._begin("settle")
        self._settle_until = now + 1.5 * self.tick
        self._settle_epoch = self.target.epoch() if epoch else -1

    def _roll_back(self, now: float, d: Decision, outcome: str) -> None:
        d.outcome = outcome
        self._undo(d.move)
        t = self._tabu.get(d.move.key)
        count = 1 if t is None else t.count + 1
        self._tabu[d.move.key] = _Tabu(now + TABU_S * 2 ** (count - 1), count)
        self._family[d.move.family] = self._family.get(d.move.family, 0) + 1
        self._report(d)
        self._settle(now, d.move.workers is not None)

    def _undo(self, move: Move) -> None:
        board = self.target.board()
        later: dict[str, Any] = {}
        for knob, old, new in move.changes:
            if knob == WORKERS:
                self.target.request_workers(int(old))
            elif board is not None:
                if move.workers is not None and knob == "prefetch_depth" and old > new:
                    # the move's workers read until their epoch ends: the deeper prefetch of fewer readers would
                    # fill the cache beyond its budget meanwhile
                    later[knob] = old
                else:
                    board.propose(knob, old, f"roll back: {move.key}")
            if knob in self.good and self.good[knob] != old:
                self.good[knob] = old
        if later:
            self._later = (self.target.epoch(), later, f"roll back: {move.key} (its workers gone)")

    def _apply_later(self) -> None:
        """Restore what a rolled-back move of workers left for its epoch's end, once the next epoch started."""
        pending = self._later
        if pending is None or self.target.epoch() <= pending[0]:
            return
        self._later = None
        board = self.target.board()
        if board is not None:
            for knob, value in pending[1].items():
                board.propose(knob, value, pending[2])

    def _report(self, d: Decision) -> None:
        for f in d.fields():
            self.emit("decision", f)

    def _stable(self, now: float, why: str) -> None:
        self._ref = self._base
        if self.phase != "stable" or why != self._settled_why:
            self.emit("settled", {"reason": why, "decisions": len(self.decisions)})
        self._settled_why = why
        self._begin("stable")
        self._period = self.tick if self._period <= 0 else self._period
        self._stable_look = now + self._period
        self._next = self._stable_look

    def _resume(self, now: float, res: Resources, why: str) -> None:
        self.emit("resumed", {"reason": why})
        self._settled_why = ""
        self._base = self._measure
        self._period = self.tick
        self._next = now + self.tick
        self._decide(now, res)

    # --- the RAM budget -----------------------------------------------------------------------------

    def _ram(self, now: float, res: Resources) -> bool:
        """Over the RAM budget: undo the newest move that added memory. True when something was undone."""
        if not res.tree or res.tree <= self.budgets.ram:
            return False
        if self._trial is not None:
            d, self._trial = self._trial, None
            d.note = f"resident memory {res.tree / 1e6:,.0f} MB over the RAM budget {self.budgets.ram / 1e6:,.0f} MB"
            self._roll_back(now, d, "rolled back")
            return True
        for d in reversed(self.decisions):
            if d.outcome == "kept" and any(
                k in (WORKERS, "download_concurrency", "prefetch_depth") for k, *_ in d.move.changes
            ):
                d.note = (
                    f"resident memory {res.tree / 1e6:,.0f} MB over the RAM budget {self.budgets.ram / 1e6:,.0f} MB"
                )
                d.outcome = "rolled back"
                self._undo(d.move)
                self._tabu[d.move.key] = _Tabu(math.inf, 2)
                self._family[d.move.family] = FAMILY_TRIES
                self._report(d)
                self._settle(now, d.move.workers is not None)
                return True
        if not self._ram_warned:
            self._ram_warned = True
            self.emit(
                "settled",
                {
                    "reason": f"resident memory {res.tree / 1e6:,.0f} MB is over the RAM budget "
                    f"{self.budgets.ram / 1e6:,.0f} MB with none of the tuner's moves left to undo",
                    "decisions": len(self.decisions),
                },
            )
        return False

    # --- stopping and restoring -----------------------------------------------------------------------

    def abort(self, why: str) -> None:
        """Stop tuning: a trial under way goes back to the last good values."""
        d, self._trial = self._trial, None
        if d is not None:
            d.note = why
            d.outcome = "abandoned"
            try:
                self._undo(d.move)
            finally:
                self._report(d)
        self.phase = "stopped"

    def restore(self, values: dict[str, Any]) -> dict[str, Any]:
        """Start from a saved run's tuned values (the knobs nobody pinned here); returns what was applied."""
        board = self.target.board()
        done: dict[str, Any] = {}
        for knob, value in values.items():
            if knob == WORKERS:
                cap = self.budgets.max_workers
                if self.target.info.persistent_workers or cap <= 0:
                    continue
                n = min(int(value), max(cap, self.target.workers()))
                if n != self.target.workers():
                    self.target.request_workers(n)
                done[knob] = n
            elif board is not None and knob in getattr(board, "names", ()):
                try:
                    ok = board.propose(knob, value, "the saved run's tuned value")
                except Exception:  # noqa: BLE001 - a saved value this build does not take: left as it is
                    continue
                if ok:
                    done[knob] = value
        self.good.update(done)
        return done
