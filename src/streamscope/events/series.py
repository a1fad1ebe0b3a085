"""Series and timelines: complete events a loop records once per iteration, with appends and no call of ours.

A :class:`Series` holds one name and category (a worker's ``decode_batch`` spans), a :class:`Timeline` two kinds
of back-to-back events (the loader's ``stall`` and ``batch``). The owner thread appends clock reads and values to
two lists (``mark``, ``put``: bound ``list.append``); the recorder takes the complete events at every flush and
appends them to the buffer of :mod:`.bus` as one bulk entry, or as ``B``/``E`` pairs. Until taken they hold back
the events their thread records later (:func:`open_horizons`), so each thread's events reach the sinks in begin
order.
"""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

import numpy as np

from streamscope.events.bus import ACTIVE, BUF, COMPACT, LEFT_BEHIND, OPEN_X, STATE, record_bulk

__all__ = [
    "Kind",
    "SERIES",
    "Series",
    "Timeline",
    "after_fork_in_child",
    "live_series",
    "open_horizons",
    "take_series",
]

_mono = time.monotonic_ns
_ident = threading.get_ident


def _drop() -> None:
    with STATE.drop_lock:
        STATE.dropped += 1


#: Series of this process (weak): their horizons hold events back; taken at every flush and at exit.
SERIES: weakref.WeakSet[Series | Timeline] = weakref.WeakSet()
#: Guards SERIES: a WeakSet iterates in Python code, so another thread's add could break an iteration.
_SERIES_LOCK = threading.Lock()
#: Held while a take cuts a series' lists (two takers, e.g. the flusher and the owner's finish, must not both
#: cut the same prefix).
_TAKE_LOCK = threading.Lock()


def live_series() -> list[Series | Timeline]:
    """The series of this process still referenced (a snapshot, safe from any thread)."""
    with _SERIES_LOCK:
        return list(SERIES)


def _record_pair(name: str, cat: str, t0: int, t1: int, tid: int, fields: dict[str, Any]) -> None:
    """Append a ``B``/``E`` pair (LitData's form of a complete event), or count both as dropped."""
    if len(BUF) + 1 < STATE.cap:
        BUF.append(("B", name, cat, t0, STATE.pid, tid, fields))
        BUF.append(("E", name, cat, t1, STATE.pid, tid, fields))
    else:
        _drop()
        _drop()


class _Marks:
    """What the recorder asks of a series or timeline: its owner thread and the begin of its oldest event."""

    __slots__ = ()
    marks: list[int]

    def horizon(self) -> int:
        """Begin (ns) of the oldest event not yet in the buffer (ended or open), -1 when none."""
        try:
            return self.marks[0]  # read from another thread: a stale value only holds back more
        except IndexError:
            return -1


