"""The per-process recorder: background flusher, sinks, metrics publication, fork and exit handling.

Lifecycle of one process:

* :func:`configure` (called by ``enable_tracer``, or at import of ``streamscope.events`` from the environment)
  sets the active categories, makes sure the run has a clock anchor and a metrics directory (both passed to
  child processes through the environment) and starts a daemon flusher thread.
* Every ``metrics_interval`` (or ``flush_interval`` if shorter) the flusher takes all buffered events, folds
  them into the metrics aggregator, hands the traced ones to the sinks and publishes the metrics snapshot.
* After ``fork`` the child starts from scratch: empty buffer, fresh locks, fresh aggregator, its own sinks
  (built again from their factories) and its own flusher; the parent's unflushed events are dropped there so
  nothing is written twice.
* At exit (``threading``'s shutdown hook, which also runs when a multiprocessing child, e.g. a DataLoader
  worker, returns and then calls ``os._exit``; and ``atexit``) every open span gets an ``E`` with
  ``aborted: 1``, the buffer is flushed, sinks are shut down and a final snapshot is published. The process
  that created the run directory also closes, on their behalf, the spans that dead workers (killed, e.g. by
  SIGKILL) left open according to their last snapshot.
"""

from __future__ import annotations

import _thread
import atexit
import multiprocessing.util as mp_util
import os
import shutil
import sys
import tempfile
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable
from typing import Any

from streamscope._core import config
from streamscope._core.procs import pid_alive
from streamscope.events import context, vocab
from streamscope.events.bus import (
    ACTIVE,
    COMPACT,
    LEFT_BEHIND,
    OPEN,
    STATE,
    Event,
    cancel_deferred,
    close_open_spans,
    defer_flusher,
    events_represented,
    open_horizons,
    take,
    take_series,
)
from streamscope.events.bus import after_fork_in_child as _bus_after_fork
from streamscope.events.metrics import (
    Aggregator,
    MetricsSnapshot,
    add_snapshot,
    forget_snapshot,
    merge,
    read_snapshots,
    write_snapshot,
)
from streamscope.events.sinks import EventBatch, Parcel, Sink, SinkFactory, parse_specs, resolve, write_spool

METRICS_DIR_ENV = "STREAMSCOPE_METRICS_DIR"
ANCHOR_ENV = "STREAMSCOPE_TRACE_CLOCK_ANCHOR"
#: Sink used when tracing is on and no sink is named (a dotted path: ``events`` does not import ``trace``).
DEFAULT_SINK = "streamscope.trace.litracer:LitracerFileSink"


class Flusher:
    """The recorder's daemon flusher thread, started with ``_thread``: in a freshly forked DataLoader worker a
    ``threading.Thread`` costs three times as much to start (its objects' pages are copied on first write) and
    its start waits until the thread runs, on the way to the worker's first batch.

    ``target(flusher)`` runs on the thread and loops on :meth:`wait` until it returns True.
    """

    __slots__ = ("_stop", "_done", "ident")

    def __init__(self, target: Callable[[Flusher], None]) -> None:
        self._stop = _thread.allocate_lock()
        self._stop.acquire()  # released by stop()
        self._done = _thread.allocate_lock()
        self._done.acquire()  # released when the thread ends
        self.ident: int | None = None
        _thread.start_new_thread(self._main, (target,))

    def _main(self, target: Callable[[Flusher], None]) -> None:
        self.ident = threading.get_ident()
        try:
            target(self)
        finally:
            self._done.release()

    def wait(self, timeout: float) -> bool:
        """Sleep up to ``timeout`` seconds; True once :meth:`stop` was called."""
        if self._stop.acquire(timeout=timeout):
            self._stop.release()  # stays released: every later wait returns at once
            return True
        return False

    def stop(self) -> None:
        """Ask the thread to end (it finishes its current flush first). Idempotent."""
        try:
            self._stop.release()
        except RuntimeError:  # already stopped
            pass

    def stopping(self) -> bool:
        return not self._stop.locked()

    def is_alive(self) -> bool:
        return self._done.locked()

    def join(self, timeout: float) -> None:
        if self._done.acquire(timeout=timeout):
            self._done.release()


