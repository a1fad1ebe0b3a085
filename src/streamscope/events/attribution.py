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
  see is never one this epoch's workers counted.
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

import multiprocessing
import os
import threading
import time
import weakref
from contextlib import nullcontext
from typing import Any, Literal

import numpy as np

from streamscope.events import context
from streamscope.events.bus import CompleteSpan, Span
from streamscope.events.instruments import add_key
from streamscope.events.registry import STAGES, M

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


#: Stage codes in priority order (a lower code wins when two are active at once); IDLE is never on a clock.
DOWNLOAD, DECOMPRESS, READ, DECODE, IDLE = 0, 1, 2, 3, 4
#: Span categories that move a worker's clock, and to which stage.
CATEGORY_STAGES: dict[str, int] = {"download": DOWNLOAD, "decompress": DECOMPRESS, "read": READ}
#: Categories whose spans report to the clock now: empty unless this process attributes (mutated in place).
STAGED: set[str] = set()
#: The counter keys of the stages, by stage code.
KEYS: tuple[str, ...] = tuple(f"{M.LOADER_WAIT_STAGE.name}|stage={s}" for s in STAGES)

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


# -- the ring --------------------------------------------------------------------------------------------------

_COUNT, _OPEN, _GEN, _FIRST, _WORKERS = 0, 1, 2, 3, 4
_ENDS, _NENDS = 8, 8  # (generation, end) of the last _NENDS generations, at generation % _NENDS
_HEAD = _ENDS + 2 * _NENDS
assert _OPEN == 1 and _COUNT == 0 and _HEAD == 24  # WaitRing.begin / end spell them out
# a tail slot: state (0 free, 1 written), generation, first wait not settled, lo, stop, segments, workers,
# then the segments' starts, ends and stages
_T_STATE, _T_GEN, _T_NEXT, _T_LO, _T_STOP, _T_N, _T_WORKERS = 0, 1, 2, 3, 4, 5, 6
_T_HEAD = 8


