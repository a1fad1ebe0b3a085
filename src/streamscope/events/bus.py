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
    "LEFT_BEHIND",
    "NULL_SPAN",
    "OPEN",
    "OPEN_X",
    "STATE",
    "Span",
    "after_fork_in_child",
    "as_list",
    "cancel_deferred",
    "close_open_spans",
    "defer_flusher",
    "events_represented",
    "expand",
    "joined",
    "poll",
    "record",
    "record_at",
    "record_bulk",
    "take",
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


#: Complete spans (:class:`CompleteSpan`) entered and not yet exited: id(span) -> (tid, begin ns).
OPEN_X: dict[int, tuple[int, int]] = {}


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
    """Fresh buffer and counters in a forked child: the parent's unflushed events are not ours to write (the
    series are :func:`streamscope.events.series.after_fork_in_child`'s)."""
    # the events stay unreleased
    LEFT_BEHIND.append((list(BUF), dict(OPEN), dict(OPEN_X)))
    BUF.clear()
    OPEN.clear()
    OPEN_X.clear()
    STATE.bulk = 0
    STATE.pid = os.getpid()
    STATE.dropped = 0
    STATE.drop_lock = threading.Lock()
    cancel_deferred()  # the parent's deferred flusher is the parent's