class Recorder:
    """State of the recorder in this process (one instance, :data:`RECORDER`)."""

    def __init__(self) -> None:
        self.factories: list[SinkFactory] = []
        self._reset()

    def _reset(self) -> None:
        self.pid = os.getpid()
        self.trace_cats: frozenset[str] = frozenset()
        self.metric_cats: frozenset[str] = frozenset()
        self.flush_interval = 5.0
        self.lock = threading.RLock()
        self.agg = Aggregator()
        self.sinks: list[tuple[str, Sink]] | None = None
        self.held: list[Event] = []  # events kept for the next flush (see _hold_back)
        self.hold_max_ns = 30_000_000_000
        # the hand-over knobs, read when tracing is configured: a fresh worker reading the environment pays
        # first-write page faults for it (~0.14 ms a read, measured), on its way to exit
        self.handover_max = float(config.KNOBS["trace_handover_max_events"].default)
        self.handover_wait = float(config.KNOBS["trace_handover_wait"].default)
        self.sink_errors = 0
        self.reported: set[str] = set()
        self.thread: Flusher | None = None
        self.tick = 1.0  # seconds between the flusher's flushes, as of the last configure (see _tick)
        # set around the fork of DataLoader workers that live one epoch and hand their events over: such a child
        # defers its flusher thread (see after_fork_in_child)
        self.defer_in_children = False
        self._due_ns = 0  # when a flusher deferred in this forked child is due (see after_fork_in_child)
        self.offset_ns = time.time_ns() - time.monotonic_ns()
        self.metrics_dir: str | None = None
        self.owner = False
        self.started = False
        self.closed = False
        self.stuck: set[int] = set()  # done processes whose snapshot file could not be removed
        self.retired = MetricsSnapshot()  # the numbers of this run's processes that are done
        self._late_registered = False
        self._last_take = 0
        self._published_events = -1
        self._published_dropped = -1
        self.token = time.monotonic_ns()  # this process's start: tells two processes with one pid apart
        self._handed: tuple[int, int, int] | None = None  # numbers of the last snapshot handed over
        self._unconfirmed: tuple[Parcel, Callable[[], bool | None], int] | None = None  # see hand_over
        self.adopted: deque[Parcel] = deque()  # other processes' events this process writes (see adopt)
        self.parcel_snaps: dict[int, dict[str, Any]] = {}  # the newest snapshot each parcel brought, by pid

    # --- configuration -------------------------------------------------------------------------------

    def configure(
        self,
        trace_cats: frozenset[str],
        metric_cats: frozenset[str] = frozenset(),
        flush_interval: float | None = None,
    ) -> None:
        """Set what is recorded and start (or keep) the flusher. Never raises for sink problems."""
        with self.lock:
            cancel_deferred()  # a deferred flusher is started below, or not needed any more
            if self.started and self.sinks is not None:
                self._flush_locked(hold=False)
                self._shutdown_sinks()
            self.trace_cats = frozenset(trace_cats)
            self.metric_cats = frozenset(metric_cats)
            if flush_interval is not None:
                self.flush_interval = max(0.01, float(flush_interval))
            else:
                self.flush_interval = max(0.01, self._knob("trace_flush_interval"))
            STATE.cap = max(1, int(self._knob("trace_buffer_events")))
            self.hold_max_ns = max(0, int(self._knob("trace_hold_max") * 1e9))
            self.handover_max = self._knob("trace_handover_max_events")
            self.handover_wait = self._knob("trace_handover_wait")
            self.tick = self._tick()
            wanted = self.trace_cats | self.metric_cats
            compact = _compact_cats()
            COMPACT.difference_update(COMPACT - compact)
            COMPACT.update(compact)
            ACTIVE.difference_update(ACTIVE - wanted)
            ACTIVE.update(wanted)
            self.sinks = None
            if wanted:
                self._ensure_run_env()
                self.closed = False
                self.started = True
                self._start_thread()
            elif self.started:  # switched off: write what we have, stop the flusher
                self._flush_locked(hold=False)
                self._shutdown_sinks()
                if self.thread is not None:
                    self.thread.stop()

    def _knob(self, name: str) -> float:
        """A numeric tracer knob; a bad environment value is reported once and its default used."""
        try:
            return float(config.get(name))
        except Exception as exc:
            self._report(f"knob:{name}", f"{exc}; using the default {config.KNOBS[name].default!r}")
            return float(config.KNOBS[name].default)

    def _late_repair(self) -> None:
        """Runs after multiprocessing terminated the daemonic children (DataLoader workers) at exit."""
        if self.pid != os.getpid() or not self.owner:
            return
        with self.lock:
            try:
                self._repair_dead_workers()
                self._shutdown_sinks()
            except Exception as exc:
                self._report("late-repair", f"could not close the spans of dead workers: {exc}")
            if self.metrics_dir:
                shutil.rmtree(self.metrics_dir, ignore_errors=True)

    def _ensure_run_env(self) -> None:
        raw = config.get("trace_clock_anchor")
        try:
            self.offset_ns = int(raw) if raw else self.offset_ns
        except ValueError:
            pass
        if not raw:
            os.environ[ANCHOR_ENV] = str(self.offset_ns)
        d = config.get("metrics_dir")
        if d and os.path.isdir(d):
            self.metrics_dir = d
        else:
            if self.owner and self.metrics_dir and self.metrics_dir != d:
                shutil.rmtree(self.metrics_dir, ignore_errors=True)  # our previous run's directory
            try:
                self.metrics_dir = tempfile.mkdtemp(prefix="streamscope-metrics-")
                self.agg = Aggregator()  # a new run: metrics start from zero
                self.retired = MetricsSnapshot()
                self.parcel_snaps = {}
                self._published_events = self._published_dropped = -1
                os.environ[METRICS_DIR_ENV] = self.metrics_dir
                self.owner = True
                # multiprocessing's exit handler terminates daemonic children (DataLoader workers still
                # running at exit) and then runs finalizers of negative priority: close their spans then.
                if not self._late_registered:
                    mp_util.Finalize(None, self._late_repair, exitpriority=-10)
                    self._late_registered = True
            except OSError as exc:
                self._report("metrics-dir", f"cannot create a metrics directory: {exc}")
                self.metrics_dir = None

    def _start_thread(self, flush_first: bool = False) -> None:
        cancel_deferred()
        if self.thread is not None and self.thread.is_alive() and not self.thread.stopping():
            return
        self.thread = Flusher(self._run_now if flush_first else self._run)

    def _run_now(self, flusher: Flusher) -> None:
        self._run(flusher, first_wait=0.0)

    def _wake(self) -> None:
        """Start the flusher deferred in this forked child (see :meth:`after_fork_in_child`). Once its tick is
        due it flushes at once; started earlier (a ``B``/``E`` span began) it waits for its first tick as usual,
        so a worker that hands its events over still writes nothing itself."""
        with self.lock:
            if self.started and not self.closed and self.pid == os.getpid():
                self._start_thread(flush_first=time.monotonic_ns() >= self._due_ns)

    def _tick(self) -> float:
        try:
            mi = float(config.get("metrics_interval"))
        except Exception:
            mi = 1.0
        return max(0.01, min(self.flush_interval, mi))

    def _run(self, flusher: Flusher, first_wait: float | None = None) -> None:
        wait = self._tick() if first_wait is None else first_wait
        while not flusher.wait(wait):
            try:
                with self.lock:
                    if self.closed:  # shut down while this tick began: nothing more to write
                        break
                    self._flush_locked(repair=True)
            except Exception as exc:  # the flusher must survive anything
                self._report("flusher", f"flusher error: {type(exc).__name__}: {exc}")
            # a buffer that filled past an eighth of its bound during the tick is drained sooner next time
            wait = self._tick() if self._last_take < STATE.cap // 8 else max(0.01, self._tick() / 8)

    # --- flushing ------------------------------------------------------------------------------------

    def flush(self, publish: bool = True, repair: bool = True) -> None:
        """Take everything buffered, aggregate it, export it, publish the snapshot (synchronously).

        In the process that owns the run this also closes the spans of dead workers and retires the snapshots of
        done ones (see module doc), unless ``repair`` is False. ``publish=False`` leaves the metrics snapshot to
        the next tick or to exit.
        """
        with self.lock:
            self._flush_locked(repair=repair, publish=publish)

    def _flush_locked(self, final: bool = False, repair: bool = False, hold: bool = True, publish: bool = True) -> None:
        open_now = OPEN.copy()
        traced = self._take(hold and not final)
        pieces = [(traced, None)] if traced else []
        adopted = self.adopted
        while adopted:
            parcel = adopted.popleft()
            if parcel.events and self.trace_cats:
                pieces.append((parcel.events, parcel.env))
            if parcel.snapshot is not None:
                self.parcel_snaps[parcel.pid] = _newest(self.parcel_snaps.get(parcel.pid), parcel.snapshot)
        if pieces:
            self._export_pieces(pieces)
        if self.owner and (final or repair):
            self._repair_dead_workers()
        if publish or final:
            self._publish(open_now, final)

    def _take(self, hold: bool) -> list[Event]:
        """Take everything buffered (the series' complete events too) and aggregate it; the traced events.

        ``hold``: events behind a complete event still open on their thread stay for the next take.
        """
        take_series()  # the loops' complete events join the buffer
        events = take()
        if self.held:
            events = self.held + events
            self.held = []
        if hold and events:
            events = self._hold_back(events)
        self._last_take = len(events)
        if not events:
            return []
        self.agg.add(events)
        tc = self.trace_cats
        if not tc:
            return []
        return events if tc >= self.metric_cats else [e for e in events if e[2] in tc]

    def _hold_back(self, events: list[Event]) -> list[Event]:
        """Keep for the next flush the events a thread recorded after the begin of a complete event still open
        there (its ``X`` is written when it ends): so every thread's events reach the sinks in begin order.

        A horizon older than the ``trace_hold_max`` knob is ignored (a span abandoned without exit must not hold its
        thread's events back for ever).
        """
        horizons = open_horizons()
        if not horizons:
            return events
        oldest = time.monotonic_ns() - self.hold_max_ns
        horizons = {tid: t0 for tid, t0 in horizons.items() if t0 >= oldest}
        if not horizons:
            return events
        out: list[Event] = []
        held = self.held
        for e in events:
            h = horizons.get(e[5])
            (out if h is None or e[3] < h else held).append(e)
        return out

    def _export(self, events: list[Event], env: dict[str, int] | None = None) -> None:
        if events:
            self._export_pieces([(events, env)])

    def _export_pieces(self, pieces: list[tuple[list[Event], dict[str, int] | None]]) -> None:
        """Hand each piece (events of one process, its rank/worker fields; None: this process's) to the sinks.

        A sink that takes mixed batches (``mixed_batches``) gets them all in one: one encoding and one write
        for this process's events and the parcels it adopted (after a DataLoader's fork each call's fixed
        costs are paid again in page faults).
        """
        sinks = self._get_sinks()
        if not sinks:
            return
        own = context.env_fields()
        batches = [EventBatch(events, self.offset_ns, own if env is None else env) for events, env in pieces if events]
        mixed = None
        for spec, sink in sinks:
            todo = batches
            if len(batches) > 1 and getattr(sink, "mixed_batches", False):
                if mixed is None:
                    mixed = _mixed(batches)
                todo = [mixed]
            for batch in todo:
                try:
                    sink.export(batch)
                except Exception as exc:
                    self.sink_errors += 1
                    self._report(
                        f"export:{spec}:{type(exc).__name__}", f"sink {spec} failed: {type(exc).__name__}: {exc}"
                    )

    def open_sinks(self) -> None:
        """Build this process's sinks now rather than at the first export (``enable_tracer`` does, so the first
        flush of a run does not pay for opening the log). Problems are reported, not raised, as at export."""
        with self.lock:
            if self.trace_cats:
                self._get_sinks()

    def _get_sinks(self) -> list[tuple[str, Sink]]:
        if self.sinks is not None:
            return self.sinks
        sinks: list[tuple[str, Sink]] = []
        names = parse_specs(config.get("trace_sinks"))
        if not names and not self.factories:
            names = [DEFAULT_SINK]  # tracing switched on by the environment alone (e.g. LITDATA_TRACE_LEVEL)
        specs: list[tuple[str, SinkFactory | None]] = [(s, None) for s in names]
        specs += [(getattr(f, "__qualname__", repr(f)), f) for f in self.factories]
        for spec, factory in specs:
            try:
                sinks.append((spec, (factory or resolve(spec))()))
            except Exception as exc:
                self.sink_errors += 1
                self._report(f"create:{spec}", f"sink {spec} could not be created: {type(exc).__name__}: {exc}")
        self.sinks = sinks
        return sinks

    def _shutdown_sinks(self) -> None:
        for spec, sink in self.sinks or []:
            try:
                sink.shutdown()
            except Exception as exc:
                self.sink_errors += 1
                self._report(f"shutdown:{spec}", f"sink {spec} failed to shut down: {type(exc).__name__}: {exc}")
        self.sinks = None

    def _publish(self, open_now: dict[int, Any], final: bool) -> None:
        d = self.metrics_dir
        if not d:
            return
        if not final and self.agg.events == self._published_events and STATE.dropped == self._published_dropped:
            return
        if self.owner and not final:
            return  # nobody reads the owner's file while it runs (metrics() merges its live numbers): final only
        if final and self._handed == (self.agg.events, STATE.dropped, self.sink_errors):
            return  # nothing since the snapshot handed over (so no span was open then): the receiver has it all
        snap = self._snapshot(open_now, final)
        try:
            write_snapshot(d, snap)
            self._published_events = self.agg.events
            self._published_dropped = STATE.dropped
        except Exception as exc:  # full disk, removed directory, unserialisable field
            self._report(f"publish:{type(exc).__name__}", f"metrics snapshot not written to {d}: {exc}")

    def _snapshot(self, open_now: dict[int, Any], final: bool) -> dict[str, Any]:
        opened = [[sp.name, sp.cat, sp.tid, dict(sp.fields)] for sp in open_now.values()] if not final else []
        return self.agg.snapshot(
            self.pid,
            dropped=STATE.dropped,
            sink_errors=self.sink_errors,
            final=final,
            open=opened,
            env=context.env_fields(),
            token=self.token,
        )

    def _repair_dead_workers(self) -> None:
        """Close the spans that dead processes of this run left open (their last snapshot lists them), and retire
        the snapshots of processes that are done.

        A done process (final snapshot, or dead and repaired here) is added to :attr:`retired` and its file is
        removed: a run with non-persistent DataLoader workers leaves two processes per epoch behind, and every
        flush then reads only the files of the processes still running (and a later process that gets the same
        pid starts a file of its own).
        """
        if not self.metrics_dir:
            return
        now = time.monotonic_ns()
        files = read_snapshots(self.metrics_dir)
        for pid in set(files) | set(self.parcel_snaps):
            if pid == self.pid or pid in self.stuck:
                continue
            file, handed = files.get(pid), self.parcel_snaps.get(pid)
            if not _same_process(file, handed):  # the older of two processes with this pid is gone
                if _older(file, handed):
                    self._retire(pid, file, now, remove_file=True)
                    file = None
                else:
                    self._retire(pid, handed, now, drop_handed=True)
                    handed = None
            snap = _newest(file, handed)
            if snap is None or (not snap.get("final") and pid_alive(pid)):
                continue
            self._retire(pid, snap, now, remove_file=file is not None, drop_handed=handed is not None)

    def _retire(
        self, pid: int, snap: dict[str, Any], now: int, remove_file: bool = False, drop_handed: bool = False
    ) -> None:
        """Add a done process's numbers to :attr:`retired` (closing what it left open) and forget its snapshot
        (its file, the one a parcel brought)."""
        if not snap.get("final"):
            self._close_for(pid, snap, now)
        if remove_file and self.metrics_dir:
            path = os.path.join(self.metrics_dir, f"{pid}.json")
            try:
                os.remove(path)
            except OSError:
                self.stuck.add(pid)  # left in place: never added twice
            forget_snapshot(path)
        if drop_handed:
            self.parcel_snaps.pop(pid, None)
        add_snapshot(self.retired, pid, snap)

    def _close_for(self, pid: int, snap: dict[str, Any], now: int) -> None:
        """Write an ``E`` (``aborted: 1``) for every span a dead process left open; count them in ``snap``."""
        fixes: list[Event] = []
        env = snap.get("env") or {}
        for name, cat, tid, fields in snap.get("open") or []:
            f = dict(fields)
            f.update(env)
            f["aborted"] = 1
            fixes.append(("E", str(name), str(cat), now, pid, int(tid), f))
        if fixes:
            self._export([e for e in fixes if e[2] in self.trace_cats])
        snap["final"] = True
        snap["open"] = []
        spans = snap.setdefault("spans", {})
        for e in fixes:
            st = spans.setdefault(f"{e[2]}/{e[1]}", {})
            st["aborted"] = int(st.get("aborted", 0)) + 1

    # --- hand-over ---------------------------------------------------------------------------------

    def hand_over(self, tag: int = -1, received: Callable[[], bool | None] | None = None) -> Parcel:
        """Take this process's buffered events for another process of the run to write (see :class:`Parcel`).

        They are aggregated into this process's metrics here. Events a thread recorded behind a complete event
        still open there stay for this process's next flush, as in :meth:`flush`. More traced events than the
        ``trace_handover_max_events`` knob: this process writes them itself (the parcel is then empty).

        ``received()``, asked at this process's exit, tells whether the receiver got the parcel: True, False
        (the receiver abandoned it in flight, e.g. a loop that left its epoch early: this process then writes
        the events and its final metrics snapshot itself), or None while the receiver has not said (asked again
        every 5 ms, for at most the ``trace_handover_wait`` knob, while the parent process lives).
        """
        with self.lock:
            traced = self._take(hold=True)
            if traced and events_represented(traced) > self.handover_max:
                self._export(traced)
                traced = []
            snap = None
            if self.metrics_dir:
                snap = self._snapshot(OPEN.copy(), final=False)
                self._handed = (self.agg.events, STATE.dropped, self.sink_errors)
            parcel = Parcel(self.pid, traced, context.env_fields() if traced else {}, snap, tag)
            if received is not None:
                self._unconfirmed = (parcel, received, os.getppid())
            return parcel

    def _reclaim(self) -> None:
        """At exit: the last parcel, unless its receiver has taken it.

        * Abandoned (e.g. a loop that left its epoch early): its events are written here, and the final snapshot.
        * Not taken yet: torch tells an exhausted worker to exit as soon as its stop arrives, which can be before
          the loop has taken a parcel queued behind a later batch. The parcel is left in the run directory
          (:func:`~streamscope.events.sinks.write_spool`) and this process exits at once: the receiver drops the
          file once it has the parcel, or writes what it holds if it never takes the parcel. Without a run
          directory this process waits for the answer instead (every 5 ms, for at most the
          ``trace_handover_wait`` knob, while its parent lives).
        """
        pending, self._unconfirmed = self._unconfirmed, None
        if pending is None:
            return
        parcel, received, parent = pending
        got = _ask(received)
        if got is None and self.metrics_dir:
            try:
                write_spool(self.metrics_dir, parcel)
                return
            except Exception as exc:  # full disk, removed directory: wait for the answer instead
                self._report("spool", f"trace parcel not left in {self.metrics_dir}: {type(exc).__name__}: {exc}")
        deadline = time.monotonic() + self.handover_wait
        while got is None and time.monotonic() <= deadline and os.getppid() == parent:
            time.sleep(0.005)  # a parcel the receiver holds but has not taken yet (e.g. behind a later batch)
            got = _ask(received)
        if not got:
            if parcel.events and self.trace_cats:
                self._export(parcel.events, parcel.env)
            self._handed = None  # its snapshot did not arrive either: the final one is written

    def adopt(self, parcel: Parcel) -> None:
        """Take ``parcel`` from another process of the run: its events go to this process's sinks (when it
        traces), its metrics snapshot stands for the sender's file until a newer one comes; at the next flush.
        Any thread.
        """
        if parcel.events or parcel.snapshot is not None:
            self.adopted.append(parcel)

    # --- exit ----------------------------------------------------------------------------------------

    def shutdown(self) -> None:
        """Close open spans, flush, shut sinks down and publish the final snapshot. Idempotent."""
        if not self.started or self.closed or self.pid != os.getpid():
            return
        cancel_deferred()  # nothing is started on the way out (closing open spans records events)
        t = self.thread
        if t is not None:
            # The flusher ends at its next wake-up. It is not waited for: a flush it is in holds the lock, taken
            # below, and after that it finds the recorder closed. (Waking it to join cost an exiting worker
            # about 1 ms on a busy machine, measured.)
            t.stop()
        with self.lock:
            if self.closed:
                return
            self.closed = True
            try:
                self._reclaim()
                close_open_spans()
                self._flush_locked(final=True)
                for _spec, sink in self.sinks or []:
                    try:
                        sink.force_flush()
                    except Exception:
                        self.sink_errors += 1
                self._shutdown_sinks()
            except Exception as exc:
                self._report("shutdown", f"tracer shutdown error: {type(exc).__name__}: {exc}")
            if STATE.dropped:
                self._report(
                    "dropped",
                    f"{STATE.dropped} trace events dropped in pid {self.pid}: the buffer "
                    f"(trace_buffer_events={STATE.cap}) was full",
                )
            # the run directory is removed by _late_repair, after the workers are gone

    def after_fork_in_child(self) -> None:
        """Fresh state in a forked child; restart the flusher if anything is active.

        A child forked while :attr:`defer_in_children` is set (a DataLoader's workers that live one epoch and
        hand their events over, see :func:`streamscope.events.deferred_flusher_in_children`) does not start its
        flusher thread here: it starts one tick later, at the first event recorded or :func:`~streamscope.events.
        bus.poll` after that, or at once when a ``B``/``E`` span begins (:func:`~streamscope.events.bus.
        defer_flusher`). A worker of a short epoch never starts one; starting a thread in a freshly forked
        process costs 0.15-0.35 ms (measured).

        The parent's state is left behind as it is (:data:`~streamscope.events.bus.LEFT_BEHIND`) and the child
        starts from an empty attribute dict: resetting attributes one by one released the parent's aggregator,
        retired snapshots and parcels object by object, each release a write to a page shared with the parent.
        In the 40th traced epoch a DataLoader worker took 4.9-5.3 ms from fork to its worker loop, now 2.9-3.0 ms
        (the retired snapshots grow by two workers an epoch). A recorder that never started (tracing and metrics
        never on in this process) only takes the new pid.
        """
        _bus_after_fork()
        context.after_fork_in_child()
        if not self.started:  # nothing was ever recorded here: the state is as new, but for the process
            self.pid, self.token, self.lock = os.getpid(), time.monotonic_ns(), threading.RLock()
            return
        old = self.__dict__
        LEFT_BEHIND.append(old)
        self.__dict__ = {"factories": old["factories"]}
        self._reset()
        self.trace_cats, self.metric_cats, self.flush_interval = (
            old["trace_cats"],
            old["metric_cats"],
            old["flush_interval"],
        )
        self.offset_ns, self.metrics_dir, self.hold_max_ns = old["offset_ns"], old["metrics_dir"], old["hold_max_ns"]
        self.handover_max, self.handover_wait = old["handover_max"], old["handover_wait"]
        self.tick = old["tick"]
        if old["started"] and (self.trace_cats or self.metric_cats):
            self.started = True
            if old["defer_in_children"]:
                self._due_ns = time.monotonic_ns() + int(self.tick * 1e9)
                defer_flusher(self._due_ns, self._wake)
            else:
                self._start_thread()

    # --- reporting -----------------------------------------------------------------------------------

    def _report(self, key: str, message: str) -> None:
        """Say it once per process on stderr (never raises)."""
        if key in self.reported:
            return
        self.reported.add(key)
        try:
            sys.stderr.write(f"streamscope tracer: {message}\n")
        except Exception:
            pass

    def snapshot_all(self) -> MetricsSnapshot:
        """Flush this process and merge its numbers with every snapshot in the run directory."""
        with self.lock:
            self._flush_locked()
            own = self.agg.snapshot(
                self.pid, dropped=STATE.dropped, sink_errors=self.sink_errors, final=False, alive=True
            )
            snaps = read_snapshots(self.metrics_dir) if self.metrics_dir else {}
            for pid, handed in self.parcel_snaps.items():
                snaps[pid] = _current(snaps.get(pid), handed)  # type: ignore[assignment]
        snaps[self.pid] = own
        return merge(snaps, base=self.retired)


