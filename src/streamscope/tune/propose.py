"""What to try next: the model's plan mapped onto the knobs, filtered by what the checks taught, or BBR's probe up.

:class:`Proposer` holds what one regime taught (the candidates rejected in it, the in-flight search's bounds) and
answers the controller's one question, which candidate, with its predicted gain. Pure, like the controller: it reads
the target's board and workers, never a clock.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from dataclasses import replace as dc_replace
from typing import Any

from streamscope.tune.bracket import InFlightSearch
from streamscope.tune.budgets import Budgets
from streamscope.tune.model import UNTIMED, Estimates, Model, Plan, depth_for
from streamscope.tune.policy import Move, Policy, Resources
from streamscope.tune.target import Target

__all__ = ["MIN_PREDICTED", "PROBE_UP", "UP_WAIT", "Knobs", "Proposer"]

#: A candidate is tried only when the model predicts at least this gain (a saturated store's move down: any).
MIN_PREDICTED = 0.03
#: A probe up asks this many times the in-flight (when the loop waits on downloads the model's demand does not
#: explain; :meth:`Proposer.probe`).
PROBE_UP = 1.5
#: More downloads in flight are tried only when the loop waits at least this share of its time outside epoch starts.
#: At S3 +50 ms with two workers the loop still waited 6-7% there at every in-flight from 30 to 46 (0.7-0.8 ms a
#: batch, the grid's best point included): a residual no download knob shortens, while each move up lengthened the
#: epoch's start (0.32, 0.42, 0.49 s at 30, 38, 46 in flight) and its first windows ran 34-51% slower.
UP_WAIT = 0.10

#: The board's values and the names pinned by the user, read once per decision.
Knobs = tuple[dict[str, Any], set[str]]


@dataclass
class Proposer:
    """See the module docstring. ``rejected``: keys of the moves rejected in this regime; ``search``: the bounds on
    the in-flight the paired checks taught."""

    target: Target
    policy: Policy
    budgets: Budgets
    model: Model
    rejected: set[str] = field(default_factory=set)
    search: InFlightSearch = field(default_factory=InFlightSearch)

    def knobs(self) -> Knobs:
        """The board's values now and the pinned names (none without a board)."""
        board = self.target.board()
        if board is None:
            return {}, set()
        values = board.snapshot()
        return values, {n for n in values if board.pinned(n)}

    def reset(self) -> None:
        """A new regime: what failed before may work now."""
        self.rejected.clear()
        self.search.reset()

    def reject(self, move: Move) -> None:
        self.rejected.add(move.key)

    def candidate(self, e: Estimates, res: Resources, knobs: Knobs | None = None) -> tuple[Move, float] | None:
        """The move to check next and its predicted gain, or None. ``knobs``: the board as :meth:`knobs` read it for
        the same decision (read here when not given)."""
        values, pinned = knobs if knobs is not None else self.knobs()
        workers = self.target.workers()
        readers = max(1, workers)
        now_k = self.policy.in_flight(values, workers)
        plan = self.model.plan(e, readers, workers, self.budgets.cpus, now_k)
        self.search.saw(e.saturated)
        drain = self.search.drain(e, plan, now_k, readers)
        plan = drain or self.search.bracket(plan, now_k, readers)
        up_ok = e.steady_share >= UP_WAIT
        for m in self.policy.move(plan, values, pinned, workers, res):
            if m.key in self.rejected:
                continue
            new = {**values, **m.forward()}
            nw = m.workers if m.workers is not None else workers
            k1 = self.policy.in_flight(new, nw)
            if not up_ok and _up(now_k, readers, k1, max(1, nw)):
                continue
            p0 = self.model.period(e, now_k, readers, workers, self.budgets.cpus)
            p1 = self.model.period(e, k1, max(1, nw), nw, self.budgets.cpus)
            gain = 1 - p1 / p0 if p0 > 0 else 0.0
            if plan.bound == "untimed":
                gain = e.steady_share * e.download_share / 2  # no latency to model: half the download wait, a guess
            # a move down only where the store shows a queue: saturated (no loss predicted), pushing back (the model
            # predicts nothing when it asks for fewer requests: its latency then holds no unloaded W0), or a drain
            # to the BDP (the model, blind to the queue below its saturation threshold, predicts the loss of fewer
            # in flight at W0; what decides is the check). A store that serves at its unloaded latency gains
            # nothing from fewer requests: the plan's lower demand alone is no candidate (measured at S3 +50 ms,
            # two workers: such moves ran 37-76% slower in their first block)
            down = m.cause == "saturated" and (drain or e.retries > 0 or (e.saturated and gain >= 0))
            if gain >= MIN_PREDICTED or down:
                return m, gain
        if not up_ok:
            return None
        return self.probe(e, plan, values, pinned, workers, readers, now_k, res)

    def probe(
        self,
        e: Estimates,
        plan: Plan,
        values: dict[str, Any],
        pinned: set[str],
        workers: int,
        readers: int,
        now_k: int | None,
        res: Resources,
    ) -> tuple[Move, float] | None:
        """BBR's probe up: the loop still waits (at least :data:`UP_WAIT` outside epoch starts, which
        :meth:`candidate` checks), the wait split puts the wait on downloads, the store shows no queue, and yet the
        model's steady demand asks for no more in flight. What it does not see is the burst at an epoch's start
        (fresh workers refill their prefetch from nothing: measured at S3 +50 ms, 2 workers, epochs of 2.3 s, 34% of
        the loop's time waiting with 4.6 of 12 allowed in flight on average). Probe :data:`PROBE_UP` times the
        in-flight; the paired check decides, a rejection bounds the next probe (the bracket bisects towards it) and
        the probing budget caps the cost."""
        if now_k is None or e.saturated or e.retries > 0 or e.download_share < UNTIMED or plan.in_flight is None:
            return None
        want = max(now_k + 1, math.ceil(PROBE_UP * now_k))
        most = self.model.ceiling(e, readers)
        if most is not None:
            # no probe past the model's ceiling: at S3 +100 ms (two workers) probes from 21 to 32 a worker,
            # above its 21, ran 6% and 42% slower (the grid's best holds 16)
            want = min(want, most)
        up = self.search.bracket(dc_replace(plan, in_flight=want), now_k, readers)
        if up.in_flight is None or up.in_flight <= now_k:
            return None
        c = up.in_flight
        why = (
            f"the loop waits {e.steady_share:.0%} of its time outside epoch starts, {e.download_share:.0%} of it on "
            f"downloads, with "
            f"{e.in_flight:.1f} in flight at W0 {e.w0 * 1e3:.0f} ms: probe {c * readers} in flight"
        )
        probe = dc_replace(up, depth=depth_for(c), bound="download", why=why)
        for m in self.policy.move(probe, values, pinned, workers, res):
            if m.key not in self.rejected and m.workers is None and m.cause == "download":
                return m, e.steady_share * e.download_share / 2  # no model of the burst: half its wait, a guess
        return None

    def bound(self, move: Move, adopted: bool) -> None:
        """What a verdict on a downloads move teaches: a bound on the in-flight worth trying in this regime (a
        candidate that measured no better went too far or not in a useful direction: half-way next, until the
        bracket is narrower than :data:`~streamscope.tune.bracket.BISECT`). A kept move of workers: the bounds on
        the new readers' in-flight start over."""
        if move.workers is not None:
            if adopted:
                self.search.forget_bounds()
            return
        values, _pinned = self.knobs()
        workers = self.target.workers()
        readers = max(1, workers)
        old = self.policy.in_flight({**values, **move.inverse()}, workers)
        new = self.policy.in_flight({**values, **move.forward()}, workers)
        if old is None or new is None or old == new:
            return
        self.search.bound(old * readers, new * readers, adopted)


def _up(k0: int | None, r0: int, k1: int | None, r1: int) -> bool:
    """True when a move takes the total in flight from ``k0`` per reader of ``r0`` to more."""
    return k0 is not None and k1 is not None and k1 * r1 > k0 * r0