class WaitRing:
    """The training loop's waits, in shared memory: written by the loop's process, read by its workers.

    Layout (int64): a header (``count`` of waits so far, ``open_since`` of the wait in progress or 0, the
    generation now, its first wait, its workers, the ends of the last generations), the last :attr:`SIZE` waits
    as (begin, end) pairs, then for each worker a claim (the last generation it took a share of, or minus the
    generation the loader's process settled for it) and two tail slots (see module doc). Created by the loader
    before its workers start (inherited by fork, pickled for spawn with the dataset's batch mode); the process
    that creates it settles the tails (:meth:`new_iteration`, :meth:`close_iteration`, and at each of its
    flushes).
    """

    SIZE = 4096  # (spelled out in end())
    #: Segments a tail holds (the most recent).
    CAP = 128
    _SLOT = _T_HEAD + 3 * CAP

    def __init__(self, workers: int = 1, context: Any = None, array: Any = None, lock: Any = None) -> None:
        self.workers = max(1, int(workers))
        # the lock goes to the workers as they start: made in their start method's context (a lock of the fork
        # context cannot go to a spawned process)
        ctx = context if context is not None else multiprocessing.get_context()
        self.start_method = ctx.get_start_method()
        self._waits = _HEAD
        self._claims = _HEAD + 2 * self.SIZE
        self._tails = self._claims + self.workers
        size = self._tails + 2 * self.workers * self._SLOT
        self.array = multiprocessing.RawArray("q", size) if array is None else array
        self.lock = ctx.Lock() if lock is None else lock
        self._np = np.frombuffer(self.array, dtype=np.int64, count=size)
        # the loop's stores (begin / end) go through a memoryview: about half the cost of ctypes item access
        self._mv = memoryview(self.array).cast("B").cast("q")
        self.owner: _Owner | None = None
        if array is None:  # the creating process settles the tails
            self.owner = _Owner(self, os.getpid())
            _OWNERS.append(weakref.ref(self))

    def __reduce__(self) -> tuple[Any, ...]:
        return (WaitRing, (self.workers, None, self.array, self.lock))

    # --- the loop (five stores per wait) ---

    # (literal offsets below: _OPEN is 1, _COUNT 0, the waits begin at _HEAD, 24)

    def begin(self, t0: int) -> None:
        """The loop blocks for a batch; its wait began at ``t0`` (CLOCK_MONOTONIC ns)."""
        self._mv[1] = t0

    def end(self, t0: int, t1: int) -> None:
        """The batch arrived: the wait ``[t0, t1]`` is complete. (The count moves before the open wait is
        cleared: a reader between the two sees the complete wait still open, which only keeps more of its
        segments; the other order would show it neither counted nor open, and a fold then could drop segments
        of a long wait as too old.)"""
        a = self._mv
        k = a[0]
        i = 24 + 2 * (k % 4096)
        a[i] = t0
        a[i + 1] = t1
        a[0] = k + 1
        a[1] = 0

    # --- the loader's iterations (its process) ---

    def new_iteration(self, workers: int) -> int:
        """A new iteration of the loader with ``workers`` workers begins (before any of them starts): the
        previous one ends here if it did not yet. Returns its generation."""
        with _LOCK:
            a = self.array
            g: int = a[_GEN]
            if g > 0:
                self._close(g)
            a[_FIRST] = a[_COUNT]
            a[_WORKERS] = workers
            a[_GEN] = g + 1  # last: a worker that reads the generation reads its first wait
            self._settle()
            return g + 1

    def close_iteration(self, gen: int) -> None:
        """Iteration ``gen`` ended (its loop waits no more): settle what its workers left to this process."""
        with _LOCK:
            if self.array[_GEN] == gen:
                self._close(gen)
            self._settle()

    def _close(self, g: int) -> None:
        if self.end_of(g) is not None:
            return
        a = self.array
        j = _ENDS + 2 * (g % _NENDS)
        a[j + 1] = a[_COUNT]
        a[j] = g
        owner = self.owner
        if owner is not None and owner.pid == os.getpid():
            owner.fill(g, int(a[_FIRST]), int(a[_WORKERS]))

    def _settle(self) -> None:
        owner = self.owner
        if owner is not None and owner.pid == os.getpid():
            owner.settle()

    # --- reading ---

    def generation(self) -> tuple[int, int, int]:
        """(generation now, its first wait, its workers)."""
        a = self.array
        g = int(a[_GEN])  # written last by new_iteration
        return g, int(a[_FIRST]), int(a[_WORKERS])

    def head(self) -> tuple[int, int]:
        """(count of complete waits, begin of the wait in progress or 0), read consistently. Just as a wait
        completes, its begin may still show as open (see :meth:`end`): never earlier than a wait not counted."""
        a = self.array
        while True:
            k = a[_COUNT]
            x = a[_OPEN]
            if a[_COUNT] == k:
                return int(k), int(x)

    def end_of(self, gen: int) -> int | None:
        """The count where generation ``gen`` ended, None while it goes on (or when forgotten: see
        :meth:`forgotten`)."""
        a = self.array
        j = _ENDS + 2 * (gen % _NENDS)
        if a[j] == gen:
            return int(a[j + 1])
        return None

    def forgotten(self, gen: int) -> bool:
        """True when generation ``gen`` ended so long ago that its end is no longer kept."""
        return self.end_of(gen) is None and int(self.array[_GEN]) - gen >= _NENDS

    def waits(self, first: int, upto: int) -> tuple[np.ndarray, np.ndarray]:
        """Begins and ends of the complete waits ``first`` to ``upto - 1`` (those still in the ring)."""
        first = max(first, upto - self.SIZE)
        if upto <= first:
            return _EMPTY, _EMPTY
        idx = np.arange(first, upto) % self.SIZE
        pairs = self._np[_HEAD : _HEAD + 2 * self.SIZE].reshape(-1, 2)[idx]
        return pairs[:, 0].copy(), pairs[:, 1].copy()

    def end_time(self, i: int) -> int:
        """The end of wait ``i`` (0 when there is none or it left the ring): no later wait begins before it."""
        k = int(self.array[_COUNT])
        if i < 0 or i >= k or i < k - self.SIZE:
            return 0
        return int(self.array[_HEAD + 2 * (i % self.SIZE) + 1])

    # --- claims and tails ---

    def claim(self, worker: int, gen: int) -> bool:
        """Worker ``worker`` takes its share of generation ``gen``: False when its share of it was already taken,
        by another share of that worker or by the loader's process (a worker that never started)."""
        if not 0 <= worker < self.workers:
            return False
        if not self.lock.acquire(timeout=5.0):
            return False
        try:
            c = self._claims + worker
            if abs(int(self.array[c])) >= gen:
                return False
            self.array[c] = gen
            return True
        finally:
            self.lock.release()

    def put_tail(self, worker: int, gen: int, first: int, lo: int, stop: int, workers: int, segs: Any) -> bool:
        """Leave a worker's tail (see module doc); False when its slot is still taken (the tail is lost)."""
        if not 0 <= worker < self.workers:
            return False
        s0, s1, st = segs
        n = min(len(s0), self.CAP)
        base = self._tails + (2 * worker + (gen & 1)) * self._SLOT
        a, v = self.array, self._np
        if a[base + _T_STATE] != 0:
            return False
        v[base + _T_HEAD : base + _T_HEAD + n] = s0[len(s0) - n :]
        v[base + _T_HEAD + self.CAP : base + _T_HEAD + self.CAP + n] = s1[len(s1) - n :]
        v[base + _T_HEAD + 2 * self.CAP : base + _T_HEAD + 2 * self.CAP + n] = st[len(st) - n :]
        a[base + _T_GEN] = gen
        a[base + _T_NEXT] = first
        a[base + _T_LO] = lo
        a[base + _T_STOP] = stop
        a[base + _T_N] = n
        a[base + _T_WORKERS] = workers
        a[base + _T_STATE] = 1  # last: the reader sees a whole tail
        return True

    def take_tails(self) -> list[_Tail]:
        """The tails written since the last call (their slots freed)."""
        out = []
        a, v, cap = self.array, self._np, self.CAP
        for slot in range(2 * self.workers):
            base = self._tails + slot * self._SLOT
            if a[base + _T_STATE] != 1:
                continue
            n = int(a[base + _T_N])
            h = base + _T_HEAD
            segs = (v[h : h + n].copy(), v[h + cap : h + cap + n].copy(), v[h + 2 * cap : h + 2 * cap + n].copy())
            out.append(_Tail(int(a[base + _T_GEN]), int(a[base + _T_NEXT]), int(a[base + _T_WORKERS]), segs))
            a[base + _T_STATE] = 0
        return out


