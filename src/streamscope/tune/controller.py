"""The tuner's state machine: model, propose one candidate, verify it against the incumbent in paired windows.

A pure function of its inputs (readings, resident memory, the clock passed in), so tests drive it with simulated
time (``tests/tune/sim``). :class:`~streamscope.tune.runner.Tuner` feeds it in the main process.

Phases:

``warmup``   the first windows with batches are start-up (imports, workers starting, a cold cache): skipped;
``observe``  :data:`OBSERVE` windows of the incumbent, merged: the model's inputs (:mod:`streamscope.tune.model`).
             A loop that waits less than ``wait_share`` of its time outside epoch starts (``signals.START_WAITS``)
             is left alone (``stable``); else the model's plan gives one candidate (:mod:`streamscope.tune.propose`:
             the stage that binds first; a candidate rejected in this regime is not tried again) whose predicted gain
             must reach :data:`~streamscope.tune.propose.MIN_PREDICTED`;
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

from collections import deque
from dataclasses import dataclass, field
from typing import Any

from streamscope.tune.budgets import Budgets
from streamscope.tune.decision import Arm, Decision, Emit, Trial
from streamscope.tune.epochs import EpochBook
from streamscope.tune.model import Estimates, Model
from streamscope.tune.paired import CUT, MIN_GAIN, Noise, Paired
from streamscope.tune.policy import WORKERS, Move, Policy, Resources
from streamscope.tune.propose import Knobs, Proposer
from streamscope.tune.regime import RegimeWatch
from streamscope.tune.signals import Reading, Window, merge, window
from streamscope.tune.start import fit_budgets
from streamscope.tune.target import Target

__all__ = [
    "ARM_S",
    "CUT_BATCHES",
    "INPUT_BOUND",
    "OBSERVE",
    "PROBE_ALLOWANCE",
    "PROBE_SHARE",
    "SETTLE",
    "SHORT_EPOCH",
    "WINDOW",
    "Controller",
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
#: Epochs shorter than this many windows: a live trial's arms measure whole epochs (window edges would fall on
#: epoch starts by chance); longer ones: windows, those holding an epoch's start left out.
SHORT_EPOCH = 3 * OBSERVE
#: The loop counts as waiting for data above this share of its time (TF's profiler calls a step input-bound
#: "moderately" above 5%): below it the most a tuner could gain is under 5%, less than a trial costs to show.
INPUT_BOUND = 0.05
#: Share of the run's time candidates may spend measuring worse than the incumbent (weighted by how much worse).
PROBE_SHARE = 0.02
#: Seconds of such loss allowed at the start (the first trial's worth).
PROBE_ALLOWANCE = 3.0


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
    _trial: Trial | None = None
    _t0: float | None = None
    _loss: float = 0.0  # seconds-equivalent lost on worse candidates
    _period: float = 0.0
    _next: float = 0.0
    _look: float = 0.0
    _book: EpochBook = field(default_factory=EpochBook)
    _regime: RegimeWatch = field(default_factory=lambda: RegimeWatch(OBSERVE))
    _exact: int = 0  # the last epoch whose exact time the book has been given
    _since_epoch: int = 2  # windows since the epoch count last moved
    _epoch_len: int = 1_000_000  # windows the last epoch lasted
    _moved_epoch: int = 0  # the last epoch in which the tuner moved a knob
    _ram_warned: bool = False
    _settled_why: str = ""
    _later: tuple[int, dict[str, Any], str] | None = None  # (epoch, knob -> value, reason): restored after it
    propose: Proposer = field(init=False)  # the candidates, and what this regime's checks taught

    def __post_init__(self) -> None:
        self.propose = Proposer(self.target, self.policy, self.budgets, self.model)

    # --- start ------------------------------------------------------------------------------------

    def start(self, now: float, res: Resources, cache_free: int | None = None) -> None:
        """Check the budgets before the first batch and bring unpinned values inside them
        (:func:`~streamscope.tune.start.fit_budgets`).

        Raises:
            TuneBudgetError: a budget the loader cannot run in at all.
        """
        self.model.batch_size = self.target.info.batch_size
        self.good.update(fit_budgets(self.target, self.policy, self.budgets, res, cache_free, self.emit))
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
        span = self._since_epoch < 2 and self._epoch_len >= SHORT_EPOCH
        for e in range(self._exact + 1, reading.epoch):  # the epochs the loop is done with: their exact times
            rec = self.target.epoch_record(e)
            if rec is not None:
                self._book.exact(e, *rec)
        self._exact = max(self._exact, reading.epoch - 1)
        self._book.count(w, last.epoch, reading.epoch, self.target.workers(), self._moved_epoch)
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

    def _estimates(self, knobs: Knobs) -> Estimates:
        w = merge(list(self._recent))
        now_k = self.policy.in_flight(knobs[0], w.workers)
        slots = float(now_k * max(1, w.workers)) if now_k is not None else 0.0
        return self.model.estimates(w, w.retries, w.workers, slots)

    def _may_probe(self, now: float) -> bool:
        elapsed = now - (self._t0 if self._t0 is not None else now)
        return self._loss <= self.probe_share * elapsed + PROBE_ALLOWANCE

    def _decide(self, now: float, res: Resources) -> None:
        knobs = self.propose.knobs()  # one read of the board for the whole decision
        e = self._estimates(knobs)
        self._regime.reference(e)
        if e.steady_share < self.wait_share:
            why = f"the loop waits {e.wait * 1e3:.2f} ms per batch ({e.wait_share:.1%} of its time"
            if e.start_wait > 0:
                why += f", {e.steady_share:.1%} outside epoch starts, which no download knob shortens"
            self._stable(now, why + ")")
            return
        if not self._may_probe(now):
            self._stable(now, "probing budget spent: candidates measured worse for too long a share of the run")
            return
        found = self.propose.candidate(e, res, knobs)
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
            a0 = cur if self._moved_epoch < cur and first_ok and self._book.since_start(cur) else cur + 1
            self._trial = Trial(d, first_epoch=a0)
            self._begin("epochs")
            self._on_epochs(now, Resources())
            return
        # epochs of a few windows: an arm's window holds an epoch's start or not by chance, so each arm measures
        # whole epochs (by windows, the simulator's short-epochs scenario ended at 0.761 of the best static point,
        # median of 1,000 seeds, 2nd percentile 0.503: first moves worth 25-40% rolled back after five blocks)
        by_epoch = self._epoch_len < SHORT_EPOCH
        self._trial = Trial(d, test=Paired(self.noise, self.min_gain), by_epoch=by_epoch)
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
        arm = Arm(name, SETTLE if switch else 0)
        if t.by_epoch:
            # the epoch under way when the knobs switch is mixed: the arm begins with the next one; an arm that
            # switches nothing goes on from where the last one ended, the first from this epoch if it is whole
            cur = self.target.epoch()
            if switch:
                arm.epoch = cur + 1
            elif t.next_epoch >= 0:
                arm.epoch = t.next_epoch
            else:
                arm.epoch = cur if self._moved_epoch < cur and self._book.since_start(cur) else cur + 1
        t.arms.append(arm)

    def _whole_epochs(self, arm: Arm, w: Window) -> bool:
        """An arm of a trial over epochs: True once the epochs from ``arm.epoch`` the loop is done with last
        :data:`ARM_S` or longer; its windows then give way to one of those epochs' exact totals (their waits
        summed from the windows that ended in them)."""
        t = self._trial
        assert t is not None
        if w.epoch >= arm.epoch:
            arm.parts.append(w)
        done = range(arm.epoch, self._exact + 1)
        seconds = sum(self._book.seconds(e) for e in done)
        if not done or seconds < ARM_S:
            return False
        wait = sum(p.wait_s for p in arm.parts if p.epoch in done)
        batches = sum(self._book.batches(e) for e in done)
        arm.parts = [Window(0.0, seconds, batches, min(wait, seconds), epoch=done[-1])]
        t.next_epoch = done[-1] + 1
        return True

    def _on_trial(self, now: float, w: Window, span: bool, res: Resources) -> None:
        t = self._trial
        assert t is not None and t.test is not None
        arm = t.arms[-1]
        if arm.epoch >= 0:
            if not self._whole_epochs(arm, w):
                return
        elif arm.skip > 0 or 0 < arm.skipped_s < ARM_S:
            arm.skip -= 1
            arm.skipped_s += w.seconds
            return
        elif span:
            arm.skip = SETTLE  # an epoch's start inside the arm: start the arm over
            arm.skipped_s = 0.0
            arm.parts.clear()
            return
        else:
            arm.parts.append(w)
            if len(arm.parts) < WINDOW or sum(p.seconds for p in arm.parts) < ARM_S:
                return
        if arm.name == "B":
            a = next((x for x in reversed(t.arms[:-1]) if x.name == "A" and x.parts), None)
            pa = merge(a.parts).period if a is not None else (self._regime.ref.period if self._regime.ref else 0.0)
            pb = merge(arm.parts).period
            if pa > 0 and pb > pa:
                self._loss += (pb / pa - 1) * merge(arm.parts).seconds
            if t.by_epoch and a is not None and not t.test.ratios:
                adopt = self._early(self._book.a_b_periods(pa, pb), "one epoch each")
                if adopt is not None:
                    t.decision.wait_after = merge(arm.parts).wait_per_batch
                    self._verdict(now, adopt)
                    return
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
        d.checked("A-B-B-A epochs" if t.by_epoch else "A-B-B-A windows", len(t.test.ratios), gain, lo, hi)
        d.wait_after = merge(b_parts).wait_per_batch
        d.note = f"paired gain {gain:+.1%} (95% {lo:+.1%} .. {hi:+.1%}, {len(t.test.ratios)} blocks)"
        self._verdict(now, verdict == "adopt")

    def _early(self, ab: tuple[float, float, float] | None, what: str) -> bool | None:
        """One epoch of each (``ab``: the gain, 3 sd of what consecutive epochs differ by): a difference far beyond
        that decides at once, as for a move of workers (returns the verdict, the check recorded); None: go on."""
        if ab is None or ab[1] <= self.min_gain <= ab[2]:
            return None
        gain, lo, hi = ab
        assert self._trial is not None
        d = self._trial.decision
        d.checked("A-B epochs", 1, gain, lo, hi)
        d.note = f"{what}: gain {gain:+.1%} (3 sd of consecutive epochs: {lo:+.1%} .. {hi:+.1%})"
        return lo > self.min_gain

    def _verdict(self, now: float, adopt: bool) -> None:
        t = self._trial
        assert t is not None
        d = t.decision
        self._trial = None
        m = d.move
        self.propose.bound(m, adopt)
        if adopt:
            d.outcome = "kept"
            self._set(m.forward(), f"adopted: {m.key}")
            for k, _old, new in m.changes:
                self.good[k] = new
        else:
            d.outcome = "rolled back"
            self._undo(m)
            self.propose.reject(m)
        self._report(d)
        self._period = self.tick
        self._begin("observe")

    def _on_epochs(self, now: float, res: Resources) -> None:
        """A-B-B-A over epochs: e0 (the incumbent's, running when the trial began), e0+1 and e0+2 the candidate's,
        e0+3 the incumbent's again; the verdict once e0+3 has ended."""
        t = self._trial
        assert t is not None
        e0 = t.first_epoch
        cur = self.target.epoch()
        m = t.decision.move
        if cur == e0 and not t.arms:
            t.arms.append(Arm("B", 0))
            self._set(m.forward(), f"paired check over epochs: the candidate for epochs {e0 + 1} and {e0 + 2}")
        if cur >= e0 + 2 and len(t.arms) == 1:
            # after one epoch of each: a difference far beyond what consecutive epochs of one configuration
            # differ by (drift included) decides at once; else the A-B-B-A goes on
            adopt = self._early(self._book.a_b(e0), f"epochs {e0}-{e0 + 1}")
            if adopt is not None:
                pa, pb = self._book.period(e0), self._book.period(e0 + 1)
                if not adopt and pb > pa:
                    self._loss += (pb / pa - 1) * self._book.seconds(e0 + 1)
                self._verdict(now, adopt)
                return
        if cur == e0 + 2 and len(t.arms) == 1:
            t.arms.append(Arm("A", 0))
            self._set({WORKERS: m.inverse()[WORKERS]}, f"paired check over epochs: the incumbent for epoch {e0 + 3}")
            pa, pb = self._book.period(e0), self._book.period(e0 + 1)
            if pa > 0 and pb > pa:
                self._loss += (pb / pa - 1) * self._book.seconds(e0 + 1)
        if cur < e0 + 4:
            return
        abba = self._book.a_b_b_a(e0)
        if abba is None:
            self._trial = None
            t.decision.outcome = "abandoned"
            t.decision.note = "an epoch of the check had no batches"
            self._undo(m)
            self._report(t.decision)
            self._begin("observe")
            return
        gain, lo, hi = abba
        d = t.decision
        d.checked("A-B-B-A epochs", 1, gain, lo, hi)
        d.note = f"epochs {e0}-{e0 + 3}: paired gain {gain:+.1%} (95% {lo:+.1%} .. {hi:+.1%})"
        self._verdict(now, lo > self.min_gain)

    # --- stable -----------------------------------------------------------------------------------

    def _on_stable(self, now: float, res: Resources) -> None:
        if len(self._recent) < OBSERVE:
            return
        e = merge(list(self._recent))  # the raw windows: the model's filters only when it decides
        why = self._regime.changed(e, self._recent[-1].step, self.wait_share)
        if why is not None:
            self.propose.reset()
            self.model.reset()
            self.emit("resumed", {"reason": why})
            self._settled_why = ""
            self._period = self.tick
            self._begin("observe")
            return
        if now >= self._look:
            self._period = min(self.period_max, max(self.tick, 2 * self._period))
            self._look = now + self._period
            if e.steady_wait_share < self.wait_share or not self._may_probe(now):
                return
            knobs = self.propose.knobs()
            if self.propose.candidate(self._estimates(knobs), res, knobs) is not None:
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
        if res.rank is not None:
            why = f"rank {res.rank}'s resident memory at {res.tree / self.budgets.ram:.0%} of its RAM budget"
        else:
            why = f"resident memory {res.tree / 1e6:,.0f} MB over the RAM budget {self.budgets.ram / 1e6:,.0f} MB"
        if self._trial is not None:
            d = self._trial.decision
            self._trial = None
            d.note = why
            d.outcome = "rolled back"
            self._undo(d.move)
            self.propose.reject(d.move)
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
                self.propose.reject(d.move)
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
