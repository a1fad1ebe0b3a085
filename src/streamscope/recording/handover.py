"""Worker-to-main relay: a process hands its unwritten events and metrics snapshot to another of its run.

A DataLoader worker that lives one epoch would pay several times what the warm main process pays to open the log,
build the encoder's caches and encode its last lines (every first write to a page inherited at fork copies it).
So it ends its share with a :class:`Parcel` (:meth:`Relay.hand_over`) that rides to the main process with its
batches; the main process adopts it (:meth:`Relay.adopt`) and writes its events at its next flush.

* The sender asks, at exit, whether the receiver took the parcel (``received()``): True, False (abandoned: the
  sender writes the events and its final snapshot itself) or None (not yet). A parcel not taken yet is left in
  the run directory (:func:`write_spool`, ``parcel-<pid>.pkl``, written aside and renamed) and the sender exits
  at once; the receiver drops that file once it has the parcel, or claims it (:func:`take_spool`) when it never
  took the parcel otherwise. Without a run directory the sender waits for the answer (at most the
  ``trace_handover_wait`` knob, while its parent lives).
* A parcel's snapshot stands for the sender's file until a newer one comes (see :mod:`.collect`). While a parcel
  may still come (its spool file is in the run directory, or it is adopted and not yet taken in by a flush:
  :attr:`Relay.incoming`), its sender is not retired even once it is dead: retired on an older snapshot, the
  sender would be counted a second time when its parcel came.
"""

from __future__ import annotations

import os
import pickle
import time
from collections import deque
from collections.abc import Callable
from typing import Any, Protocol

from streamscope.events import context, instruments
from streamscope.events.bus import OPEN, STATE, Event, close_open_spans, events_represented
from streamscope.recording.report import Reporter

__all__ = ["Parcel", "Relay", "Sender", "drop_spool", "spool_path", "spooled", "take_spool", "write_spool"]


class _Counting(Protocol):
    @property
    def events(self) -> int:
        """Events folded in so far."""
        ...


class Sender(Protocol):
    """What the relay uses of the process's recorder (:class:`~streamscope.recording.recorder.Recorder`, which owns
    the relay and passes itself in): this module stays below the recorder."""

    @property
    def pid(self) -> int: ...
    @property
    def metrics_dir(self) -> str | None: ...
    @property
    def trace_cats(self) -> frozenset[str]: ...
    @property
    def handover_max(self) -> float: ...
    @property
    def handover_wait(self) -> float: ...
    @property
    def report(self) -> Reporter: ...
    @property
    def agg(self) -> _Counting: ...
    @property
    def sink_errors(self) -> int: ...

    def _take(self, hold: bool) -> list[Event]:
        """Take the buffered events (``hold``: keep those behind a complete event still open)."""
        ...

    def _export(self, events: list[Event], env: dict[str, int] | None = None) -> None:
        """Hand ``events`` (of the process with fields ``env``) to the exporters."""
        ...

    def _snapshot(self, open_now: dict[int, Any], final: bool) -> dict[str, Any]:
        """This process's metrics snapshot (published)."""
        ...


class Parcel:
    """Trace events one process hands to another of its run to write (a DataLoader worker's last events, sent
    to the main process with its batches: a short-lived worker then neither opens the log nor encodes).

    Attributes:
        pid: the process that recorded them.
        events: as in :class:`~streamscope.events.exporters.EventBatch` (already aggregated into the sender's
            metrics).
        env: the sender's rank/worker fields.
        snapshot: the sender's metrics snapshot as it hands the parcel over (None without a metrics directory):
            it need not write one at exit unless it records more.
        tag: the sender's number for the receiver (a DataLoader worker's id), -1 when none.
        handed: in a parcel left at exit (:meth:`Relay.reclaim`), how many of ``events`` the parcel handed over
            before carried (the rest were recorded since; ``snapshot`` is then the final one; 0 when the file
            holds only what came after); -1 otherwise.
    """

    __slots__ = ("pid", "events", "env", "snapshot", "tag", "handed")

    def __init__(
        self,
        pid: int,
        events: list[Event],
        env: dict[str, int],
        snapshot: dict[str, Any] | None = None,
        tag: int = -1,
        handed: int = -1,
    ) -> None:
        self.pid = pid
        self.events = events
        self.env = env
        self.snapshot = snapshot
        self.tag = tag
        self.handed = handed

    def __reduce__(self) -> tuple[Any, ...]:
        return (Parcel, (self.pid, self.events, self.env, self.snapshot, self.tag, self.handed))

    def late(self) -> Parcel | None:
        """What a parcel left at exit adds to the one handed over before (``handed``: how many of its events that
        one carried): the events recorded since and the final snapshot. None for a parcel that is only the one
        handed over."""
        if self.handed < 0:
            return None
        return Parcel(self.pid, self.events[self.handed :], self.env, self.snapshot, self.tag, 0)

    def __repr__(self) -> str:
        return f"Parcel(pid={self.pid}, events={len(self.events)})"


