"""The wait split, live: what the workers were doing while the training loop waited for data.

The stall report of ``streamscope-trace summary`` splits the loop's wait among download, decompress, read, decode
and idle from a trace, after the run. This module gives the same split as a metric while the run goes on
(:data:`~streamscope.events.registry.M.LOADER_WAIT_STAGE`, a counter per stage), with no trace written and nothing
on the loop's path but a few stores per wait.

**The rule.** Each wait of the loop is split among the loader's workers, ``1/num_workers`` each. A worker's share
of a wait goes to the stage its activity showed during the wait (download, then decompress, read, decode, by
priority: its segments never overlap) and to ``idle`` for the rest: before its share of the epoch began (a
worker still starting), when it did nothing, and after its share ended (its batches done). So the five stages
sum to the wait, wait by wait. Every (wait, worker) pair is *settled* once, when the wait is complete and every
segment of the worker that can meet it is known, and its seconds are added to counters then: a counter never
goes back, and no part of the split is computed by subtraction in the main process. With ``num_workers=0`` the
loop's own process is the worker: its wait is its own decoding, but for its download / decompress / read spans
inside it (no idle).

How:

* **The loop's waits.** The loader's process writes every wait of its loop into a ring in shared memory
  (:class:`WaitRing`): the wait's begin before it blocks in ``next()``, the whole interval when the batch
  arrives (five stores per wait). Each iteration of the loader (an epoch) is a *generation* of the ring: it
  begins at the ring's count when ``iter()`` is called (before any worker of it starts) and ends when the
  iteration does. A worker's share covers the waits of its generation only, so a wait the next epoch's workers
  see is never one this epoch's workers counted. With ``num_workers=0`` and no tuner nobody else reads the waits:
  the loop's own share takes them from its ``batch``/``stall`` timeline as the recorder takes it
  (:mod:`.loop_waits`), and the loop stores nothing per wait.
* **What a worker does.** Each worker keeps a clock of its own activity (:class:`StageClock`): the spans of the
  ``download``, ``decompress`` and ``read`` categories, in any of its threads, its wait for a chunk another
  process is downloading (:func:`stage`), and its batch production (the time inside its batch generator,
  reported as ``decode``) move the clock between stages, its segments are exclusive.
* **Settling, in the worker.** At each flush (its flusher's tick, and when its share ends) the worker reads the
  ring, then takes its clock's segments up to now (in that order: every wait it reads complete ended before
  now, so all its segments that meet the wait are in hand), and settles each wait of its generation that is
  complete and not settled yet: overlap with its segments per stage, the rest of ``wait / num_workers`` idle.
* **Settling what comes after a share ends, in the loop's process.** A worker whose share ends while its
  generation goes on (its last batch sent, the loop still waiting for the others') leaves a *tail* in the ring:
  where it stopped, the first wait it did not settle, and its last segments (all it did from the first moment
  an unsettled wait can begin). The loader's process settles the waits of that generation from there on, with
  those segments, at each of its flushes and when the iteration ends. A worker that never starts its share of
  a generation (a spawned worker with no batch, told to stop before it began) is settled there too, all idle:
  a lock in the ring makes either the worker or the loader's process claim that share, never both.

It differs from the stall report in one way: the report counts a moment as downloading when *any* worker
downloads; here each worker counts for its share of the workers (one of two workers downloading for the whole
wait: half download, half whatever the other did). The dominant stage is the same in both when one stage
dominates. The split runs when metrics are switched on (``enable_metrics``, ``STREAMSCOPE_METRICS_LEVEL``) with
the ``stall`` category, not for a trace alone: the stall report covers that case from the log.

Limits, all on the side of counting less (never twice): a worker killed outright loses what it had not
published; a tail holds at most :attr:`WaitRing.CAP` segments and segments older than :attr:`Attributor.MARGIN_NS`
before the waits they may meet (then that time counts as idle, the sum still exact); waits older than the ring's
:attr:`WaitRing.SIZE` when settled are skipped; workers started before metrics were switched on record nothing.
"""

