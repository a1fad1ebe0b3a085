"""The capacity model: what each stage of the pipeline can deliver, from windows of measured inputs.

Stages of one rank (see ``README.md``): the training step (``step`` seconds per batch, the loop's own time), the
downloads (``k`` in flight over all readers, each taking ``W`` seconds: ``k / W`` per second, Little's law), the
decoding (``u`` thread-CPU seconds per batch over the workers, or in series with the step without workers). The
loop's period per batch is the slowest of them; the loop waits for the difference.

The store's side follows TCP BBR: the unloaded latency ``W0`` is the lowest window-mean latency seen lately (a
min filter over :data:`FILTER_S`; the histogram's buckets, 10-25-50-100 ms, are too coarse for a percentile), the
delivery rate's max over the same span is what the store delivers; their product is the bandwidth-delay product
(BDP), the in-flight that keeps the store busy without queueing. In-flight beyond it only raises the latency (the
store is saturated: ``W`` well above ``W0`` while the rate stays flat): the plan caps in-flight there and moves
down. A store pushing back (retried requests: 503 SlowDown) is saturated whatever the latency says.

The knobs allow ``k`` downloads at once, but the pipeline does not keep every slot busy while the loop waits: a
reader's depth also holds chunks downloaded and not yet read, a batch waits on one reader while the other's slots
sit full, an epoch's start begins from nothing. The share of the slots busy while the loop waits on downloads,
the **occupancy**, calibrates Little's law: ``k`` slots deliver ``occupancy x k / W0`` (measured at S3 +50 ms with
two workers: 0.38-0.40 at 6, 12 and 18 slots; without it the plan asked for 12 where 32 ran fastest). The slots
it adds beyond Little's law cover a reader's demand running ahead of the mean, on the loop's time scale, not the
store's: they hold at most :data:`SLACK_S` of demand. More costs at every epoch's start, where all of them begin
at once and share the pipe, so the first chunk arrives later (S3 +100 ms, two workers: 28 a worker waited 0.58 s
an epoch in its first five batches, 16 a worker 0.37 s; the occupancy alone, 0.43 at the defaults, asked for 28).
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from streamscope.tune.signals import Window

__all__ = ["FILTER_S", "MARGIN", "OCCUPANCY_MIN", "SATURATED", "SLACK_S", "Estimates", "Model", "Plan", "depth_for"]

#: Seconds the W0 (min latency) and max-rate filters remember (BBR's min-RTT filter is 10 s; windows here are 1 s
#: of aggregated downloads, so a longer span).
FILTER_S = 30.0
#: In flight is planned at demand x W0 times this (room for latency variance and demand peaks).
MARGIN = 1.25
#: Latency above this multiple of W0 with the in-flight above the BDP: the store is saturated.
SATURATED = 1.5
#: The in-flight cap of a saturated store, as a multiple of the BDP (BBR's cwnd gain is 2; ours is a hard cap).
BDP_GAIN = 1.0
#: Share of the wait on downloads (the wait split) above which downloads the histogram does not time are planned.
UNTIMED = 0.5
#: A window counts for the latency filters with at least this many downloads.
MIN_DOWNLOADS = 4
#: The occupancy the plan trusts at least (a lower reading asks for at most 1 / this times Little's in-flight).
OCCUPANCY_MIN = 0.25
#: Seconds of demand the occupancy may add to Little's in-flight at most (16 a worker ran fastest both at S3 +50 ms
#: and +100 ms with two workers: demand x (W0 + 0.08-0.12 s)).
SLACK_S = 0.1


@dataclass
class Estimates:
    """The model's smoothed inputs (what the ``tune`` events carry)."""

    step: float = 0.0  # s per batch, the loop's own time
    wait: float = 0.0  # s per batch waited
    period: float = 0.0  # s per batch
    wait_share: float = 0.0
    latency: float = 0.0  # mean download latency now (s)
    w0: float = 0.0  # unloaded latency (s)
    rate: float = 0.0  # downloads per second now
    max_rate: float = 0.0  # downloads per second, the filter's max
    in_flight: float = 0.0  # downloads under way on average (rate x latency)
    per_batch: float = 0.0  # downloads per batch
    cpu: float = 0.0  # thread-CPU s per batch producing it
    busy: float = 0.0  # wall s per batch producing it (CPU, and what it waits on: a slow transform's I/O)
    cpu_share: float = 1.0
    retries: int = 0
    download_share: float = 0.0  # share of the wait the wait split puts on downloads
    slots: float = 0.0  # downloads the knobs allow at once over all readers (0: unknown)
    start_wait: float = 0.0  # s per batch of the wait at epoch starts (part of ``wait``; signals.START_WAITS)
    # s per batch with the epoch starts' waits taken out; share of the loop's time waiting outside epoch starts (what
    # knobs can shorten). Not given (< 0): no start was set apart, the whole period and wait share (a default of 0
    # would read as a loop that never waits)
    steady_period: float = -1.0
    steady_share: float = -1.0

    def __post_init__(self) -> None:
        if self.steady_period < 0:
            self.steady_period = self.period
        if self.steady_share < 0:
            self.steady_share = self.wait_share

    @property
    def occupancy(self) -> float:
        """Share of the allowed downloads under way on average, where the loop waits on downloads and the store
        shows no queue (else 1: idle slots of a loop that does not wait on downloads say nothing of the
        pipeline, and a saturated store's in-flight is its queue)."""
        if self.slots <= 0 or self.in_flight <= 0 or self.download_share < UNTIMED or self.saturated:
            return 1.0
        return min(1.0, max(OCCUPANCY_MIN, self.in_flight / self.slots))

    @property
    def bdp(self) -> float:
        return self.max_rate * self.w0

    @property
    def saturated(self) -> bool:
        if self.retries > 0:
            return True
        return self.w0 > 0 and self.latency > SATURATED * self.w0 and self.in_flight > BDP_GAIN * self.bdp

    def fields(self) -> dict[str, Any]:
        return {
            "step_ms": round(self.step * 1e3, 3),
            "wait_ms": round(self.wait * 1e3, 3),
            "wait_share": round(self.wait_share, 4),
            "start_wait_ms": round(self.start_wait * 1e3, 3),
            "steady_wait_share": round(self.steady_share, 4),
            "latency_ms": round(self.latency * 1e3, 2),
            "w0_ms": round(self.w0 * 1e3, 2),
            "downloads_per_s": round(self.rate, 2),
            "bdp": round(self.bdp, 2),
            "in_flight": round(self.in_flight, 2),
            "downloads_per_batch": round(self.per_batch, 4),
            "cpu_ms_per_batch": round(self.cpu * 1e3, 3),
            "busy_ms_per_batch": round(self.busy * 1e3, 3),
            "cpu_share": round(self.cpu_share, 3),
            "download_share": round(self.download_share, 3),
            "occupancy": round(self.occupancy, 3),
            "saturated": self.saturated,
        }


