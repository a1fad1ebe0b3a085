"""The hot path: the per-process event buffer and the functions call sites reach through ``events``.

An event is a tuple ``(ph, name, cat, ts_ns, pid, tid, fields)``: ``ts_ns`` is ``time.monotonic_ns()``
(CLOCK_MONOTONIC, shared by every process on the machine), ``tid`` is ``threading.get_ident()`` (LitData's
TID) and ``fields`` a dict that nobody mutates after it is recorded. Recording appends the tuple to a
bounded ``deque``; a full buffer drops the event and counts it. Nothing here blocks or raises.

Bulk events: ``ph`` :data:`BULK` (``"X+"``) is ONE buffer entry standing for ``n`` complete (``X``) events
of one name and category, e.g. the samples of a batch; its ``fields`` slot is a :class:`Bulk` (not a dict)
holding integer columns (``chunk``, ``item``) and either the per-event measured ``starts``/``ends`` or,
for events decoded together in one vectorised call, only the interval of the whole call. The rule for the
latter (documented where the events are written, in :mod:`streamscope.trace.litracer`): event ``k`` of
``n`` gets ``ts = t0 + k * share`` and ``dur = share`` with ``share = (t1 - t0) // n`` and the field
``batched: n``, i.e. the measured time of the call split evenly; nothing is claimed per sample beyond
that. :func:`expand` turns bulk entries into plain ``X`` events for sinks that want one tuple per event.
"""

from __future__ import annotations

import os
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable
from typing import Any, Literal, cast

import numpy as np

__all__ = [
    "ACTIVE",
    "BUF",
    "BULK",
    "Bulk",
    "COMPACT",
    "CompleteSpan",
    "Event",
    "Kind",
    "LEFT_BEHIND",
    "NULL_SPAN",
    "OPEN",
    "OPEN_X",
    "SERIES",
    "STATE",
    "Series",
    "Span",
    "Timeline",
    "after_fork_in_child",
    "as_list",
    "cancel_deferred",
    "close_open_spans",
    "defer_flusher",
    "events_represented",
    "expand",
    "joined",
    "live_series",
    "open_horizons",
    "poll",
    "record",
    "record_at",
    "record_bulk",
    "take",
    "take_series",
    "wake_flusher",
]


Event = tuple[str, str, str, int, int, int, dict[str, Any]]

#: Active category names; mutated in place, never rebound.
ACTIVE: set[str] = set()

#: The per-process buffer; never rebound (cleared in place after fork).
BUF: deque[Event] = deque()

#: Active categories whose spans are recorded as ONE complete ``X`` event (field ``dur`` in µs) at exit
#: instead of a ``B``/``E`` pair: half the events and log bytes for high-volume spans (``sample``).
COMPACT: set[str] = set()

#: Spans entered and not yet exited in this process: id(span) -> span (B/E spans only).
OPEN: dict[int, Span] = {}

_mono = time.monotonic_ns
_ident = threading.get_ident


class _State:
    """Mutable per-process numbers the hot path reads (one attribute lookup each)."""

    __slots__ = ("cap", "pid", "dropped", "drop_lock", "bulk", "due", "wake")

    def __init__(self) -> None:
        self.cap = 200_000
        self.pid = os.getpid()
        self.dropped = 0
        self.drop_lock = threading.Lock()
        self.bulk = 0  # events represented by the bulk entries in the buffer beyond one each (approximate)
        self.due = 0  # CLOCK_MONOTONIC ns from which a deferred flusher is started (0: none deferred)
        self.wake: Callable[[], None] | None = None  # starts the deferred flusher (see defer_flusher)


STATE = _State()


def _drop() -> None:
    with STATE.drop_lock:
        STATE.dropped += 1


def defer_flusher(due_ns: int, wake: Callable[[], None]) -> None:
    """Have ``wake()`` called once, by the first of: a :class:`Span` entered (it may stay open long, and a
    process's open spans are published by its flusher), an event recorded or :func:`poll` called at or after
    ``due_ns`` (CLOCK_MONOTONIC). The recorder defers a forked DataLoader worker's flusher thread this way (see
    ``Recorder.after_fork_in_child``).
    """
    STATE.due, STATE.wake = max(1, int(due_ns)), wake


