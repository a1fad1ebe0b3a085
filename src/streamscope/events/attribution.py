"""The wait split, live: what the workers were doing while the training loop waited for data.

The stall report of ``streamscope-trace summary`` splits the loop's wait among download, decompress, read, decode
and idle from a trace, after the run. This module gives the same split as a metric while the run goes on
(:data:`~streamscope.events.registry.M.LOADER_WAIT_STAGE`), with no trace written and nothing on the loop's path but
a few stores per wait. How:

* **The loop's waits.** The loader's process writes every wait of its loop into a small ring in shared memory
  (:class:`WaitRing`): the wait's begin before it blocks in ``next()``, the whole interval when the batch
  arrives. Five stores per wait.
* **What a worker does.** Each worker keeps a clock of its own activity (:class:`StageClock`): the spans of the
  ``download``, ``decompress`` and ``read`` categories, in any of its threads, its wait for a chunk another
  process is downloading (:func:`stage`), and its batch production (the time inside its batch generator,
  reported as ``decode``) move the clock between stages. At every moment the
  clock shows the stage of highest priority active in the worker (download, then decompress, read, decode, as
  the stall report ranks them), so its segments never overlap: a worker waiting for a chunk its prefetch thread
  downloads is downloading.
* **The split.** At each flush (its flusher's tick, and when it hands its events over at the end of its share)
  a worker intersects its clock's segments with the loop's waits in the ring (:class:`Attributor`, interval
  arithmetic with numpy, each pair of a segment and a wait counted once) and adds, per stage, the overlap
  divided by the number of workers to a counter. So each stage's number is the share of the workers' time
  during the waits that they spent in it; whatever the workers' time was not in a stage is ``idle``, computed
  in the main process as the total wait minus the stages.
* **num_workers=0.** The loop's own process is the worker: its waits are its decoding, so the split there is
  download / decompress / read where those spans overlap the wait and decode for the rest (no idle).

It differs from the stall report in one way: the report counts a moment as downloading when *any* worker
downloads; here each worker counts for its share of the workers (one of two workers downloading for the whole
wait: half download, half whatever the other did). The dominant stage is the same in both when one stage
dominates. The split runs when metrics are switched on (``enable_metrics``, ``STREAMSCOPE_METRICS_LEVEL``), not
for a trace alone: the stall report covers that case from the log.
"""

from __future__ import annotations

import multiprocessing
import threading
import time
from contextlib import nullcontext
from typing import Any

import numpy as np

from streamscope.events.bus import CompleteSpan, Span
from streamscope.events.registry import STAGES, M