from __future__ import annotations

import threading
import time
from contextlib import nullcontext
from typing import Any, Literal

import numpy as np

from streamscope.events import context
from streamscope.events.bus import CompleteSpan, Span
from streamscope.events.instruments import add_key
from streamscope.events.stages import CATEGORY_STAGES, DECODE, DECOMPRESS, DOWNLOAD, IDLE, READ, STAGED
from streamscope.recording import waits
from streamscope.recording.loop_waits import TimelineWaits
from streamscope.recording.waits import WaitRing
from streamscope.recording.waits import split as _split
from streamscope.recording.waits import split_to as _add

__all__ = [
    "Attributor",
    "CATEGORY_STAGES",
    "CLOCK",
    "DECODE",
    "DECOMPRESS",
    "DOWNLOAD",
    "IDLE",
    "READ",
    "STAGED",
    "StageClock",
    "StagedCompleteSpan",
    "StagedSpan",
    "WaitRing",
    "after_fork_in_child",
    "fold",
    "stage",
    "staged_span",
    "start",
    "stop",
]


# The stage codes, CATEGORY_STAGES and STAGED are the event API's (streamscope.events.stages: its span() reads
# STAGED); the ring and the settling arithmetic are .waits'.

_mono = time.monotonic_ns
_EMPTY = np.empty(0, np.int64)