def cancel_deferred() -> None:
    """Forget the deferred ``wake`` (it is not called)."""
    STATE.due, STATE.wake = 0, None


def wake_flusher() -> None:
    """Call the deferred ``wake`` now (at most once; nothing when none is deferred)."""
    wake = STATE.wake
    STATE.due, STATE.wake = 0, None
    if wake is not None:
        wake()


def poll() -> None:
    """Start a deferred flusher whose time has come (see :func:`defer_flusher`); one attribute test otherwise.
    For loops whose events are series appends, which do not check the time."""
    if STATE.due and _mono() >= STATE.due:
        wake_flusher()


#: ``ph`` of a bulk entry (see module doc); never written as such, sinks expand it.
BULK = "X+"


class Bulk:
    """The ``fields`` of a :data:`BULK` entry: ``n`` complete events recorded by one call.

    Attributes:
        n: number of events.
        t1: end (CLOCK_MONOTONIC ns) of the interval that began at the entry's ``ts_ns``.
        cols: field name -> ``n`` integers (a list or a 1-D integer array; nobody mutates it).
        starts, ends: per-event measured begin/end (ns; lists or int64 arrays), or None when the events shared
            one interval.
        fields: fields common to every event (``batched: n`` is added to shared-interval events).
    """

    __slots__ = ("n", "t1", "cols", "starts", "ends", "fields")

    def __init__(
        self,
        n: int,
        t1: int,
        cols: dict[str, Any],
        starts: Any,
        ends: Any,
        fields: dict[str, Any],
    ) -> None:
        self.n = n
        self.t1 = t1
        self.cols = cols
        self.starts = starts
        self.ends = ends
        self.fields = fields

    def __repr__(self) -> str:
        return f"Bulk(n={self.n}, cols={list(self.cols)}, measured={self.starts is not None}, fields={self.fields})"


def record_bulk(
    name: str,
    cat: str,
    t0: int,
    t1: int,
    cols: dict[str, Any],
    fields: dict[str, Any],
    starts: Any = None,
    ends: Any = None,
    tid: int | None = None,
) -> None:
    """Append one :data:`BULK` entry for ``len(first column)`` events (a full buffer drops and counts them all).

    Without ``starts``/``ends`` the events share the interval ``[t0, t1]`` and get ``batched: n``.
    ``tid`` defaults to the calling thread.
    """
    n = len(next(iter(cols.values()))) if starts is None else len(starts)
    if n <= 0:
        return
    if starts is None:
        fields["batched"] = n
    if len(BUF) + STATE.bulk + n <= STATE.cap:  # the bound counts the events an entry stands for
        STATE.bulk += n - 1
        tid = _ident() if tid is None else tid
        # Event types its last member for the common case (fields); a BULK entry holds a Bulk there, which every
        # reader tells by the entry's ph first
        BUF.append(cast(Event, (BULK, name, cat, t0, STATE.pid, tid, Bulk(n, t1, cols, starts, ends, fields))))
        if STATE.due and t1 >= STATE.due:
            wake_flusher()
    else:
        with STATE.drop_lock:
            STATE.dropped += n


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
    """

    __slots__ = ("kinds", "on", "compact", "tid", "pid", "marks", "vals", "mark", "put", "__weakref__")

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
            del marks[:n]  # the boundary after the last ended event stays: it begins the open one
            del vals[:n]
        if self.pid != STATE.pid:
            return  # the parent's events, inherited by fork: not ours to write
        try:
            times = np.fromiter(times_l, dtype=np.int64, count=n + 1)
            codes = np.fromiter(codes_l, dtype=np.int64, count=n)
        except (TypeError, ValueError, OverflowError):  # a call-site bug must not reach the sinks
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


#: Complete spans (:class:`CompleteSpan`) entered and not yet exited: id(span) -> (tid, begin ns).
OPEN_X: dict[int, tuple[int, int]] = {}


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


def as_list(values: Any) -> list[Any]:
    """A bulk entry's column or start/end times as a list of Python ints (they are lists or int64 arrays)."""
    return values.tolist() if hasattr(values, "tolist") else list(values)