def spool_path(directory: str, pid: int) -> str:
    """Where process ``pid`` leaves a parcel nobody has taken yet as it exits (see :func:`write_spool`)."""
    return os.path.join(directory, f"parcel-{pid}.pkl")


def write_spool(directory: str, parcel: Parcel) -> None:
    """Leave ``parcel`` in the run directory, whole or not at all (written aside, then renamed)."""
    path = spool_path(directory, parcel.pid)
    tmp = f"{path}.tmp"
    with open(tmp, "wb") as f:
        pickle.dump(parcel, f, protocol=pickle.HIGHEST_PROTOCOL)
    os.replace(tmp, path)


def take_spool(directory: str, pid: int, before_removal: Callable[[Parcel], None] | None = None) -> Parcel | None:
    """The parcel process ``pid`` left (None when it left none), removed from the run directory.

    ``before_removal(parcel)`` runs before the file goes (e.g. adopting the parcel: a flush never sees the parcel
    neither in the directory nor adopted).

    Raises:
        pickle.UnpicklingError, EOFError, OSError, ...: a damaged file (removed all the same).
    """
    try:
        with open(spool_path(directory, pid), "rb") as f:
            parcel = pickle.load(f)
        if not isinstance(parcel, Parcel):
            return None
        if before_removal is not None:
            before_removal(parcel)
        return parcel
    except FileNotFoundError:
        return None
    finally:
        drop_spool(directory, pid)


def spooled(directory: str, pid: int) -> bool:
    """True when process ``pid`` left a parcel in the run directory that nobody has taken yet."""
    return os.path.exists(spool_path(directory, pid))


def drop_spool(directory: str, pid: int) -> None:
    """Remove the parcel process ``pid`` left in the run directory, if any (unread)."""
    try:
        os.remove(spool_path(directory, pid))
    except OSError:
        pass


