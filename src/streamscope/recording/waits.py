"""The training loop's waits in shared memory, and the arithmetic that settles them (the wait split's ring).

:class:`WaitRing` holds the loop's waits (written by the loader's process, five stores per wait) and, per worker,
a claim and the tails a share leaves when it ends while its generation goes on; :func:`split` is the rule that
turns waits and a worker's stage segments into seconds per stage. The shares that read the ring, the stage clock
and the staged spans are :mod:`.attribution`'s, which documents the whole method.
"""

from __future__ import annotations

import functools
import multiprocessing
import os
import threading
import weakref
from typing import Any

import numpy as np

from streamscope.events.instruments import add_key
from streamscope.events.registry import STAGES, M
from streamscope.events.stages import DECODE, DECOMPRESS, DOWNLOAD, IDLE, READ

__all__ = ["KEYS", "LOCK", "OWNERS", "WaitRing", "after_fork_in_child", "settle_owned", "split", "split_to"]

#: The counter keys of the stages, by stage code.
KEYS: tuple[str, ...] = tuple(f"{M.LOADER_WAIT_STAGE.name}|stage={s}" for s in STAGES)

_EMPTY = np.empty(0, np.int64)

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
        #: :meth:`begin` as a call with no Python frame (``open_wait(t0)`` stores ``t0`` as the open wait): the
        #: loader observer calls it once per wait on the loop's thread
        self.open_wait = functools.partial(self._mv.__setitem__, 1)
        self.owner: _Owner | None = None
        if array is None:  # the creating process settles the tails
            self.owner = _Owner(self, os.getpid())
            OWNERS.append(weakref.ref(self))

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
        with LOCK:
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
        with LOCK:
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


split = _split
split_to = _add

#: The rings this process created (whose tails it settles), and the lock of the wait split's state in this
#: process (the shares of :mod:`.attribution` too); both replaced in a forked child.
OWNERS: list[weakref.ref[WaitRing]] = []
LOCK = threading.RLock()


def settle_owned() -> None:
    """Settle the tails of the rings this process created (under :data:`LOCK`), forgetting the dead rings."""
    if OWNERS:
        alive = []
        for ref in OWNERS:
            ring = ref()
            if ring is not None and ring.owner is not None and ring.owner.pid == os.getpid():
                ring.owner.settle()
                alive.append(ref)
        OWNERS[:] = alive


def after_fork_in_child() -> None:
    """A forked child settles no tail of its parent's rings."""
    global OWNERS, LOCK
    OWNERS, LOCK = [], threading.RLock()