class StageClock:
    """This process's activity as exclusive segments, each labelled with the stage of highest priority active
    in any of its threads then (see module doc). Thread-safe; a few hundred ns per change. The time of a change
    is read under the lock, so segments follow each other in time and a :meth:`take` cuts between them."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.active = [0, 0, 0, 0]
        self.top = -1  # the stage shown now (-1: none)
        self.since = 0
        self.starts: list[int] = []
        self.ends: list[int] = []
        self.stages: list[int] = []

    def enter(self, stage: int) -> None:
        with self.lock:
            self.active[stage] += 1
            self._show(_mono())

    def exit(self, stage: int) -> None:
        with self.lock:
            if self.active[stage] > 0:
                self.active[stage] -= 1
            self._show(_mono())

    def _show(self, t: int) -> None:
        a = self.active
        top = 0 if a[0] else 1 if a[1] else 2 if a[2] else 3 if a[3] else -1
        if top != self.top:
            if self.top >= 0 and t > self.since:
                self.starts.append(self.since)
                self.ends.append(t)
                self.stages.append(self.top)
            self.top, self.since = top, t

    def take(self) -> tuple[int, tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """(now, segments): the segments closed since the last take and the one in progress cut at now (it goes
        on from there), as (starts, ends, stages) int64 arrays in time order. Every later segment begins at or
        after now."""
        with self.lock:
            now = _mono()
            if self.top >= 0 and now > self.since:
                self.starts.append(self.since)
                self.ends.append(now)
                self.stages.append(self.top)
                self.since = now
            out = (np.array(self.starts, np.int64), np.array(self.ends, np.int64), np.array(self.stages, np.int64))
            self.starts, self.ends, self.stages = [], [], []
        return now, out


class Attributor:
    """One share of the wait split (see module doc): a worker's share of one generation of a ring, or the loop's
    own process (``workers`` 0) attributing its own waits.

    Args:
        ring: the loop's waits (a ring in shared memory, or for the loop's own process its timeline's waits,
            :class:`~.loop_waits.TimelineWaits`).
        workers: the loader's num_workers (each worker counts for ``1/workers`` of each wait); 0: this process
            runs the loop itself.
        add: ``add(key, seconds)`` adds to a counter of this process.
        start: when the share began (CLOCK_MONOTONIC ns): its segments count from there.
        worker: this worker's id (its tail slot and claim); -1 for the loop's own process.
    """

    #: A wait is in the ring at most this long after it began (the loop stores its begin right after the
    #: boundary it begins at): segments that ended longer ago than that before now, and before any open wait,
    #: meet no wait not settled yet.
    MARGIN_NS = 1_000_000_000

    def __init__(self, ring: WaitRing | TimelineWaits, workers: int, add: Any, start: int, worker: int = -1) -> None:
        self.ring = ring
        self.own_loop = workers <= 0
        self.workers = max(1, workers)
        self.add = add
        self.worker = worker
        self.gen, self.next, _ = ring.generation()
        self.t_start = start
        self.seg = (_EMPTY, _EMPTY, _EMPTY)
        self.done = False

    def fold(
        self, now: int, new: tuple[np.ndarray, np.ndarray, np.ndarray], head: tuple[int, int], final: bool
    ) -> None:
        """Settle the waits of this share's generation complete at ``head`` (read before ``now`` unless
        ``final``) with its segments up to ``now`` (``new``: those since the last fold).

        ``final``: the share ends at ``now`` (it has no later segments; ``head`` read after ``now``): what it
        cannot settle yet becomes a tail for the loader's process.
        """
        if self.done:
            return
        ring = self.ring
        s0, s1, st = new
        if len(s0) and s0[0] < self.t_start:  # segments before the share began are not its own
            m = s1 > self.t_start
            s0, s1, st = np.maximum(s0[m], self.t_start), s1[m], st[m]
        seg = self.seg
        if len(s0):
            seg = (np.concatenate((seg[0], s0)), np.concatenate((seg[1], s1)), np.concatenate((seg[2], st)))
        k, x = head
        end = ring.end_of(self.gen)
        if end is None and ring.forgotten(self.gen):
            self.done, self.seg = True, (_EMPTY, _EMPTY, _EMPTY)
            return
        upto = k if end is None else min(k, end)
        if upto > self.next:
            w0, w1 = ring.waits(self.next, upto)
            parts = _split(w0, w1, *seg)
            if self.own_loop:  # the loop's own process: its wait is its decoding, but for its spans
                parts[DECODE] += parts[IDLE]
                parts[IDLE] = 0
            _add(self.add, parts, 1.0 if self.own_loop else 1.0 / self.workers)
            self.next = upto
        if end is not None and self.next >= end:
            self.done, self.seg = True, (_EMPTY, _EMPTY, _EMPTY)
            return
        # no wait not settled yet begins before the open one, nor before the end of the last one settled
        lo = x if x else max(self.t_start, ring.end_time(self.next - 1), now - self.MARGIN_NS)
        keep = seg[1] > lo
        seg = (seg[0][keep], seg[1][keep], seg[2][keep])
        if final:
            self.done, self.seg = True, (_EMPTY, _EMPTY, _EMPTY)
            if not self.own_loop and isinstance(ring, WaitRing):
                ring.put_tail(self.worker, self.gen, self.next, lo, now, self.workers, seg)
            return
        self.seg = seg


# -- this process ----------------------------------------------------------------------------------------------

#: This process's clock and its shares (the rings it created, whose tails it settles, are waits.OWNERS).
CLOCK = StageClock()
SHARES: list[Attributor] = []


def _fold_locked(final: Attributor | None = None) -> int:
    """Fold every share of this process (``final`` one last time), then settle the tails of its rings. Returns
    the time the clock was read (or now)."""
    if SHARES:
        heads = [a.ring.head() for a in SHARES]  # before the clock: complete waits ended before now
        now, segs = CLOCK.take()
        for att, head in zip(list(SHARES), heads):
            if att is final:
                att.fold(now, segs, att.ring.head(), final=True)  # after the clock: it has no later segment
            else:
                att.fold(now, segs, head, final=False)
    else:
        now, _ = CLOCK.take()  # nobody's: dropped
    SHARES[:] = [a for a in SHARES if not a.done or a is final]  # a share done settles nothing more
    waits.settle_owned()
    return now


def start(ring: WaitRing | TimelineWaits, workers: int, add: Any = add_key) -> Attributor:
    """Take a share of the wait split from now on in this process (see :class:`Attributor`): staged spans report
    to :data:`CLOCK`. A worker's share is of the ring's generation now; a second share of one worker in the same
    generation counts nothing (the first one's share is the worker's)."""
    with waits.LOCK:
        now = _fold_locked()
        worker = -1
        if workers > 0:
            worker = int(context.env_fields()["worker_rank"])
        att = Attributor(ring, workers, add, now, worker)
        if workers > 0 and not (isinstance(ring, WaitRing) and ring.claim(worker, att.gen)):
            att.done = True
        SHARES.append(att)
        STAGED.update(CATEGORY_STAGES)
        return att


def stop(att: Attributor | None = None) -> None:
    """End a share (default: the last one started): fold it one last time (what it cannot settle yet becomes a
    tail for the loader's process) and forget it."""
    with waits.LOCK:
        if att is None:
            if not SHARES:
                return
            att = SHARES[-1]
        if att not in SHARES:
            return
        _fold_locked(final=att)
        SHARES.remove(att)
        if not SHARES:
            STAGED.clear()


def fold() -> None:
    """Fold now (the recorder calls this at every flush): this process's shares, and the tails of its rings."""
    if SHARES or waits.OWNERS:
        with waits.LOCK:
            _fold_locked()


def after_fork_in_child() -> None:
    """A forked child attributes nothing of its parent's (it starts its own share if its loader asks) and
    settles no tail of its parent's rings."""
    global CLOCK, SHARES
    CLOCK, SHARES = StageClock(), []
    waits.after_fork_in_child()
    STAGED.clear()


class StagedSpan(Span):
    """A ``B``/``E`` span that also moves this process's :data:`CLOCK` (see :func:`staged_span`)."""

    __slots__ = ("stage", "clock")
    stage: int
    clock: StageClock

    def __enter__(self) -> dict[str, Any]:
        self.clock = CLOCK
        self.clock.enter(self.stage)
        return Span.__enter__(self)

    def __exit__(self, et: Any, exc: Any, tb: Any) -> Literal[False]:
        try:
            return Span.__exit__(self, et, exc, tb)
        finally:
            self.clock.exit(self.stage)


class StagedCompleteSpan(CompleteSpan):
    """A complete (``X``) span that also moves this process's :data:`CLOCK`."""

    __slots__ = ("stage", "clock")
    stage: int
    clock: StageClock

    def __enter__(self) -> dict[str, Any]:
        self.clock = CLOCK
        self.clock.enter(self.stage)
        return CompleteSpan.__enter__(self)

    def __exit__(self, et: Any, exc: Any, tb: Any) -> Literal[False]:
        try:
            return CompleteSpan.__exit__(self, et, exc, tb)
        finally:
            self.clock.exit(self.stage)


class _Stage:
    """The context manager :func:`stage` returns while this process attributes."""

    __slots__ = ("code", "clock")

    def __init__(self, code: int) -> None:
        self.code = code
        self.clock = CLOCK

    def __enter__(self) -> None:
        self.clock.enter(self.code)

    def __exit__(self, *exc: Any) -> None:
        self.clock.exit(self.code)


_NO_STAGE = nullcontext()


def stage(code: int) -> Any:
    """A ``with`` block this process spends in stage ``code`` without a span of the stage's category, e.g. waiting
    for a chunk another process downloads (:data:`DOWNLOAD`). Nothing unless this process attributes."""
    return _Stage(code) if STAGED else _NO_STAGE


def staged_span(name: str, cat: str, fields: dict[str, Any], compact: bool) -> Span | CompleteSpan:
    """The span of a staged category (``cat`` in :data:`STAGED`)."""
    sp: StagedSpan | StagedCompleteSpan = (
        StagedCompleteSpan(name, cat, fields) if compact else StagedSpan(name, cat, fields)
    )
    sp.stage = CATEGORY_STAGES[cat]
    return sp