def joined(parts: list[Any], dtype: Any = None) -> np.ndarray:
    """Several bulk entries' columns or times (lists or arrays) as one array; a single array is used as it is."""
    if len(parts) == 1:
        return np.asarray(parts[0], dtype=dtype)
    return np.concatenate([np.asarray(p, dtype=dtype) for p in parts])


def expand(events: list[Event]) -> list[Event]:
    """``events`` with every :data:`BULK` entry replaced by its plain ``X`` events (in order)."""
    if not any(e[0] == BULK for e in events):
        return events
    out: list[Event] = []
    for e in events:
        if e[0] != BULK:
            out.append(e)
            continue
        _ph, name, cat, t0, pid, tid, b = e
        assert isinstance(b, Bulk)
        cols = [(k, as_list(v)) for k, v in b.cols.items()]
        if b.starts is None or b.ends is None:
            share = max(0, b.t1 - t0) // b.n
            times = [(t0 + k * share, share) for k in range(b.n)]
        else:
            times = [(s, max(0, x - s)) for s, x in zip(as_list(b.starts), as_list(b.ends))]
        for k, (ts, dur) in enumerate(times):
            f = {c: v[k] for c, v in cols}
            f.update(b.fields)
            f["dur"] = dur / 1000
            out.append(("X", name, cat, ts, pid, tid, f))
    return out


def events_represented(events: list[Event]) -> int:
    """Number of events in ``events`` counting a bulk entry as its ``n``."""
    return len(events) + sum([cast(Bulk, e[6]).n - 1 for e in events if e[0] == BULK])


def record(ph: str, name: str, cat: str, fields: dict[str, Any], tid: int | None = None) -> None:
    """Append one event to the buffer, or count a drop when it is full."""
    if len(BUF) < STATE.cap:
        ts = _mono()
        BUF.append((ph, name, cat, ts, STATE.pid, _ident() if tid is None else tid, fields))
        if STATE.due and ts >= STATE.due:
            wake_flusher()
    else:
        _drop()


class Span:
    """Context manager recording ``B`` on enter and ``E`` on exit (also on exceptions and generator close)."""

    __slots__ = ("name", "cat", "fields", "tid", "since", "__weakref__")

    def __init__(self, name: str, cat: str, fields: dict[str, Any], since: int = 0) -> None:
        self.name = name
        self.cat = cat
        self.fields = fields  # tid is set on enter (exit and the recorder only read it after an enter)
        self.since = since  # the begin's time when it is earlier than the enter (0: the enter's)

    def __enter__(self) -> dict[str, Any]:
        if STATE.due:
            wake_flusher()  # this span may stay open long: its process's flusher publishes it meanwhile
        self.tid = tid = _ident()
        begin = self.fields
        if len(BUF) < STATE.cap:
            BUF.append(("B", self.name, self.cat, self.since or _mono(), STATE.pid, tid, begin))
        else:
            _drop()
        OPEN[id(self)] = self
        out = self.fields = begin.copy()
        return out

    def __exit__(self, et: type[BaseException] | None, exc: BaseException | None, tb: Any) -> Literal[False]:
        if OPEN.pop(id(self), None) is None:
            return False  # already closed by the recorder (process exit) or never entered
        fields = self.fields
        if et is not None and et is not GeneratorExit:
            fields["exception"] = et.__name__
        if len(BUF) < STATE.cap:
            BUF.append(("E", self.name, self.cat, _mono(), STATE.pid, self.tid, fields))
        else:
            _drop()
        return False