class Series(_Marks):
    """Complete events of one name and category from one thread, e.g. the ``batch`` spans of a loop.

    The owner thread records with appends to two lists and no call of ours::

        mark, put = s.mark, s.put        # once, before the loop
        mark(now())                      # the event begins
        ...
        mark(now()); put(j)              # it ends; then one put per name in ``keys``, in order

    ``s.begin()`` / ``s.end(*values)`` do the same with a call each. ``marks`` holds begin, end, begin, end,
    ...: an odd length means an event is open; ``vals`` holds ``len(keys)`` ints per ended event. Any thread
    may :meth:`take` the complete events (the recorder does at every flush, ``flush_tracer`` too, and the exit
    hook): the owner only appends at the end and a take only removes a prefix of complete events, so under
    the GIL no lock is needed. A take hands them to the buffer as ONE :data:`BULK` entry (measured begin/end
    per event as int64 arrays, the constant ``fields`` on every event), or as ``B``/``E`` pairs when
    ``compact`` is False (LitData's form). Until taken, the pending events and the open one hold back, in the
    recorder, the events their thread records later (:func:`open_horizons`), so each thread's events reach
    the sinks in begin order. Values must be ints: a take that meets anything else drops its events, counted.

    A forked child never writes its parent's pending events.
    """

    __slots__ = (
        "name", "cat", "keys", "fields", "compact", "tid", "pid", "marks", "vals", "mark", "put", "__weakref__",
    )  # fmt: skip

    def __init__(self, name: str, cat: str, keys: tuple[str, ...], fields: dict[str, Any], compact: bool) -> None:
        self.name = name
        self.cat = cat
        self.keys = keys
        self.fields = fields
        self.compact = compact
        self.tid = _ident()
        self.pid = STATE.pid
        self.marks: list[int] = []  # begin, end, begin, end, ... (ns); odd length: an event is open
        self.vals: list[int] = []  # len(keys) values per ended event
        self.mark = self.marks.append
        self.put = self.vals.append
        with _SERIES_LOCK:
            SERIES.add(self)

    def begin(self) -> int:
        """Open an event now; returns its begin (ns)."""
        t0 = _mono()
        self.marks.append(t0)
        return t0

    def end(self, *values: int) -> None:
        """Close the open event now, with one integer per column (a wrong count drops it, counted)."""
        t1 = _mono()
        if len(values) != len(self.keys) or len(self.marks) % 2 == 0:
            if len(self.marks) % 2:
                self.marks.pop()
            _drop()
            return
        self.vals.extend(values)
        self.marks.append(t1)

    def finish(self) -> None:
        """The owner is done with the series: an event left open is dropped, the complete ones are taken."""
        if len(self.marks) % 2:
            self.marks.pop()
        self.take()

    def take(self) -> None:
        """Hand the complete events to the buffer now (nothing when there are none). Any thread."""
        marks, vals, k = self.marks, self.vals, len(self.keys)
        with _TAKE_LOCK:  # takers exclude each other (the owner's appends need no lock)
            n = min(len(marks) // 2, len(vals) // k)
            if n <= 0:
                return
            times_l, values_l = marks[: 2 * n], vals[: k * n]
            del marks[: 2 * n]  # a prefix only: the owner may have appended meanwhile
            del vals[: k * n]
        if self.pid != STATE.pid:
            return  # the parent's events, inherited by fork: not ours to write
        try:
            times = np.fromiter(times_l, dtype=np.int64, count=2 * n)
            values = np.fromiter(values_l, dtype=np.int64, count=k * n).reshape(n, k)
        except (TypeError, ValueError, OverflowError):  # a call-site bug must not reach the sinks
            with STATE.drop_lock:
                STATE.dropped += n
            return
        starts, ends = times[0::2], times[1::2]
        cols = {key: values[:, i] for i, key in enumerate(self.keys)}
        if self.compact:
            record_bulk(
                self.name, self.cat, int(starts[0]), int(ends[-1]), cols, dict(self.fields), starts, ends, self.tid
            )
            return
        rows = values.tolist()
        for (t0, t1), row in zip(times.reshape(n, 2).tolist(), rows):
            f = dict(self.fields)
            f.update(zip(self.keys, row))
            _record_pair(self.name, self.cat, t0, t1, self.tid, f)


#: One kind of event of a :class:`Timeline`: name, category, the name of its integer column, constant fields.
Kind = tuple[str, str, str, dict[str, Any]]


class Timeline(_Marks):
    """Back-to-back complete events of one thread, of two kinds: a loop's ``stall`` and ``batch`` events.

    Each event begins where the one before it ended, so ONE clock read marks the end of one and the begin of
    the next (two :class:`Series` would take two appends for it). The owner thread records with appends and
    no call of ours::

        mark, put = tl.mark, tl.put      # once, before the loop
        mark(now())                      # the first event begins
        ...
        mark(now()); put(v)              # an event ends, the next one begins: v >= 0 is an event of the
                                         # first kind with value v, ~v (< 0) one of the second kind

    ``marks`` holds the boundaries (one more than the ended events: the last begins the open event), ``vals``
    one code per ended event. :meth:`take` cuts the ended events off like :meth:`Series.take` (under the GIL,
    no lock with the owner) and hands each kind's events to the buffer as one :data:`BULK` entry with its
    column (``batch``) and fields, or as ``B``/``E`` pairs when the kind's category is not compact. A kind
    whose category is inactive is not written. The horizon is the begin of the oldest event not taken, so the
    open event holds back the thread's later events as a series' does; :meth:`finish` drops it.

    ``listener`` (None, or set by the owner before its first mark): called by each take that cuts events off, as
    ``listener(times, codes)`` with the int64 boundaries and codes of those events (``codes[i]`` ends at
    ``times[i + 1]``), before they are visible as taken to anyone else (under the take's lock): a reader of the
    cut events (the wait split of a loop with no workers) needs no store of its own on the owner's path.
    """

    __slots__ = ("kinds", "on", "compact", "tid", "pid", "marks", "vals", "mark", "put", "listener", "__weakref__")

    def __init__(self, first: Kind, second: Kind) -> None:
        self.kinds = (first, second)
        self.on = (first[1] in ACTIVE, second[1] in ACTIVE)
        self.compact = (first[1] in COMPACT, second[1] in COMPACT)
        self.tid = _ident()
        self.pid = STATE.pid
        self.marks: list[int] = []  # boundaries (ns)
        self.vals: list[int] = []  # one code per ended event
        self.mark = self.marks.append
        self.put = self.vals.append
        self.listener: Callable[[np.ndarray, np.ndarray], None] | None = None
        with _SERIES_LOCK:
            SERIES.add(self)

    def finish(self) -> None:
        """The owner is done: the open event is dropped, the ended ones are taken."""
        self.take()
        with _TAKE_LOCK:
            del self.marks[:]
            del self.vals[:]

    def take(self) -> None:
        """Hand the ended events to the buffer now (nothing when there are none). Any thread."""
        marks, vals = self.marks, self.vals
        with _TAKE_LOCK:
            n = min(len(marks) - 1, len(vals))
            if n <= 0:
                return
            times_l, codes_l = marks[: n + 1], vals[:n]
            if self.pid != STATE.pid:  # the parent's events, inherited by fork: not ours to write
                del marks[:n]
                del vals[:n]
                return
            try:
                times = np.fromiter(times_l, dtype=np.int64, count=n + 1)
                codes = np.fromiter(codes_l, dtype=np.int64, count=n)
            except (TypeError, ValueError, OverflowError):  # a call-site bug must not reach the sinks
                bad = True
            else:
                bad = False
                listener = self.listener
                if listener is not None:
                    listener(times, codes)  # before the cut: whoever sees the horizon move sees these events
            del marks[:n]  # the boundary after the last ended event stays: it begins the open one
            del vals[:n]
        if bad:
            with STATE.drop_lock:
                STATE.dropped += n
            return
        second = codes < 0
        pairs: list[tuple[int, int, int, Kind]] = []  # the B/E events of non-compact kinds, in order
        for k, mask in enumerate((~second, second)):
            if not self.on[k]:
                continue
            idx = np.flatnonzero(mask)
            if not len(idx):
                continue
            name, cat, key, fields = self.kinds[k]
            values = codes[idx] if k == 0 else ~codes[idx]
            starts, ends = times[idx], times[idx + 1]
            if self.compact[k]:
                cols = {key: values}
                record_bulk(name, cat, int(starts[0]), int(ends[-1]), cols, dict(fields), starts, ends, self.tid)
            else:
                kind = self.kinds[k]
                pairs += [(t0, t1, v, kind) for t0, t1, v in zip(starts.tolist(), ends.tolist(), values.tolist())]
        pairs.sort(key=lambda p: p[0])
        for t0, t1, v, (name, cat, key, fields) in pairs:
            f = dict(fields)
            f[key] = v
            _record_pair(name, cat, t0, t1, self.tid, f)


def take_series() -> None:
    """Hand the complete events of every series of this process to the buffer (any thread)."""
    for s in live_series():
        s.take()


def open_horizons() -> dict[int, int]:
    """Per thread, the earliest begin (ns) of a complete event still open there (series and spans)."""
    out: dict[int, int] = {}
    for tid, t0 in list(OPEN_X.values()):
        if t0 < out.get(tid, t0 + 1):
            out[tid] = t0
    for s in live_series():
        t0 = s.horizon()
        if t0 >= 0 and s.pid == STATE.pid and t0 < out.get(s.tid, t0 + 1):
            out[s.tid] = t0
    return out


def after_fork_in_child() -> None:
    """A forked child records no series of its parent's: their pending events are the parent's to write."""
    # left unreleased (see LEFT_BEHIND); WeakSet.data is its set of weak references (listing it makes strong ones)
    LEFT_BEHIND.append(list(SERIES.data))  # type: ignore[attr-defined]
    global _SERIES_LOCK, _TAKE_LOCK
    _SERIES_LOCK = threading.Lock()  # another thread of the parent may have held it at fork
    _TAKE_LOCK = threading.Lock()
    SERIES.clear()