class _Tail:
    """What a share left for the loader's process to settle: its generation, the first wait it did not settle,
    its workers, and its last segments (it has no later ones)."""

    __slots__ = ("gen", "next", "workers", "segs")

    def __init__(self, gen: int, first: int, workers: int, segs: tuple[np.ndarray, np.ndarray, np.ndarray]) -> None:
        self.gen, self.next, self.workers, self.segs = gen, first, max(1, workers), segs


class _Owner:
    """The creating process's side of a ring: the tails (and never-started shares) it settles."""

    def __init__(self, ring: WaitRing, pid: int) -> None:
        self.ring = weakref.proxy(ring)
        self.pid = pid
        self.pending: list[_Tail] = []
        self.add = add_key

    def fill(self, gen: int, first: int, workers: int) -> None:
        """Generation ``gen`` ends: the workers that never took their share of it get it settled here, all idle."""
        if workers <= 0:
            return
        ring = self.ring
        if not ring.lock.acquire(timeout=5.0):
            return  # a worker died holding it: those shares are not counted
        try:
            for w in range(min(workers, ring.workers)):
                c = ring._claims + w
                if abs(int(ring.array[c])) < gen:
                    ring.array[c] = -gen
                    self.pending.append(_Tail(gen, first, workers, (_EMPTY, _EMPTY, _EMPTY)))
        finally:
            ring.lock.release()

    def settle(self) -> None:
        """Settle the complete waits the pending tails cover."""
        ring = self.ring
        self.pending.extend(ring.take_tails())
        if not self.pending:
            return
        k, _ = ring.head()
        keep = []
        for t in self.pending:
            end = ring.end_of(t.gen)
            if end is None and ring.forgotten(t.gen):
                continue
            upto = k if end is None else min(k, end)
            if upto > t.next:
                w0, w1 = ring.waits(t.next, upto)
                _add(self.add, _split(w0, w1, *t.segs), 1.0 / t.workers)
                t.next = upto
            if end is None or t.next < end:
                keep.append(t)
        self.pending = keep