__all__ = [
    "ACTIVE_ATTRIBUTOR",
    "Attributor",
    "CATEGORY_STAGES",
    "CLOCK",
    "DECODE",
    "DECOMPRESS",
    "DOWNLOAD",
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


#: Stage codes in priority order (a lower code wins when two are active at once).
DOWNLOAD, DECOMPRESS, READ, DECODE = 0, 1, 2, 3
#: Span categories that move a worker's clock, and to which stage.
CATEGORY_STAGES: dict[str, int] = {"download": DOWNLOAD, "decompress": DECOMPRESS, "read": READ}
#: Categories whose spans report to the clock now: empty unless this process attributes (mutated in place).
STAGED: set[str] = set()

_mono = time.monotonic_ns


class StageClock:
    """This process's activity as exclusive segments, each labelled with the stage of highest priority active
    in any of its threads then (see module doc). Thread-safe; a few hundred ns per change."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.active = [0, 0, 0, 0]
        self.top = -1  # the stage shown now (-1: none)
        self.since = _mono()
        self.starts: list[int] = []
        self.ends: list[int] = []
        self.stages: list[int] = []

    def enter(self, stage: int) -> None:
        t = _mono()
        with self.lock:
            self.active[stage] += 1
            self._show(t)

    def exit(self, stage: int) -> None:
        t = _mono()
        with self.lock:
            if self.active[stage] > 0:
                self.active[stage] -= 1
            self._show(t)

    def _show(self, t: int) -> None:
        a = self.active
        top = 0 if a[0] else 1 if a[1] else 2 if a[2] else 3 if a[3] else -1
        if top != self.top:
            if self.top >= 0 and t > self.since:
                self.starts.append(self.since)
                self.ends.append(t)
                self.stages.append(self.top)
            self.top, self.since = top, t

    def take(self, now: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The segments closed since the last take, the one in progress cut at ``now`` (it goes on from there):
        (starts, ends, stages) as int64 arrays in time order."""
        with self.lock:
            if self.top >= 0 and now > self.since:
                self.starts.append(self.since)
                self.ends.append(now)
                self.stages.append(self.top)
                self.since = now
            out = (np.array(self.starts, np.int64), np.array(self.ends, np.int64), np.array(self.stages, np.int64))
            self.starts, self.ends, self.stages = [], [], []
        return out


class WaitRing:
    """The training loop's waits, in shared memory: written by the loop's process, read by its workers.

    Layout (int64): ``[count, open_since, begin_0, end_0, begin_1, end_1, ...]``, the last :attr:`SIZE` waits.
    ``open_since`` is the begin of the wait in progress (0: not waiting). Created by the loader before its
    workers start (inherited by fork, pickled for spawn with the dataset's batch mode).
    """

    SIZE = 4096

    def __init__(self, array: Any = None) -> None:
        self.array = multiprocessing.RawArray("q", 2 + 2 * self.SIZE) if array is None else array

    def __reduce__(self) -> tuple[Any, ...]:
        return (WaitRing, (self.array,))

    def begin(self, t0: int) -> None:
        """The loop blocks for a batch; its wait began at ``t0`` (CLOCK_MONOTONIC ns)."""
        self.array[1] = t0

    def end(self, t0: int, t1: int) -> None:
        """The batch arrived: the wait ``[t0, t1]`` is complete."""
        a = self.array
        k = a[0]
        i = 2 + 2 * (k % self.SIZE)
        a[i] = t0
        a[i + 1] = t1
        a[0] = k + 1
        a[1] = 0

    def count(self) -> int:
        return int(self.array[0])

    def read(self, first: int) -> tuple[int, np.ndarray, np.ndarray, int]:
        """(count now, begins and ends of the complete waits from number ``first`` on, the open wait's begin or 0).

        Waits older than the ring's :attr:`SIZE` are gone (never double counted: skipped)."""
        a = self.array
        open_since = int(a[1])
        k = int(a[0])
        first = max(first, k - self.SIZE)
        n = k - first
        if n <= 0:
            empty = np.empty(0, np.int64)
            return k, empty, empty, open_since
        flat = np.frombuffer(a, dtype=np.int64, count=2 + 2 * self.SIZE)[2:].reshape(-1, 2)
        idx = np.arange(first, k) % self.SIZE
        pairs = flat[idx]
        return k, pairs[:, 0].copy(), pairs[:, 1].copy(), open_since


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

    return measure(a1) - measure(a0)


class Attributor:
    """A process's share of the wait split (see module doc): folds its clock's segments and the loop's waits into
    the ``streamscope.loader.wait.stage`` counters of this process.

    Args:
        ring: the loop's waits.
        workers: the loader's num_workers (each worker counts for ``1/workers`` of the split); 0: this process
            runs the loop itself.
        add: ``add(key, seconds)`` adds to a counter of this process.
    """

    #: Segments and waits are kept this long past where they could still meet a later one (clock skew margin).
    MARGIN_NS = 1_000_000_000

    def __init__(self, ring: WaitRing, workers: int, clock: StageClock, add: Any) -> None:
        self.ring = ring
        self.own_loop = workers <= 0
        self.share = 1.0 / max(1, workers)
        self.clock = clock
        self.add = add
        self.next_wait = ring.count()  # waits before this share are not this process's
        self.seg = (np.empty(0, np.int64), np.empty(0, np.int64), np.empty(0, np.int64))
        self.waits = (np.empty(0, np.int64), np.empty(0, np.int64))
        self.last_fold = _mono()
        self.keys = [f"{M.LOADER_WAIT_STAGE.name}|stage={s}" for s in STAGES]

    def fold(self, final: bool = False) -> None:
        """Count what the waits completed since the last fold, and this process's segments since then, share.

        ``final``: this process does no more work for the loop (its share ended): the wait in progress counts up
        to now too.
        """
        now = _mono()
        s0, s1, st = self.clock.take(now)
        k, w0, w1, open_since = self.ring.read(self.next_wait)
        self.next_wait = k
        if final and open_since:
            w0, w1 = np.append(w0, open_since), np.append(w1, now)
        parts = np.zeros(4, np.float64)
        if self.own_loop:
            # the loop's process: a wait is its own decoding, but for the stages its spans show inside it
            segs = (
                np.concatenate((self.seg[0], s0)),
                np.concatenate((self.seg[1], s1)),
                np.concatenate((self.seg[2], st)),
            )
            if len(w0):
                for stage in (DOWNLOAD, DECOMPRESS, READ):
                    m = segs[2] == stage
                    parts[stage] += float(_covered(w0, w1, segs[0][m], segs[1][m]).sum())
                parts[DECODE] += float((w1 - w0).sum()) - parts[:3].sum()
            keep_from = (open_since or now) - self.MARGIN_NS
            keep = segs[1] > keep_from
            self.seg = (segs[0][keep], segs[1][keep], segs[2][keep])
        else:
            old_w0, old_w1 = self.waits
            all_w0, all_w1 = np.concatenate((old_w0, w0)), np.concatenate((old_w1, w1))
            if len(s0) and len(all_w0):  # new segments x every wait they may meet
                parts += np.bincount(st, weights=_covered(s0, s1, all_w0, all_w1), minlength=4)[:4]
            if len(self.seg[0]) and len(w0):  # older segments x the new waits
                parts += np.bincount(self.seg[2], weights=_covered(self.seg[0], self.seg[1], w0, w1), minlength=4)[:4]
            keep_w = all_w1 > now - self.MARGIN_NS  # a later segment starts after now
            self.waits = (all_w0[keep_w], all_w1[keep_w])
            seg0, seg1, segst = (np.concatenate((a, b)) for a, b in zip(self.seg, (s0, s1, st)))
            keep_s = seg1 > (open_since or now) - self.MARGIN_NS  # a later wait begins after that
            self.seg = (seg0[keep_s], seg1[keep_s], segst[keep_s])
        self.last_fold = now
        share = self.share / 1e9
        for stage in range(4):
            if parts[stage] > 0:
                self.add(self.keys[stage], parts[stage] * share)


#: This process's clock and its attributor (None: this process does not attribute).
CLOCK = StageClock()
ACTIVE_ATTRIBUTOR: list[Attributor | None] = [None]


def start(ring: WaitRing, workers: int, add: Any) -> Attributor:
    """Attribute from now on in this process: staged spans report to :data:`CLOCK`."""
    global CLOCK
    CLOCK = StageClock()
    att = Attributor(ring, workers, CLOCK, add)
    ACTIVE_ATTRIBUTOR[0] = att
    STAGED.update(CATEGORY_STAGES)
    return att


def stop(final: bool = True) -> None:
    """Fold one last time (``final``: the wait in progress up to now) and stop attributing."""
    att = ACTIVE_ATTRIBUTOR[0]
    ACTIVE_ATTRIBUTOR[0] = None
    STAGED.clear()
    if att is not None:
        att.fold(final=final)


def fold() -> None:
    """Fold now if this process attributes (the recorder calls this at every flush)."""
    att = ACTIVE_ATTRIBUTOR[0]
    if att is not None:
        att.fold()


def after_fork_in_child() -> None:
    """A forked child attributes nothing of its parent's (it starts its own if its loader asks)."""
    global CLOCK
    ACTIVE_ATTRIBUTOR[0] = None
    STAGED.clear()
    CLOCK = StageClock()


class StagedSpan(Span):
    """A ``B``/``E`` span that also moves this process's :data:`CLOCK` (see :func:`staged_span`)."""

    __slots__ = ("stage", "clock")

    def __enter__(self) -> dict[str, Any]:
        self.clock = CLOCK
        self.clock.enter(self.stage)
        return Span.__enter__(self)

    def __exit__(self, et: Any, exc: Any, tb: Any) -> bool:
        try:
            return Span.__exit__(self, et, exc, tb)
        finally:
            self.clock.exit(self.stage)


class StagedCompleteSpan(CompleteSpan):
    """A complete (``X``) span that also moves this process's :data:`CLOCK`."""

    __slots__ = ("stage", "clock")

    def __enter__(self) -> dict[str, Any]:
        self.clock = CLOCK
        self.clock.enter(self.stage)
        return CompleteSpan.__enter__(self)

    def __exit__(self, et: Any, exc: Any, tb: Any) -> bool:
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
    sp: Any = StagedCompleteSpan(name, cat, fields) if compact else StagedSpan(name, cat, fields)
    sp.stage = CATEGORY_STAGES[cat]
    return sp
