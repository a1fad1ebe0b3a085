"""The tuner's state machine: model, propose one candidate, verify it against the incumbent in paired windows.

A pure function of its inputs (readings, resident memory, the clock passed in), so tests drive it with simulated
time (``tests/tune/sim``). :class:`~streamscope.tune.runner.Tuner` feeds it in the main process.

Phases:

``warmup``   the first windows with batches are start-up (imports, workers starting, a cold cache): skipped;
``observe``  :data:`OBSERVE` windows of the incumbent, merged: the model's inputs (:mod:`streamscope.tune.model`).
             A loop that waits less than ``wait_share`` of its time is left alone (``stable``); else the model's
             plan gives one candidate (the stage that binds first; a candidate rejected in this regime is not
             tried again) whose predicted gain must reach :data:`MIN_PREDICTED`;
``trial``    a live-knob candidate against the incumbent in A-B-B-A blocks of windows (each switch skips
             :data:`SETTLE` windows, then :data:`WINDOW` windows measure), a sequential test on the blocks' paired
             ratios (:mod:`streamscope.tune.paired`); adopted only when the lower bound shows a gain;
``epochs``   a ``num_workers`` candidate, which only an epoch's start can apply: A-B-B-A over whole epochs (the
             incumbent's epoch, two of the candidate's, one more of the incumbent's), never a comparison of two
             epochs alone;
``stable``   nothing to try: watch every window for a regime change (the step or the latency moving, at the same
             configuration) or the wait growing, which re-opens the search; re-run the model after a pause that
             doubles up to ``period_max``.

Probing is capped: the time spent on candidates that measured worse, weighted by how much worse, stays under
``probe_share`` of the run (plus :data:`PROBE_ALLOWANCE` seconds); past it, no trial starts until the run has
grown. The untuned values are the first incumbent; a candidate's knobs go back to the incumbent's between its
windows and after a rejection.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from dataclasses import replace as dc_replace
from typing import Any

from streamscope._core.errors import TuneBudgetError
from streamscope.tune.budgets import Budgets
from streamscope.tune.model import Estimates, Model, Plan, depth_for
from streamscope.tune.paired import CUT, MIN_GAIN, Noise, Paired
from streamscope.tune.policy import WORKERS, Move, Policy, Resources
from streamscope.tune.signals import Reading, Window, merge, window
from streamscope.tune.target import Target

__all__ = [
    "ARM_S",
    "BISECT",
    "CUT_BATCHES",
    "EPOCH_NOISE",
    "INPUT_BOUND",
    "MIN_PREDICTED",
    "OBSERVE",
    "PROBE_ALLOWANCE",
    "PROBE_SHARE",
    "REGIME",
    "SETTLE",
    "WINDOW",
    "Controller",
    "Decision",
    "Emit",
]

#: Windows of the incumbent the model's inputs are merged from.
OBSERVE = 3
#: Windows skipped after each switch of a live trial (the prefetch refills, the downloads under way finish).
SETTLE = 1
#: At least this many seconds are skipped after a switch, and measured by an arm (short metrics intervals).
ARM_S = 0.5
#: A candidate's first arm rejects it at once only when it holds this many batches (a short window is noise).
CUT_BATCHES = 50
#: Windows each arm of a live trial measures.
WINDOW = 1
#: The loop counts as waiting for data above this share of its time (TF's profiler calls a step input-bound
#: "moderately" above 5%): below it the most a tuner could gain is under 5%, less than a trial costs to show.
INPUT_BOUND = 0.05
#: A candidate is tried only when the model predicts at least this gain (a saturated store's move down: any).
MIN_PREDICTED = 0.03
#: Share of the run's time candidates may spend measuring worse than the incumbent (weighted by how much worse).
PROBE_SHARE = 0.02
#: Seconds of such loss allowed at the start (the first trial's worth).
PROBE_ALLOWANCE = 3.0
#: A step or latency that moves by this much (relative; the latency twice this) for three windows at the same
#: configuration is a new regime.
REGIME = 0.3
#: A bisection of the in-flight ends when the bracket around the incumbent is narrower than this (relative).
BISECT = 0.15
#: Relative spread assumed of an epoch's period before two epochs of one configuration were measured.
EPOCH_NOISE = 0.03


@dataclass
class Decision:
    """One candidate and its verdict, with the model's inputs and prediction and the paired check's result."""

    number: int
    move: Move
    t: float
    epoch: int
    wait_before: float
    wait_after: float | None = None
    outcome: str = "trying"  # trying | kept | rolled back | abandoned
    note: str = ""
    inputs: dict[str, Any] = field(default_factory=dict)
    predicted: float = 0.0  # the model's relative gain in throughput
    check: dict[str, Any] = field(default_factory=dict)  # the paired check: kind, blocks, gain, lower, upper

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
                "predicted_gain": round(self.predicted, 4),
                **self.check,
                **self.inputs,
            }
            if self.wait_after is not None:
                f["wait_after_ms"] = round(self.wait_after * 1e3, 3)
            out.append(f)
        return out


Emit = Callable[[str, dict[str, Any]], None]


@dataclass
class _Arm:
    name: str  # "A" (incumbent) or "B" (candidate)
    skip: int  # windows to skip (after a switch)
    parts: list[Window] = field(default_factory=list)
    skipped_s: float = 0.0


@dataclass
class _Trial:
    decision: Decision
    test: Paired | None = None  # live trials
    arms: list[_Arm] = field(default_factory=list)  # the block under way
    first_epoch: int = 0  # epoch trials: the incumbent's epoch (A0)


@dataclass
class Controller:
    """See the module docstring. ``tick``: seconds between two readings."""

    target: Target
    policy: Policy
    budgets: Budgets
    emit: Emit
    tick: float = 1.0
    period_max: float = 60.0
    min_gain: float = MIN_GAIN
    wait_share: float = INPUT_BOUND
    probe_share: float = PROBE_SHARE

    phase: str = "warmup"
    decisions: list[Decision] = field(default_factory=list)
    good: dict[str, Any] = field(default_factory=dict)  # the values the tuner set and kept (its state_dict)
    model: Model = field(default_factory=Model)
    noise: Noise = field(default_factory=Noise)
    _last: Reading | None = None
    _warm: int = 0
    _recent: deque[Window] = field(default_factory=lambda: deque(maxlen=OBSERVE))
    _trial: _Trial | None = None
    _rejected: set[str] = field(default_factory=set)
    _t0: float | None = None
    _loss: float = 0.0  # seconds-equivalent lost on worse candidates
    _period: float = 0.0
    _next: float = 0.0
    _look: float = 0.0
    _ref: Estimates | None = None
    _drift: int = 0
    _epochs: dict[int, list[float]] = field(default_factory=dict)  # epoch -> [seconds, batches, workers]
    _epoch_noise: Noise = field(default_factory=lambda: Noise(EPOCH_NOISE**2, 1))
    _steps: deque[float] = field(default_factory=lambda: deque(maxlen=30))  # log step of stable windows
    _ceil: int | None = None  # in-flight (all readers) no better going up, in this regime
    _floor: int | None = None  # in-flight no better going down
    _queued: bool = False  # the store was seen saturated in this regime
    _since_epoch: int = 2  # windows since the epoch count last moved
    _epoch_len: int = 1_000_000  # windows the last epoch lasted
    _moved_epoch: int = 0  # the last epoch in which the tuner moved a knob
    _ram_warned: bool = False
    _settled_why: str = ""
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
        readers = max(1, self.target.workers())
        self.model.batch_size = info.batch_size
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
        """Feed one reading (and the resident memory now); may move knobs and emit events."""
        self._next = now + self.tick
        self._apply_later()
        if self._t0 is None:
            self._t0 = now
        if self._ram(now, res):
            self._last = reading
            return
        if not self.target.iterating():
            self._last = None  # time between epochs (or after the loop) is no batch's
            return
        last = self._last
        if last is None or reading.batches < last.batches or reading.wait_s < last.wait_s - 1e-9:
            self._last = reading  # the first reading, or the counters went back (a new loader)
            return
        w = window(last, reading)
        if w.batches == 0 and w.seconds < 10 * self.tick:
            return  # no batch yet: the window grows (a slow loop, a long wait)
        self._last = reading
        if reading.epoch != last.epoch:
            self._epoch_len, self._since_epoch = self._since_epoch, 0
        else:
            self._since_epoch += 1
        # an epoch's start (workers starting, its first batches) is no steady state, unless epochs are so short
        # that their starts are part of every window
        span = self._since_epoch < 2 and self._epoch_len >= 3 * OBSERVE
        self._count_epoch(w, last.epoch, reading.epoch)
        self.model.observe(w, w.retries)
        if self.phase == "warmup":
            self._warm += 1
            if self._warm >= 2:
                self._begin("observe")
            return
        if self.phase == "observe":
            if not span:
                self._recent.append(w)
            if len(self._recent) >= OBSERVE:
                self._decide(now, res)
        elif self.phase == "trial":
            self._on_trial(now, w, span, res)
        elif self.phase == "epochs":
            self._on_epochs(now, res)
        elif self.phase == "stable":
            if not span:
                self._recent.append(w)
                self._on_stable(now, res)

    def _begin(self, phase: str) -> None:
        self.phase = phase
        self._recent.clear()

    # --- model and candidates ---------------------------------------------------------------------

    def _values(self) -> tuple[dict[str, Any], set[str]]:
        board = self.target.board()
        if board is None:
            return {}, set()
        values = board.snapshot()
        pinned = {n for n in values if board.pinned(n)}
        return values, pinned

    def _estimates(self) -> Estimates:
        w = merge(list(self._recent))
        return self.model.estimates(w, w.retries, w.workers)

    def _candidate(self, e: Estimates, res: Resources) -> tuple[Move, float] | None:
        values, pinned = self._values()
        workers = self.target.workers()
        readers = max(1, workers)
        now_k = self.policy.in_flight(values, workers)
        plan = self.model.plan(e, readers, workers, self.budgets.cpus, now_k)
        self._queued = self._queued or e.saturated
        drain = self._drain(e, plan, now_k, readers)
        plan = drain or self._bracket(plan, now_k, readers)
        for m in self.policy.move(plan, values, pinned, workers, res):
            if m.key in self._rejected:
                continue
            new = {**values, **m.forward()}
            nw = m.workers if m.workers is not None else workers
            p0 = self.model.period(e, now_k, readers, workers, self.budgets.cpus)
            p1 = self.model.period(e, self.policy.in_flight(new, nw), max(1, nw), nw, self.budgets.cpus)
            gain = 1 - p1 / p0 if p0 > 0 else 0.0
            if plan.bound == "untimed":
                gain = e.wait_share * e.download_share / 2  # no latency to model: half the download wait, a guess
            # a saturated store's move down: whatever the model predicts when the store pushes back (it asks for
            # fewer requests, and its latency then holds no unloaded W0 to predict from), else no loss predicted
            # a drain to the BDP: the model, blind to the queue below its saturation threshold, predicts the loss
            # of fewer in flight at W0; what decides is the check
            if gain >= MIN_PREDICTED or (m.cause == "saturated" and (gain >= 0 or e.retries > 0 or drain)):
                return m, gain
        return None

    def _drain(self, e: Estimates, plan: Plan, now_k: int | None, readers: int) -> Plan | None:
        """BBR's probe down: once this regime saw the store saturated and a move up measured no better, an
        in-flight above the BDP (max rate x W0) only queues, whatever the model's plan says (a store losing
        throughput past its knee makes the BDP measured there too low, so the move down that capped in-flight
        at it may have failed, and the bisection that followed may have stopped above the knee): drain to the
        BDP, on the readers' grid, above the floor of this regime's checks."""
        if not self._queued or self._ceil is None or plan.in_flight is None or now_k is None:
            return None
        if plan.in_flight < now_k or e.w0 <= 0 or e.latency <= e.w0 or e.in_flight <= e.bdp:
            return None  # the model moves down already, or no queue
        c = math.floor(e.bdp / readers)
        if self._floor is not None:
            c = max(c, self._floor // readers + 1)
        if c < 1 or c >= now_k:
            return None
        why = (
            f"in flight {e.in_flight:.1f} above the BDP {e.bdp:.1f} at latency {e.latency * 1e3:.0f} ms vs W0 "
            f"{e.w0 * 1e3:.0f} ms, a store seen saturated: drained to {c * readers} in flight"
        )
        return dc_replace(plan, in_flight=c, depth=depth_for(c), why=why)

    def _bracket(self, plan: Plan, now_k: int | None, readers: int) -> Plan:
        """Keep the plan's in-flight inside what this regime's checks left open: below the lowest total that
        measured no better going up (or that a kept move down left), above the highest that measured no better
        going down; a plan past a bound goes half-way (geometrically) from the incumbent towards it, a bisection
        that ends at the store's knee."""
        if plan.in_flight is None or now_k is None:
            return plan
        k_now, k = now_k * readers, plan.in_flight * readers
        c = plan.in_flight
        if k > k_now and self._ceil is not None and k * (1 + BISECT) >= self._ceil:
            # the bracket (incumbent, ceiling) is narrower than BISECT: the search ends; else its geometric middle,
            # on the readers' grid (a total the knobs can set) and strictly inside it
            c = round(math.sqrt(k_now * self._ceil) / readers)
            c = min(c, math.ceil(self._ceil / readers) - 1)
            if self._ceil < k_now * (1 + BISECT) or c * readers <= k_now:
                c = now_k
        elif k < k_now and self._floor is not None and k <= self._floor * (1 + BISECT):
            c = round(math.sqrt(k_now * self._floor) / readers)
            c = max(c, self._floor // readers + 1)
            if k_now < self._floor * (1 + BISECT) or c * readers >= k_now:
                c = now_k
        if c == plan.in_flight:
            return plan
        c = max(1, c)
        why = plan.why + f"; bisected to {c * readers} in flight"
        return dc_replace(plan, in_flight=c, depth=depth_for(c), why=why)

    def _bound(self, move: Move, adopted: bool) -> None:
        """What a verdict on a downloads move teaches: a bound on the in-flight worth trying in this regime (a
        candidate that measured no better went too far or not in a useful direction: half-way next, until the
        bracket is narrower than :data:`BISECT`)."""
        if move.workers is not None:
            return
        values, _pinned = self._values()
        workers = self.target.workers()
        readers = max(1, workers)
        old = self.policy.in_flight({**values, **move.inverse()}, workers)
        new = self.policy.in_flight({**values, **move.forward()}, workers)
        if old is None or new is None or old == new:
            return
        k_old, k_new = old * readers, new * readers
        if k_new > k_old and not adopted:
            self._ceil = k_new if self._ceil is None else min(self._ceil, k_new)
        elif k_new < k_old and adopted:
            self._ceil = k_old if self._ceil is None else min(self._ceil, k_old)
        elif k_new < k_old and not adopted:
            self._floor = k_new if self._floor is None else max(self._floor, k_new)
        elif k_new > k_old and adopted:
            self._floor = k_old if self._floor is None else max(self._floor, k_old)

    def _may_probe(self, now: float) -> bool:
        elapsed = now - (self._t0 if self._t0 is not None else now)
        return self._loss <= self.probe_share * elapsed + PROBE_ALLOWANCE

    def _decide(self, now: float, res: Resources) -> None:
        e = self._estimates()
        self._ref = e
        self._drift = 0
        if e.wait_share < self.wait_share:
            self._stable(now, f"the loop waits {e.wait * 1e3:.2f} ms per batch ({e.wait_share:.1%} of its time)")
            return
        if not self._may_probe(now):
            self._stable(now, "probing budget spent: candidates measured worse for too long a share of the run")
            return
        found = self._candidate(e, res)
        if found is None:
            self._stable(now, "the model predicts no gain from a move not yet rejected")
            return
        move, gain = found
        self._start_trial(now, move, gain, e)

    # --- trials -----------------------------------------------------------------------------------

    def _start_trial(self, now: float, move: Move, predicted: float, e: Estimates) -> None:
        d = Decision(len(self.decisions) + 1, move, now, self.target.epoch(), e.wait, inputs=e.fields())
        d.predicted = predicted
        self.decisions.append(d)
        if move.workers is not None:
            # the incumbent's epoch A0 must be whole and unchanged: this one if no knob moved in it, else the next
            # (the first epoch fills a cache: it is an incumbent's epoch only for data that needs none)
            cur = self.target.epoch()
            first_ok = cur >= 2 or not self.target.info.uses_cache
            a0 = cur if self._moved_epoch < cur and first_ok and self._since_epoch_start(cur) else cur + 1
            self._trial = _Trial(d, first_epoch=a0)
            self._begin("epochs")
            self._on_epochs(now, Resources())
            return
        self._trial = _Trial(d, test=Paired(self.noise, self.min_gain))
        self._next_arm()
        self._begin("trial")

    def _set(self, values: dict[str, Any], reason: str) -> None:
        self._moved_epoch = self.target.epoch()
        board = self.target.board()
        for knob, value in values.items():
            if knob == WORKERS:
                self.target.request_workers(int(value))
            elif board is not None:
                board.propose(knob, value, reason)

    def _next_arm(self) -> None:
        """The next arm of the A-B-B-A block (switching the knobs when the arm changes)."""
        t = self._trial
        assert t is not None
        order = "ABBA"
        i = len(t.arms)
        if i >= 4:
            t.arms = []
            i = 0
        name = order[i]
        switch = name != (t.arms[-1].name if t.arms else "A")  # a block starts with the incumbent in place
        if switch:
            m = t.decision.move
            self._set(
                m.forward() if name == "B" else m.inverse(),
                f"paired check: {'candidate' if name == 'B' else 'incumbent'}",
            )
        t.arms.append(_Arm(name, SETTLE if switch else 0))

    def _on_trial(self, now: float, w: Window, span: bool, res: Resources) -> None:
        t = self._trial
        assert t is not None and t.test is not None
        arm = t.arms[-1]
        if arm.skip > 0 or 0 < arm.skipped_s < ARM_S:
            arm.skip -= 1
            arm.skipped_s += w.seconds
            return
        if span:
            arm.skip = SETTLE  # an epoch's start inside the arm: start the arm over
            arm.skipped_s = 0.0
            arm.parts.clear()
            return
        arm.parts.append(w)
        if len(arm.parts) < WINDOW or sum(p.seconds for p in arm.parts) < ARM_S:
            return
        if arm.name == "B":
            a = next((x for x in reversed(t.arms[:-1]) if x.name == "A" and x.parts), None)
            pa = merge(a.parts).period if a is not None else (self._ref.period if self._ref else 0.0)
            pb = merge(arm.parts).period
            if pa > 0 and pb > pa:
                self._loss += (pb / pa - 1) * merge(arm.parts).seconds
            if pa > 0 and pb > pa * (1 + 3 * CUT) and not t.test.ratios and merge(arm.parts).batches >= CUT_BATCHES:
                # far worse at once: no block is needed to tell (the probing cost stays small)
                gain = 1 - pb / pa
                d = t.decision
                d.check = {"check": "A-B windows", "blocks": 0, "gain": round(gain, 4)}
                d.wait_after = merge(arm.parts).wait_per_batch
                d.note = f"the candidate's first windows ran {gain:+.0%} against the incumbent's"
                self._verdict(now, False)
                return
        if len(t.arms) < 4:
            self._next_arm()
            return
        a_parts = [p for x in t.arms if x.name == "A" for p in x.parts]
        b_parts = [p for x in t.arms if x.name == "B" for p in x.parts]
        t.test.add(merge(a_parts).period, merge(b_parts).period)
        verdict = t.test.verdict()
        if verdict is None:
            t.arms = []  # another block, from the incumbent that ended this one (no switch)
            self._next_arm()
            return
        gain, lo, hi = t.test.interval()
        ss, df = t.test.learnt()
        self.noise.add(ss, df)
        d = t.decision
        d.check = {
            "check": "A-B-B-A windows",
            "blocks": len(t.test.ratios),
            "gain": round(gain, 4),
            "gain_lo": round(lo, 4),
            "gain_hi": round(hi, 4),
        }
        d.wait_after = merge(b_parts).wait_per_batch
        d.note = f"paired gain {gain:+.1%} (95% {lo:+.1%} .. {hi:+.1%}, {len(t.test.ratios)} blocks)"
        self._verdict(now, verdict == "adopt")

    def _verdict(self, now: float, adopt: bool) -> None:
        t = self._trial
        assert t is not None
        d = t.decision
        self._trial = None
        m = d.move
        self._bound(m, adopt)
        if adopt and m.workers is not None:
            self._ceil = self._floor = None  # other readers: the bounds on their in-flight start over
        if adopt:
            d.outcome = "kept"
            self._set(m.forward(), f"adopted: {m.key}")
            for k, _old, new in m.changes:
                self.good[k] = new
        else:
            d.outcome = "rolled back"
            self._undo(m)
            self._rejected.add(m.key)
        self._report(d)
        self._period = self.tick
        self._begin("observe")

    def _count_epoch(self, w: Window, e0: int, e1: int) -> None:
        """Per-epoch totals (seconds, batches, workers); a window across an epoch's start counts for the new one."""
        rec = self._epochs.get(e1)
        if rec is None:
            # [seconds, batches, workers, seen from its start]; two whole epochs before it, of one configuration
            # and no move, tell how much consecutive epochs differ (drift included)
            rec = self._epochs[e1] = [
                0.0,
                0.0,
                float(self.target.workers()),
                float(e0 != e1 and e0 in self._epochs or not self._epochs and e1 <= 1),
            ]
            a, b = self._epochs.get(e1 - 2), self._epochs.get(e1 - 1)
            if a and b and a[3] and b[3] and a[2] == b[2] and self._moved_epoch < e1 - 2 and a[1] > 0 and b[1] > 0:
                self._epoch_noise.add(math.log((b[0] / b[1]) / (a[0] / a[1])) ** 2 / 2, 1)
        rec[0] += w.seconds
        rec[1] += w.batches
        if len(self._epochs) > 64:
            del self._epochs[min(self._epochs)]

    def _since_epoch_start(self, e: int) -> bool:
        """The tuner has counted epoch ``e`` from its start."""
        rec = self._epochs.get(e)
        return rec is not None and rec[3] > 0

    def _epoch_period(self, e: int) -> float:
        rec = self._epochs.get(e)
        return rec[0] / rec[1] if rec and rec[1] > 0 else 0.0

    def _on_epochs(self, now: float, res: Resources) -> None:
        """A-B-B-A over epochs: e0 (the incumbent's, running when the trial began), e0+1 and e0+2 the candidate's,
        e0+3 the incumbent's again; the verdict once e0+3 has ended."""
        t = self._trial
        assert t is not None
        e0 = t.first_epoch
        cur = self.target.epoch()
        m = t.decision.move
        if cur == e0 and not t.arms:
            t.arms.append(_Arm("B", 0))
            self._set(m.forward(), f"paired check over epochs: the candidate for epochs {e0 + 1} and {e0 + 2}")
        if cur >= e0 + 2 and len(t.arms) == 1:
            # after one epoch of each: a difference far beyond what consecutive epochs of one configuration
            # differ by (drift included) decides at once; else the A-B-B-A goes on
            pa, pb = self._epoch_period(e0), self._epoch_period(e0 + 1)
            if pa > 0 and pb > 0:
                r = math.log(pb / pa)
                se = self._epoch_noise.sd * math.sqrt(2)
                gain, lo, hi = 1 - math.exp(r), 1 - math.exp(r + 3 * se), 1 - math.exp(r - 3 * se)
                if lo > self.min_gain or hi < self.min_gain:
                    d = t.decision
                    d.check = {
                        "check": "A-B epochs",
                        "blocks": 1,
                        "gain": round(gain, 4),
                        "gain_lo": round(lo, 4),
                        "gain_hi": round(hi, 4),
                    }
                    d.note = (
                        f"epochs {e0}-{e0 + 1}: gain {gain:+.1%} (3 sd of consecutive epochs: {lo:+.1%} .. {hi:+.1%})"
                    )
                    if hi < self.min_gain and pb > pa:
                        self._loss += (pb / pa - 1) * self._epochs[e0 + 1][0]
                    self._verdict(now, lo > self.min_gain)
                    return
        if cur == e0 + 2 and len(t.arms) == 1:
            t.arms.append(_Arm("A", 0))
            self._set({WORKERS: m.inverse()[WORKERS]}, f"paired check over epochs: the incumbent for epoch {e0 + 3}")
            pa, pb = self._epoch_period(e0), self._epoch_period(e0 + 1)
            if pa > 0 and pb > pa:
                self._loss += (pb / pa - 1) * self._epochs[e0 + 1][0]
        if cur < e0 + 4:
            return
        a = [self._epoch_period(e0), self._epoch_period(e0 + 3)]
        b = [self._epoch_period(e0 + 1), self._epoch_period(e0 + 2)]
        if min(a + b) <= 0:
            self._trial = None
            t.decision.outcome = "abandoned"
            t.decision.note = "an epoch of the check had no batches"
            self._undo(m)
            self._report(t.decision)
            self._begin("observe")
            return
        # the incumbent's two epochs measure the rig's epoch-to-epoch noise (and so do earlier ones)
        self._epoch_noise.add(math.log(a[1] / a[0]) ** 2 / 2, 1)
        r = math.log(sum(b) / sum(a))
        se = self._epoch_noise.sd
        gain = 1 - math.exp(r)
        lo, hi = 1 - math.exp(r + 2 * se), 1 - math.exp(r - 2 * se)
        d = t.decision
        d.check = {
            "check": "A-B-B-A epochs",
            "blocks": 1,
            "gain": round(gain, 4),
            "gain_lo": round(lo, 4),
            "gain_hi": round(hi, 4),
        }
        d.note = f"epochs {e0}-{e0 + 3}: paired gain {gain:+.1%} (95% {lo:+.1%} .. {hi:+.1%})"
        self._verdict(now, lo > self.min_gain)

    # --- stable -----------------------------------------------------------------------------------

    def _on_stable(self, now: float, res: Resources) -> None:
        if len(self._recent) < OBSERVE:
            return
        e = merge(list(self._recent))  # the raw windows: the model's filters only when it decides
        ref = self._ref
        steps = self._steps
        steps.append(math.log(max(self._recent[-1].step, 1e-7)))
        if ref is not None:
            # a move beyond the noise: REGIME, or three standard errors of a merge of OBSERVE windows
            n = len(steps)
            sd = math.sqrt(sum((x - sum(steps) / n) ** 2 for x in steps) / (n - 1)) if n > 2 else 0.0
            limit = max(REGIME, 3 * sd / math.sqrt(OBSERVE))
            moved = abs(math.log(max(e.step, 1e-7) / max(ref.step, 1e-7))) > math.log1p(limit)
            if e.latency > 0 and ref.latency > 0 and e.retries == 0:
                r = e.latency / ref.latency
                moved = moved or r > 1 + 2 * REGIME or r < 1 / (1 + 2 * REGIME)
            # a loop that did not wait and now does (a loop that waited is judged by its step and latency)
            moved = moved or (ref.wait_share < self.wait_share and e.wait_share >= 3 * self.wait_share)
            self._drift = self._drift + 1 if moved else 0
            if self._drift >= OBSERVE:
                self._rejected.clear()  # a new regime: what failed before may work now
                self._ceil = self._floor = None
                self._queued = False
                self.model.reset()
                self.emit(
                    "resumed",
                    {
                        "reason": f"a new regime: step {ref.step * 1e3:.2f} -> {e.step * 1e3:.2f} ms, latency "
                        f"{ref.latency * 1e3:.0f} -> {e.latency * 1e3:.0f} ms, wait share {ref.wait_share:.1%} -> "
                        f"{e.wait_share:.1%}",
                    },
                )
                self._settled_why = ""
                self._period = self.tick
                self._begin("observe")
                return
        if now >= self._look:
            self._period = min(self.period_max, max(self.tick, 2 * self._period))
            self._look = now + self._period
            if (
                e.wait_share >= self.wait_share
                and self._may_probe(now)
                and self._candidate(self._estimates(), res) is not None
            ):
                self.emit("resumed", {"reason": "the model has a candidate to try"})
                self._settled_why = ""
                self._decide(now, res)

    def _stable(self, now: float, why: str) -> None:
        if self.phase != "stable" or why != self._settled_why:
            self.emit("settled", {"reason": why, "decisions": len(self.decisions)})
        self._settled_why = why
        self._begin("stable")
        self._look = now + self._period

    # --- undo, RAM ----------------------------------------------------------------------------------

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

    def _ram(self, now: float, res: Resources) -> bool:
        """Over the RAM budget: undo the move on trial, else the newest kept move that added memory."""
        if not res.tree or res.tree <= self.budgets.ram:
            return False
        why = f"resident memory {res.tree / 1e6:,.0f} MB over the RAM budget {self.budgets.ram / 1e6:,.0f} MB"
        if self._trial is not None:
            d = self._trial.decision
            self._trial = None
            d.note = why
            d.outcome = "rolled back"
            self._undo(d.move)
            self._rejected.add(d.move.key)
            self._report(d)
            self._begin("observe")
            return True
        for d in reversed(self.decisions):
            if d.outcome == "kept" and any(
                k in (WORKERS, "download_concurrency", "prefetch_depth", "raw_prefetch", "raw_concurrency")
                and new > old
                for k, old, new in d.move.changes
            ):
                d.note = why
                d.outcome = "rolled back"
                self._undo(d.move)
                self._rejected.add(d.move.key)
                self._report(d)
                self._begin("observe")
                return True
        if not self._ram_warned:
            self._ram_warned = True
            self.emit(
                "settled",
                {"reason": f"{why} with none of the tuner's moves left to undo", "decisions": len(self.decisions)},
            )
        return False

    # --- stopping and restoring -----------------------------------------------------------------------

    def abort(self, why: str) -> None:
        """Stop tuning: a candidate under check goes back to the incumbent (the last good values)."""
        t, self._trial = self._trial, None
        if t is not None:
            d = t.decision
            d.note = why
            d.outcome = "abandoned"
            try:
                self._undo(d.move)
            finally:
                self._report(d)
        self.phase = "stopped"

    @property
    def trying(self) -> bool:
        """A candidate is under check."""
        return self._trial is not None

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