# -- settling --------------------------------------------------------------------------------------------------


def _covered(a0: np.ndarray, a1: np.ndarray, b0: np.ndarray, b1: np.ndarray) -> np.ndarray:
    """For each interval ``[a0[i], a1[i]]``: how much of it the union of the disjoint, sorted intervals
    ``[b0, b1]`` covers (ns, int64)."""
    if not len(a0) or not len(b0):
        return np.zeros(len(a0), np.int64)
    lens = b1 - b0
    cum = np.concatenate(([0], np.cumsum(lens)))

    def measure(t: np.ndarray) -> np.ndarray:  # |B ∩ (-inf, t]|
        i = np.searchsorted(b0, t, side="right") - 1
        inside = np.clip(t - b0[np.maximum(i, 0)], 0, lens[np.maximum(i, 0)])
        return np.where(i >= 0, cum[np.maximum(i, 0)] + inside, 0)

    covered: np.ndarray = measure(a1) - measure(a0)
    return covered


def _split(w0: np.ndarray, w1: np.ndarray, s0: np.ndarray, s1: np.ndarray, st: np.ndarray) -> np.ndarray:
    """Per stage code (idle last), the ns of the waits ``[w0, w1]`` covered by the exclusive segments
    ``[s0, s1]`` of that stage; idle: the rest of the waits."""
    parts = np.zeros(5, np.int64)
    if not len(w0):
        return parts
    for stage in (DOWNLOAD, DECOMPRESS, READ, DECODE):
        m = st == stage
        if m.any():
            parts[stage] = int(_covered(w0, w1, s0[m], s1[m]).sum())
    parts[IDLE] = int((w1 - w0).sum()) - int(parts[:4].sum())
    return parts


def _add(add: Any, parts: np.ndarray, share: float) -> None:
    for stage, ns in enumerate(parts.tolist()):
        if ns > 0:
            add(KEYS[stage], ns * share / 1e9)


class Attributor:
    """One share of the wait split (see module doc): a worker's share of one generation of a ring, or the loop's
    own process (``workers`` 0) attributing its own waits.

    Args:
        ring: the loop's waits.
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

    def __init__(self, ring: WaitRing, workers: int, add: Any, start: int, worker: int = -1) -> None:
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
            if not self.own_loop:
                ring.put_tail(self.worker, self.gen, self.next, lo, now, self.workers, seg)
            return
        self.seg = seg


# -- this process ----------------------------------------------------------------------------------------------

#: This process's clock, its shares, and the rings it created (whose tails it settles).
CLOCK = StageClock()
SHARES: list[Attributor] = []
_OWNERS: list[weakref.ref[WaitRing]] = []
_LOCK = threading.RLock()


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
    if _OWNERS:
        alive = []
        for ref in _OWNERS:
            ring = ref()
            if ring is not None and ring.owner is not None and ring.owner.pid == os.getpid():
                ring.owner.settle()
                alive.append(ref)
        _OWNERS[:] = alive
    return now


def start(ring: WaitRing, workers: int, add: Any = add_key) -> Attributor:
    """Take a share of the wait split from now on in this process (see :class:`Attributor`): staged spans report
    to :data:`CLOCK`. A worker's share is of the ring's generation now; a second share of one worker in the same
    generation counts nothing (the first one's share is the worker's)."""
    with _LOCK:
        now = _fold_locked()
        worker = -1
        if workers > 0:
            worker = int(context.env_fields()["worker_rank"])
        att = Attributor(ring, workers, add, now, worker)
        if workers > 0 and not ring.claim(worker, att.gen):
            att.done = True
        SHARES.append(att)
        STAGED.update(CATEGORY_STAGES)
        return att


def stop(att: Attributor | None = None) -> None:
    """End a share (default: the last one started): fold it one last time (what it cannot settle yet becomes a
    tail for the loader's process) and forget it."""
    with _LOCK:
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
    if SHARES or _OWNERS:
        with _LOCK:
            _fold_locked()


def after_fork_in_child() -> None:
    """A forked child attributes nothing of its parent's (it starts its own share if its loader asks) and
    settles no tail of its parent's rings."""
    global CLOCK, SHARES, _OWNERS, _LOCK
    CLOCK, SHARES, _OWNERS, _LOCK = StageClock(), [], [], threading.RLock()
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
