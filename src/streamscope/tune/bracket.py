"""The search for the in-flight downloads the store serves best, within one regime: what the paired checks taught
(a ceiling and a floor) and BBR's drain to the bandwidth-delay product once the store was seen saturated."""

from __future__ import annotations

import math
from dataclasses import dataclass
from dataclasses import replace as dc_replace

from streamscope.tune.model import Estimates, Plan, depth_for

__all__ = ["BISECT", "InFlightSearch"]

#: A bisection of the in-flight ends when the bracket around the incumbent is narrower than this (relative).
BISECT = 0.15


@dataclass
class InFlightSearch:
    """Bounds on the total in-flight (all readers) worth trying in this regime.

    ``ceil``: the lowest total that measured no better going up (or that a kept move down left); ``floor``: the
    highest that measured no better going down; ``queued``: the store was seen saturated.
    """

    ceil: int | None = None
    floor: int | None = None
    queued: bool = False

    def reset(self) -> None:
        """A new regime: what the checks taught no longer holds."""
        self.ceil = self.floor = None
        self.queued = False

    def forget_bounds(self) -> None:
        """Other readers (a kept move of workers): the bounds on their in-flight start over."""
        self.ceil = self.floor = None

    def saw(self, saturated: bool) -> None:
        self.queued = self.queued or saturated

    def drain(self, e: Estimates, plan: Plan, now_k: int | None, readers: int) -> Plan | None:
        """BBR's probe down: once this regime saw the store saturated and a move up measured no better, an
        in-flight above the BDP (max rate x W0) only queues, whatever the model's plan says (a store losing
        throughput past its knee makes the BDP measured there too low, so the move down that capped in-flight
        at it may have failed, and the bisection that followed may have stopped above the knee): drain to the
        BDP, on the readers' grid, above the floor of this regime's checks."""
        if not self.queued or self.ceil is None or plan.in_flight is None or now_k is None:
            return None
        if plan.in_flight < now_k or e.w0 <= 0 or e.latency <= e.w0 or e.in_flight <= e.bdp:
            return None  # the model moves down already, or no queue
        c = math.floor(e.bdp / readers)
        if self.floor is not None:
            c = max(c, self.floor // readers + 1)
        if c < 1 or c >= now_k:
            return None
        why = (
            f"in flight {e.in_flight:.1f} above the BDP {e.bdp:.1f} at latency {e.latency * 1e3:.0f} ms vs W0 "
            f"{e.w0 * 1e3:.0f} ms, a store seen saturated: drained to {c * readers} in flight"
        )
        return dc_replace(plan, in_flight=c, depth=depth_for(c), why=why)

    def bracket(self, plan: Plan, now_k: int | None, readers: int) -> Plan:
        """Keep the plan's in-flight inside what this regime's checks left open: below the ceiling, above the
        floor; a plan past a bound goes half-way (geometrically) from the incumbent towards it, a bisection
        that ends at the store's knee."""
        if plan.in_flight is None or now_k is None:
            return plan
        k_now, k = now_k * readers, plan.in_flight * readers
        c = plan.in_flight
        if k > k_now and self.ceil is not None and k * (1 + BISECT) >= self.ceil:
            # the bracket (incumbent, ceiling) is narrower than BISECT: the search ends; else its geometric middle,
            # on the readers' grid (a total the knobs can set) and strictly inside it
            c = round(math.sqrt(k_now * self.ceil) / readers)
            c = min(c, math.ceil(self.ceil / readers) - 1)
            if self.ceil < k_now * (1 + BISECT) or c * readers <= k_now:
                c = now_k
        elif k < k_now and self.floor is not None and k <= self.floor * (1 + BISECT):
            c = round(math.sqrt(k_now * self.floor) / readers)
            c = max(c, self.floor // readers + 1)
            if k_now < self.floor * (1 + BISECT) or c * readers >= k_now:
                c = now_k
        if c == plan.in_flight:
            return plan
        c = max(1, c)
        why = plan.why + f"; bisected to {c * readers} in flight"
        return dc_replace(plan, in_flight=c, depth=depth_for(c), why=why)

    def bound(self, k_old: int, k_new: int, adopted: bool) -> None:
        """What a verdict on a move from ``k_old`` to ``k_new`` in flight (totals) teaches: a candidate that
        measured no better went too far or not in a useful direction (half-way next, until the bracket is
        narrower than :data:`BISECT`)."""
        if k_new > k_old and not adopted:
            self.ceil = k_new if self.ceil is None else min(self.ceil, k_new)
        elif k_new < k_old and adopted:
            self.ceil = k_old if self.ceil is None else min(self.ceil, k_old)
        elif k_new < k_old and not adopted:
            self.floor = k_new if self.floor is None else max(self.floor, k_new)
        elif k_new > k_old and adopted:
            self.floor = k_old if self.floor is None else max(self.floor, k_old)