@dataclass(frozen=True)
class Plan:
    """What the model asks for: in flight and depth per reader (None: no downloads to plan), workers."""

    in_flight: int | None
    depth: int | None
    workers: int
    bound: str  # step | download | cpu: the stage that limits the loop now
    why: str  # the downloads' sizing
    why_workers: str = ""  # the workers' sizing


@dataclass
class Model:
    """Filters over windows (W0, max rate) and the plan (see the module docstring)."""

    batch_size: int = 1
    _lat: deque[tuple[float, float]] = field(default_factory=deque)  # (t, window-mean latency)
    _rate: deque[tuple[float, float]] = field(default_factory=deque)  # (t, downloads per second)
    _push_until: float = -math.inf  # a pushback holds the old W0 this long

    def reset(self) -> None:
        """A new regime: forget the filters."""
        self._lat.clear()
        self._rate.clear()
        self._push_until = -math.inf

    def observe(self, w: Window, retries: int = 0) -> None:
        now = w.t1
        if retries > 0:
            self._push_until = now + FILTER_S
        if w.downloads >= MIN_DOWNLOADS:
            self._lat.append((now, w.latency))
            self._rate.append((now, w.download_rate))
        if now > self._push_until:  # pushback: the latency samples of the throttled store are not W0
            while self._lat and self._lat[0][0] < now - FILTER_S and len(self._lat) > 1:
                self._lat.popleft()
        while self._rate and self._rate[0][0] < now - FILTER_S and len(self._rate) > 1:
            self._rate.popleft()

    def estimates(self, w: Window, retries: int = 0, workers: int = 0, slots: float = 0.0) -> Estimates:
        """The model's inputs from ``w`` (a few recent windows merged), the filters and the ``slots`` the knobs
        allow (downloads at once over all readers, 0 when unknown). A batch's production time
        (wall): without workers, the loop's wait is it; with workers, a waited-for worker is busy all the time, so
        ``workers x period``; with downloads in the window the wall time holds their waits too, and the CPU time
        alone counts."""
        busy = w.wait_per_batch if workers <= 0 else (workers * w.period if w.batches else 0.0)
        if w.downloads or w.download_wait_share >= UNTIMED:
            busy = 0.0  # the wall time holds the downloads' waits too (their own model): the CPU time alone
        return Estimates(
            step=w.step,
            wait=w.wait_per_batch,
            period=w.period if w.batches else 0.0,
            wait_share=w.wait_share,
            latency=w.latency,
            w0=min((x for _, x in self._lat), default=w.latency),
            rate=w.download_rate,
            max_rate=max((x for _, x in self._rate), default=w.download_rate),
            in_flight=w.in_flight,
            per_batch=w.downloads_per_batch,
            cpu=w.cpu_per_batch,
            busy=max(busy, w.cpu_per_batch),
            cpu_share=w.cpu_share,
            retries=retries,
            download_share=w.download_wait_share,
            slots=slots,
            start_wait=w.start_wait_s / w.batches if w.batches else 0.0,
            steady_period=w.steady_period if w.batches else 0.0,
            steady_share=w.steady_wait_share,
        )

    # --- predictions ------------------------------------------------------------------------------

    @staticmethod
    def cores(e: Estimates, cpus: int) -> float:
        """Cores the workers get: the budget's cores times the share of CPU runnable tasks obtain."""
        return max(1.0, cpus * e.cpu_share)

    def p_workers(self, e: Estimates, workers: int, cpus: int, step: float) -> float:
        """Seconds per batch the producers allow: without workers, the loop produces in series with its step;
        with ``workers``, each takes ``busy`` per batch, and their CPU part shares the cores obtained."""
        if workers <= 0:
            return step + e.busy
        return max(e.busy / workers, e.cpu / min(float(workers), self.cores(e, cpus)))

    def period(self, e: Estimates, in_flight: int | None, readers: int, workers: int, cpus: int) -> float:
        """Predicted seconds per batch with ``in_flight`` downloads per reader and ``workers`` workers."""
        step = max(e.step, 1e-6)
        p_cpu = self.p_workers(e, workers, cpus, step)
        p_dl = 0.0
        if in_flight is not None and e.per_batch > 0 and e.w0 > 0:
            k = max(1, in_flight) * max(1, readers)
            rate = e.occupancy * k / e.w0
            if e.saturated and k > e.bdp * BDP_GAIN:
                rate = min(rate, max(e.max_rate, e.rate))  # a saturated store delivers no more than it did
            p_dl = e.per_batch / rate if rate > 0 else math.inf
        return max(step, p_cpu, p_dl)

    @staticmethod
    def ceiling(e: Estimates, readers: int) -> int | None:
        """The most in flight per reader worth having: Little's law with its margin plus :data:`SLACK_S` of
        demand (None: no timed downloads to size). Beyond it every epoch's start waits longer for its first chunk
        than a steady window can win back; neither the occupancy nor a probe asks for more."""
        if e.per_batch <= 0 or e.w0 <= 0:
            return None
        return max(1, math.ceil(round(Model._most_total(e) / max(1, readers), 6)))  # 15.000001: 15

    @staticmethod
    def _most_total(e: Estimates) -> float:
        """In flight over all readers that Little's law with its margin plus :data:`SLACK_S` of demand allows."""
        demand = e.per_batch / max(e.step, 1e-4)  # downloads per second that keep up with the step
        return demand * (e.w0 * MARGIN + SLACK_S)

    # --- the plan ---------------------------------------------------------------------------------

    def plan(self, e: Estimates, readers: int, workers: int, cpus: int, in_flight_now: int | None) -> Plan:
        """The configuration the model asks for (the caller caps it by bounds, pins and budgets)."""
        step = max(e.step, 1e-4)
        readers = max(1, readers)
        p_cpu = self.p_workers(e, workers, cpus, step)
        p_dl = max(0.0, e.steady_period - max(step, p_cpu)) if e.per_batch > 0 else 0.0
        bound = "cpu" if p_cpu > step * 1.02 and p_cpu >= p_dl else ("download" if p_dl > 0.02 * step else "step")
        # workers: the fewest whose production keeps up with the step (the CPU part within the cores obtained;
        # beyond them only the part that is not CPU gains); never fewer than now (not tried: a cut saves resources
        # the budgets already allow, and its check could only show a loss)
        want_w = workers
        if e.busy > 0:
            target = step / 1.15
            want_w = max(workers, 1)
            while want_w < 64 and self.p_workers(e, want_w, cpus, step) > target:
                if self.p_workers(e, want_w + 1, cpus, step) > 0.97 * self.p_workers(e, want_w, cpus, step):
                    break  # one more worker gains under 3%: the cores are used up
                want_w += 1
        why_w = (
            f"a batch takes {e.busy * 1e3:.2f} ms to produce ({e.cpu * 1e3:.2f} ms of it CPU) against a "
            f"{step * 1e3:.2f} ms step, on {self.cores(e, cpus):.1f} cores obtained (CPU share {e.cpu_share:.0%})"
        )
        # downloads: Little's law on the unloaded latency, capped at the BDP when the store is saturated
        if e.per_batch <= 0 or e.w0 <= 0:
            if e.download_share >= UNTIMED and bound != "cpu":
                # the wait split puts the wait on downloads the download histogram does not time (raw-file GETs
                # of another layer): no latency for Little's law; the look-ahead doubles, the check decides
                why = f"{e.download_share:.0%} of the wait downloading, untimed: twice the look-ahead"
                return Plan(None, None, want_w, "untimed", why, why_w)
            return Plan(None, None, want_w, bound, "no downloads to plan", why_w)
        demand = e.per_batch / step  # downloads per second that keep up with the step
        occ = e.occupancy
        need_total = demand * e.w0 * MARGIN / occ
        why = f"demand {demand:.1f}/s x W0 {e.w0 * 1e3:.0f} ms x {MARGIN:g}"
        if occ < 1.0:
            why += f" / occupancy {occ:.2f} ({e.in_flight:.1f} of {e.slots:g} allowed under way)"
            slack = self._most_total(e)
            if need_total > slack:
                need_total = slack
                why += f", at most {SLACK_S * 1e3:.0f} ms of demand beyond it"
        if e.saturated:
            cap = max(1.0, e.bdp * BDP_GAIN)
            if e.retries > 0 and in_flight_now is not None:
                cap = min(cap, max(1.0, 0.7 * in_flight_now * readers))  # pushback: back off as TCP does on loss
            if need_total > cap:
                need_total = cap
            why += (
                f"; store saturated (latency {e.latency * 1e3:.0f} ms vs W0 {e.w0 * 1e3:.0f} ms"
                + (f", {e.retries} retries" if e.retries else "")
                + f"): capped at BDP {e.bdp:.1f} x {BDP_GAIN:g}"
            )
        c = max(1, math.ceil(need_total / readers))
        return Plan(c, depth_for(c), want_w, bound, why, why_w)


def depth_for(in_flight: int) -> int:
    """Prefetch depth for ``in_flight`` downloads at once: those plus room for latency variance (half as many
    again, at least two), so a slow download does not stall the reader while the others wait behind it."""
    return in_flight + max(2, math.ceil(0.5 * in_flight))