class Relay:
    """This process's parcels: the one it handed over (until its receiver says) and those it adopted.

    Attributes:
        adopted: other processes' parcels this process writes at its next flush.
        incoming: pids of the parcels adopted and not yet drained by a flush (a flush's repair must not retire
            their senders on an older snapshot; see module doc).
        unconfirmed: ``(parcel, received, parent pid)`` of the last parcel handed over, until exit asks.
        handed: ``(events, dropped, sink errors, counters' version)`` of the snapshot the last parcel carried:
            at exit a process that recorded nothing since writes no snapshot of its own.
    """

    def __init__(self) -> None:
        self.adopted: deque[Parcel] = deque()
        self.incoming: set[int] = set()
        self.unconfirmed: tuple[Parcel, Callable[[], bool | None], int] | None = None
        self.handed: tuple[int, int, int, int] | None = None

    def hand_over(self, rec: Sender, tag: int, received: Callable[[], bool | None] | None) -> Parcel:
        """Take ``rec``'s buffered events for another process of the run (see :meth:`Recorder.hand_over`)."""
        traced = rec._take(hold=True)
        if traced and events_represented(traced) > rec.handover_max:
            rec._export(traced)
            traced = []
        snap = None
        if rec.metrics_dir:
            version = instruments.VERSION
            snap = rec._snapshot(OPEN.copy(), final=False)
            self.handed = (rec.agg.events, STATE.dropped, rec.sink_errors, version)
        parcel = Parcel(rec.pid, traced, context.env_fields() if traced else {}, snap, tag)
        if received is not None:
            self.unconfirmed = (parcel, received, os.getppid())
        return parcel

    def reclaim(self, rec: Sender) -> None:
        """At exit: the last parcel handed over, unless its receiver has taken it.

        * Abandoned (e.g. a loop that left its epoch early): its events are written here, and the final snapshot.
        * Not taken yet: torch tells an exhausted worker to exit as soon as its stop arrives, which can be before
          the loop has taken a parcel queued behind a later batch. The parcel is left in the run directory
          (:func:`write_spool`) and this process exits at once. Without a run directory this process waits for
          the answer instead (every 5 ms, for at most the ``trace_handover_wait`` knob, while its parent lives).
        * Either way, what this process traced since the hand-over goes where the parcel goes (see
          :meth:`_complete`): in the file left with it, or, the parcel taken, in a file of its own that the
          receiver adopts after the parcel (:meth:`Parcel.late`).
        """
        pending, self.unconfirmed = self.unconfirmed, None
        if pending is None:
            return
        parcel, received, parent = pending
        got = _ask(received)
        full: Parcel | None = None
        if got is not False and rec.metrics_dir:
            before = self.handed
            full = self._complete(rec, parcel)
            late = full.late()
            try:
                if got is None:
                    write_spool(rec.metrics_dir, full)
                    return
                if late is not None and late.events:  # taken: only what came after, for the receiver to append
                    write_spool(rec.metrics_dir, late)
                    return
                self.handed = before  # nothing traced since: the final snapshot, if any, is written at exit
                return
            except Exception as exc:  # full disk, removed directory: wait for the answer instead
                rec.report("spool", f"trace parcel not left in {rec.metrics_dir}: {type(exc).__name__}: {exc}")
            self.handed = None  # the final snapshot is written here after all
        deadline = time.monotonic() + rec.handover_wait
        while got is None and time.monotonic() <= deadline and os.getppid() == parent:
            time.sleep(0.005)  # a parcel the receiver holds but has not taken yet (e.g. behind a later batch)
            got = _ask(received)
        done = full.handed if full is not None and got else 0  # the receiver has these events
        events = full.events[done:] if full is not None else parcel.events
        if (not got or full is not None) and events and rec.trace_cats:
            rec._export(events, full.env if full is not None else parcel.env)
        if not got:
            self.handed = None  # its snapshot did not arrive either: the final one is written

    def _complete(self, rec: Sender, parcel: Parcel) -> Parcel:
        """At exit, the parcel to leave for the receiver: ``parcel`` followed by this process's last events.

        A thread may have begun a span before the hand-over (its ``B`` in the parcel) and still be in it, or have
        ended it since (e.g. a prefetch thread still fetching when the worker's share ended). Written here, its
        ``E`` (or the ``aborted`` one of the exit) would reach the log before the receiver writes the parcel's
        ``B``. So the spans still open are closed now and everything recorded since the hand-over goes to the
        receiver behind the parcel's events, with this process's final snapshot: whole when the receiver never
        took the parcel, the part after ``handed`` when it did (:meth:`Parcel.late`). Nothing is left to write
        at exit."""
        close_open_spans()
        rest = rec._take(hold=False)
        env = parcel.env or (context.env_fields() if rest else {})
        snap = rec._snapshot({}, final=True) if parcel.snapshot is not None else None
        if snap is not None:
            self.handed = (rec.agg.events, STATE.dropped, rec.sink_errors, instruments.VERSION)
        return Parcel(parcel.pid, parcel.events + rest, env, snap, parcel.tag, len(parcel.events))

    def adopt(self, parcel: Parcel) -> None:
        """Take ``parcel`` from another process of the run, for the next flush. Any thread."""
        if parcel.events or parcel.snapshot is not None:
            self.incoming.add(parcel.pid)  # first: a repair that sees the sender gone then sees this
            self.adopted.append(parcel)

    def drain(self, traced: bool, pieces: list[tuple[list[Event], dict[str, int] | None]]) -> list[Parcel]:
        """The parcels adopted since the last call; their events join ``pieces`` when this process traces."""
        out = []
        adopted = self.adopted
        while adopted:
            parcel = adopted.popleft()
            if parcel.events and traced:
                pieces.append((parcel.events, parcel.env))
            out.append(parcel)
        for parcel in out:  # (its snapshot is noted by the same flush, before its repair)
            self.incoming.discard(parcel.pid)
        return out


def _ask(received: Callable[[], bool | None]) -> bool | None:
    try:
        return received()
    except Exception:
        return False