class CompleteSpan:
    """Context manager recording one ``X`` event on exit, with ``dur`` (µs) as its last field.

    Nothing is written for a span its process never finishes, so there is nothing left unmatched.
    """

    __slots__ = ("name", "cat", "fields", "t0")

    def __init__(self, name: str, cat: str, fields: dict[str, Any]) -> None:
        self.name = name
        self.cat = cat
        self.fields = fields

    def __enter__(self) -> dict[str, Any]:
        self.t0 = t0 = _mono()
        OPEN_X[id(self)] = (_ident(), t0)
        return self.fields

    def __exit__(self, et: type[BaseException] | None, exc: BaseException | None, tb: Any) -> Literal[False]:
        t0 = self.t0
        OPEN_X.pop(id(self), None)
        fields = self.fields
        if et is not None and et is not GeneratorExit:
            fields["exception"] = et.__name__
        if "dur" in fields:
            del fields["dur"]  # keep dur the last field
        t1 = _mono()
        fields["dur"] = (t1 - t0) / 1000
        if len(BUF) < STATE.cap:
            BUF.append(("X", self.name, self.cat, t0, STATE.pid, _ident(), fields))
            if STATE.due and t1 >= STATE.due:
                wake_flusher()
        else:
            _drop()
        return False


class _NullSpan:
    """What ``span`` returns for an inactive category: enter yields a throwaway dict."""

    __slots__ = ()

    def __enter__(self) -> dict[str, Any]:
        return {}

    def __exit__(self, et: Any, exc: Any, tb: Any) -> Literal[False]:
        return False


NULL_SPAN = _NullSpan()


def record_at(ph: str, name: str, cat: str, ts: int, fields: dict[str, Any]) -> None:
    """Like :func:`record` with an explicit timestamp (CLOCK_MONOTONIC ns)."""
    if len(BUF) < STATE.cap:
        BUF.append((ph, name, cat, ts, STATE.pid, _ident(), fields))
    else:
        _drop()


def close_open_spans() -> int:
    """Record an ``E`` with ``aborted=1`` for every span still open in this process; returns how many."""
    n = 0
    for key, sp in list(OPEN.items()):
        if OPEN.pop(key, None) is None:
            continue
        fields = dict(sp.fields)
        fields["aborted"] = 1
        record("E", sp.name, sp.cat, fields, tid=sp.tid)
        n += 1
    return n


def take(limit: int | None = None) -> list[Event]:
    """Pop up to ``limit`` (default: all present) events from the buffer, oldest first. Thread-safe."""
    n = len(BUF) if limit is None else min(limit, len(BUF))
    pop = BUF.popleft
    out: list[Event] = []
    append = out.append
    try:
        for _ in range(n):
            append(pop())
    except IndexError:  # another consumer took some
        pass
    if STATE.bulk:
        if not BUF:
            STATE.bulk = 0
        else:
            STATE.bulk = max(0, STATE.bulk - sum([cast(Bulk, e[6]).n - 1 for e in out if e[0] == BULK]))
    return out


#: What a forked child inherited and no longer uses, kept referenced and never touched again: releasing it would
#: write to every page it spans (reference counts, frees), and each first write after a fork copies a page the
#: child shares with its parent. A DataLoader worker is forked every epoch and lives one.
LEFT_BEHIND: list[Any] = []


def after_fork_in_child() -> None:
    """Fresh buffer and counters in a forked child: the parent's unflushed events are not ours to write."""
    # the events stay unreleased; WeakSet.data is its set of weak references (listing it makes strong ones)
    LEFT_BEHIND.append((list(BUF), dict(OPEN), list(SERIES.data), dict(OPEN_X)))  # type: ignore[attr-defined]
    BUF.clear()
    OPEN.clear()
    global _SERIES_LOCK, _TAKE_LOCK
    _SERIES_LOCK = threading.Lock()  # another thread of the parent may have held it at fork
    _TAKE_LOCK = threading.Lock()
    SERIES.clear()  # the parent's pending series events are the parent's
    OPEN_X.clear()
    STATE.bulk = 0
    STATE.pid = os.getpid()
    STATE.dropped = 0
    STATE.drop_lock = threading.Lock()
    cancel_deferred()  # the parent's deferred flusher is the parent's