RECORDER = Recorder()


def _older(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """True when snapshot ``a`` is from a process that started before ``b``'s."""
    try:
        return int(a.get("token", 0)) < int(b.get("token", 0))
    except (TypeError, ValueError):
        return False


def _same_process(a: dict[str, Any] | None, b: dict[str, Any] | None) -> bool:
    """False when two snapshots of one pid come from two processes (different start times)."""
    return a is None or b is None or a.get("token") == b.get("token")


def _current(file: dict[str, Any] | None, handed: dict[str, Any] | None) -> dict[str, Any] | None:
    """The snapshot that stands for the process holding the pid: the later of one process's two, or the later
    process's when the pid was taken again."""
    if not _same_process(file, handed):
        return handed if _older(file, handed) else file  # type: ignore[arg-type]
    return _newest(file, handed)


def _newest(a: dict[str, Any] | None, b: dict[str, Any] | None) -> dict[str, Any] | None:
    """The later of two snapshots of one process (its numbers only grow; a final one is its last)."""
    if a is None or b is None:
        return a if b is None else b

    def rank(s: dict[str, Any]) -> tuple[int, ...]:
        return (
            int(s.get("events", 0)),
            int(s.get("dropped", 0)),
            int(s.get("sink_errors", 0)),
            int(bool(s.get("final"))),
        )

    return b if rank(b) > rank(a) else a


def configure_from_env() -> None:
    """Activate from ``STREAMSCOPE_TRACE_*`` / ``LITDATA_TRACE_*`` and ``STREAMSCOPE_METRICS_LEVEL``.

    A bad value is reported on stderr and tracing stays off: the data path must not fail to import.
    """
    try:
        cats = config.get("trace_categories")
        trace = vocab.resolve(config.get("trace_level"), cats if cats.strip() else None)
        metric = _metric_cats(config.get("metrics_level"))
    except Exception as exc:
        sys.stderr.write(f"streamscope tracer: disabled, bad environment: {exc}\n")
        return
    if trace or metric:
        RECORDER.configure(trace, metric)


def _compact_cats() -> frozenset[str]:
    try:
        return vocab.parse_categories(config.get("trace_compact_categories"))
    except Exception as exc:
        sys.stderr.write(f"streamscope tracer: trace_compact_categories ignored: {exc}\n")
        return frozenset()


def _metric_cats(raw: str) -> frozenset[str]:
    raw = (raw or "").strip()
    if not raw:
        return frozenset()
    if raw.lower() in vocab.LEVELS:
        return vocab.LEVELS[raw.lower()]
    return vocab.parse_categories(raw)


def _exit_hook() -> None:
    try:
        RECORDER.shutdown()
    except Exception:
        traceback.print_exc()


def _ask(received: Callable[[], bool | None]) -> bool | None:
    try:
        return received()
    except Exception:
        return False


def _mixed(batches: list[EventBatch]) -> EventBatch:
    """One batch holding the events of ``batches`` (each of one process; the first's fields are ``env``)."""
    first = batches[0]
    envs: dict[int, dict[str, int]] = {}
    events: list[Event] = []
    for b in batches:
        events += b.events
        if b is not first:
            envs.update((pid, b.env) for pid in {e[4] for e in b.events})
    return EventBatch(events, first.epoch_offset_ns, first.env, envs)


def _before_fork() -> None:
    if ACTIVE:  # tracing or metrics on (off: a fork costs the tracer nothing)
        try:
            context.before_fork()
        except Exception:  # a fork must never fail for the tracer
            pass


def _install_hooks() -> None:
    os.register_at_fork(
        before=_before_fork, after_in_parent=context.after_fork_in_parent, after_in_child=RECORDER.after_fork_in_child
    )
    atexit.register(_exit_hook)
    reg = getattr(threading, "_register_atexit", None)
    if reg is not None:
        try:
            reg(_exit_hook)  # runs in threading._shutdown: at interpreter exit and in multiprocessing children
        except RuntimeError:
            pass


_install_hooks()
