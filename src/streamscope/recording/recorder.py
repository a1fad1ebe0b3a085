"""The per-process recorder: ties the event bus's roles together over the life of a process.

The roles live in modules named for them; the recorder owns one of each and runs them in order:

* :mod:`.flusher`: the background thread that wakes every tick;
* :mod:`.processor`: takes the buffer and hands the traced events to the exporters (:mod:`.exporters`);
* :mod:`.metrics`: the aggregator every taken event is folded into; :mod:`.snapshots`: what is published;
* :mod:`.handover`: parcels of events and snapshots one process of the run hands to another;
* :mod:`.collect`: the run's other processes as their owner sees them (retired, repaired when dead).

Lifecycle of one process:

* :meth:`Recorder.configure` (``events.configure``, called by ``enable_tracer`` or
  :func:`~streamscope.recording.setup.configure_from_env`; never at import) installs the process hooks
  (:mod:`.process_hooks`), sets the active categories, makes sure
  the run has a clock anchor and a metrics directory (both passed to child processes through the environment)
  and starts the flusher thread.
* Every ``metrics_interval`` (or ``flush_interval`` if shorter) the flusher takes all buffered events, folds
  them into the aggregator, hands the traced ones to the exporters and publishes the metrics snapshot.
* After ``fork`` the child starts from scratch: empty buffer, fresh locks, fresh aggregator, its own exporters
  (built again from their factories) and its own flusher; the parent's unflushed events are dropped there so
  nothing is written twice.
* At exit (``threading``'s shutdown hook, which also runs when a multiprocessing child, e.g. a DataLoader
  worker, returns and then calls ``os._exit``; and ``atexit``) every open span gets an ``E`` with
  ``aborted: 1``, the buffer is flushed, exporters are shut down and a final snapshot is published. The process
  that created the run directory also closes, on their behalf, the spans that dead workers (killed, e.g. by
  SIGKILL) left open according to their last snapshot.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from streamscope._core import config
from streamscope.events import context, instruments
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
)
from streamscope.events.bus import after_fork_in_child as _bus_after_fork
from streamscope.events.exporters import FLUSH_TIMEOUT_MILLIS, Sink, SinkFactory
from streamscope.events.series import after_fork_in_child as _series_after_fork
from streamscope.recording import attribution, process_hooks
from streamscope.recording.category_knobs import compact_categories
from streamscope.recording.collect import RunCollector
from streamscope.recording.flusher import Flusher
from streamscope.recording.handover import Parcel, Relay, spooled
from streamscope.recording.metrics import Aggregator
from streamscope.recording.processor import DEFAULT_SINK, BatchProcessor
from streamscope.recording.report import Reporter
from streamscope.recording.snapshots import MetricsSnapshot, write_snapshot

METRICS_DIR_ENV = "STREAMSCOPE_METRICS_DIR"
ANCHOR_ENV = "STREAMSCOPE_TRACE_CLOCK_ANCHOR"

__all__ = ["ANCHOR_ENV", "DEFAULT_SINK", "METRICS_DIR_ENV", "RECORDER", "Flusher", "Recorder"]


class Recorder:
    """State of the recorder in this process (one instance, :data:`RECORDER`).

    Attributes:
        processor: the batch processor and its exporters.
        relay: the parcels handed over and adopted.
        collector: the run's other processes (in the owner).
        agg: this process's metrics aggregator.
        report: says each problem once on stderr.
    """

    def __init__(self) -> None:
        self._reset([])

    def _reset(self, factories: list[SinkFactory]) -> None:
        self.pid = os.getpid()
        self.trace_cats: frozenset[str] = frozenset()
        self.metric_cats: frozenset[str] = frozenset()
        self.flush_interval = 5.0
        self.lock = threading.RLock()
        self.report = Reporter()
        self.processor = BatchProcessor(self.report, factories)
        self.relay = Relay()
        self.collector = RunCollector()
        self.agg = Aggregator()
        # the hand-over knobs, read when tracing is configured: a fresh worker reading the environment pays
        # first-write page faults for it (~0.14 ms a read, measured), on its way to exit
        self.handover_max = float(config.KNOBS["trace_handover_max_events"].default)
        self.handover_wait = float(config.KNOBS["trace_handover_wait"].default)
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
        self._late_registered = False
        self._published_events = -1
        self._published_dropped = -1
        self._published_version = -1
        self.token = time.monotonic_ns()  # this process's start: tells two processes with one pid apart

    # --- the roles' state, by the names it has always had ----------------------------------------------

    @property
    def factories(self) -> list[SinkFactory]:
        return self.processor.factories

    @property
    def sinks(self) -> list[tuple[str, Sink]] | None:
        return self.processor.sinks

    @property
    def sink_errors(self) -> int:
        return self.processor.errors

    @property
    def hold_max_ns(self) -> int:
        return self.processor.hold_max_ns

    @property
    def parcel_snaps(self) -> dict[int, dict[str, Any]]:
        return self.collector.parcel_snaps

    @property
    def retired(self) -> MetricsSnapshot:
        return self.collector.retired

    @property
    def adopted(self) -> deque[Parcel]:
        return self.relay.adopted

    def _report(self, key: str, message: str) -> None:
        """Say it once per process on stderr (never raises)."""
        self.report(key, message)

    # --- configuration -------------------------------------------------------------------------------

    def configure(
        self,
        trace_cats: frozenset[str],
        metric_cats: frozenset[str] = frozenset(),
        flush_interval: float | None = None,
    ) -> None:
        """Set what is recorded and start (or keep) the flusher. Never raises for exporter problems."""
        process_hooks.install(self)
        process_hooks.mark_configured()
        if self.pid != os.getpid():  # a child forked before the hooks were installed: it starts afresh
            self.after_fork_in_child()
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
            self.processor.hold_max_ns = max(0, int(self._knob("trace_hold_max") * 1e9))
            self.handover_max = self._knob("trace_handover_max_events")
            self.handover_wait = self._knob("trace_handover_wait")
            self.tick = self._tick()
            wanted = self.trace_cats | self.metric_cats
            compact = compact_categories()
            COMPACT.difference_update(COMPACT - compact)
            COMPACT.update(compact)
            ACTIVE.difference_update(ACTIVE - wanted)
            ACTIVE.update(wanted)
            self.processor.sinks = None
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
                instruments.reset()
                self.collector = RunCollector()
                self._published_events = self._published_dropped = -1
                os.environ[METRICS_DIR_ENV] = self.metrics_dir
                self.owner = True
                # multiprocessing's exit handler terminates daemonic children (DataLoader workers still
                # running at exit) and then runs finalizers of negative priority: close their spans then.
                if not self._late_registered:
                    import multiprocessing.util as mp_util  # not at import: it registers an exit hook

                    mp_util.Finalize(None, self._late_repair, exitpriority=-10)
                    self._late_registered = True
            except OSError as exc:
                self._report("metrics-dir", f"cannot create a metrics directory: {exc}")
                self.metrics_dir = None

    # --- the flusher thread --------------------------------------------------------------------------

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
            wait = self._tick() if self.processor.last_take < STATE.cap // 8 else max(0.01, self._tick() / 8)

    # --- flushing ------------------------------------------------------------------------------------

    def flush(self, publish: bool = True, repair: bool = True) -> None:
        """Take everything buffered, aggregate it, export it, publish the snapshot (synchronously).

        In the process that owns the run this also closes the spans of dead workers and retires the snapshots of
        done ones (see :mod:`.collect`), unless ``repair`` is False. ``publish=False`` leaves the metrics
        snapshot to the next tick or to exit.
        """
        with self.lock:
            self._flush_locked(repair=repair, publish=publish)

    def force_flush(self, timeout_millis: int = FLUSH_TIMEOUT_MILLIS) -> bool:
        """Ask the exporters to push what they buffered; True when all did."""
        return self.processor.force_flush(timeout_millis)

    def _flush_locked(self, final: bool = False, repair: bool = False, hold: bool = True, publish: bool = True) -> None:
        open_now = OPEN.copy()
        traced = self._take(hold and not final)
        pieces: list[tuple[list[Event], dict[str, int] | None]] = [(traced, None)] if traced else []
        for parcel in self.relay.drain(bool(self.trace_cats), pieces):
            if parcel.snapshot is not None:
                self.collector.note(parcel.pid, parcel.snapshot)
        if pieces:
            self._export_pieces(pieces)
        if self.trace_cats:
            self.processor.tick()
        if self.owner and (final or repair):
            self._repair_dead_workers()
        if publish or final:
            self._publish(open_now, final)

    def _take(self, hold: bool) -> list[Event]:
        """Take everything buffered (the series' complete events too) and aggregate it; the traced events.

        ``hold``: events behind a complete event still open on their thread stay for the next take.
        """
        attribution.fold()  # this process's shares of the wait split and its rings' tails (metrics on)
        events = self.processor.take(hold)
        if not events:
            return []
        self.agg.add(events)
        tc = self.trace_cats
        if not tc:
            return []
        return events if tc >= self.metric_cats else [e for e in events if e[2] in tc]

    def _export(self, events: list[Event], env: dict[str, int] | None = None) -> None:
        self.processor.export(events, self.offset_ns, env)

    def _export_pieces(self, pieces: list[tuple[list[Event], dict[str, int] | None]]) -> None:
        self.processor.export_pieces(pieces, self.offset_ns)

    def _export_traced(self, events: list[Event]) -> None:
        """Repair events (see :mod:`.collect`), those of the traced categories."""
        self._export([e for e in events if e[2] in self.trace_cats])

    def open_sinks(self) -> None:
        """Build this process's exporters now rather than at the first export (``enable_tracer`` does, so the first
        flush of a run does not pay for opening the log). Problems are reported, not raised, as at export."""
        with self.lock:
            if self.trace_cats:
                self.processor.get_sinks()

    def _get_sinks(self) -> list[tuple[str, Sink]]:
        return self.processor.get_sinks()

    def _shutdown_sinks(self) -> None:
        self.processor.shutdown_sinks()

    # --- publishing ----------------------------------------------------------------------------------

    def _publish(self, open_now: dict[int, Any], final: bool) -> None:
        d = self.metrics_dir
        if not d:
            return
        version = instruments.VERSION  # counters can move with no new event (e.g. the wait split)
        if (
            not final
            and self.agg.events == self._published_events
            and STATE.dropped == self._published_dropped
            and version == self._published_version
        ):
            return
        if self.owner and not final:
            return  # nobody reads the owner's file while it runs (metrics() merges its live numbers): final only
        if final and self.relay.handed == (self.agg.events, STATE.dropped, self.sink_errors, version):
            return  # nothing since the snapshot handed over (so no span was open then): the receiver has it all
        snap = self._snapshot(open_now, final)
        try:
            write_snapshot(d, snap)
            self._published_events = self.agg.events
            self._published_dropped = STATE.dropped
            self._published_version = version
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
            values=instruments.collect(),
        )

    def _repair_dead_workers(self) -> None:
        """Close the spans that dead processes of this run left open and retire the done ones (:mod:`.collect`)."""
        d = self.metrics_dir
        if d:
            incoming = self.relay.incoming
            self.collector.repair(
                d, self.pid, time.monotonic_ns(), self._export_traced, lambda pid: pid in incoming or spooled(d, pid)
            )

    # --- hand-over -----------------------------------------------------------------------------------

    def hand_over(self, tag: int = -1, received: Callable[[], bool | None] | None = None) -> Parcel:
        """Take this process's buffered events for another process of the run to write (see :mod:`.handover`).

        They are aggregated into this process's metrics here. Events a thread recorded behind a complete event
        still open there stay for this process's next flush, as in :meth:`flush`. More traced events than the
        ``trace_handover_max_events`` knob: this process writes them itself (the parcel is then empty).

        ``received()``, asked at this process's exit, tells whether the receiver got the parcel: True, False
        (the receiver abandoned it in flight, e.g. a loop that left its epoch early: this process then writes
        the events and its final metrics snapshot itself), or None while the receiver has not said.
        """
        with self.lock:
            return self.relay.hand_over(self, tag, received)

    def adopt(self, parcel: Parcel) -> None:
        """Take ``parcel`` from another process of the run: its events go to this process's exporters (when it
        traces), its metrics snapshot stands for the sender's file until a newer one comes; at the next flush.
        Any thread.
        """
        self.relay.adopt(parcel)

    # --- exit ----------------------------------------------------------------------------------------

    def shutdown(self) -> None:
        """Close open spans, flush, shut exporters down and publish the final snapshot. Idempotent."""
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
                self.relay.reclaim(self)
                close_open_spans()
                self._flush_locked(final=True)
                self.processor.force_flush()
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

        The parent's state is left behind as it is (:data:`~streamscope.events.bus.LEFT_BEHIND`: the recorder's
        attributes and each role's) and the child starts from empty ones: resetting attributes one by one
        released the parent's aggregator, retired snapshots and parcels object by object, each release a write
        to a page shared with the parent. In the 40th traced epoch a DataLoader worker took 4.9-5.3 ms from fork
        to its worker loop, then 2.9-3.0 ms (the retired snapshots grow by two workers an epoch). A recorder that
        never started (tracing and metrics never on in this process) only takes the new pid.
        """
        _bus_after_fork()
        _series_after_fork()
        context.after_fork_in_child()
        instruments.after_fork_in_child()
        attribution.after_fork_in_child()
        if not self.started:  # nothing was ever recorded here: the state is as new, but for the process
            self.pid, self.token, self.lock = os.getpid(), time.monotonic_ns(), threading.RLock()
            return
        old = self.__dict__
        LEFT_BEHIND.append(old)
        LEFT_BEHIND.extend(old[k].__dict__ for k in ("processor", "relay", "collector"))
        self.__dict__ = {}
        self._reset(old["processor"].factories)
        self.trace_cats, self.metric_cats, self.flush_interval = (
            old["trace_cats"],
            old["metric_cats"],
            old["flush_interval"],
        )
        self.offset_ns, self.metrics_dir = old["offset_ns"], old["metrics_dir"]
        self.processor.hold_max_ns = old["processor"].hold_max_ns
        self.handover_max, self.handover_wait = old["handover_max"], old["handover_wait"]
        self.tick = old["tick"]
        if old["started"] and (self.trace_cats or self.metric_cats):
            self.started = True
            if old["defer_in_children"]:
                self._due_ns = time.monotonic_ns() + int(self.tick * 1e9)
                defer_flusher(self._due_ns, self._wake)
            else:
                self._start_thread()

    # --- reading -------------------------------------------------------------------------------------

    def snapshot_all(self) -> MetricsSnapshot:
        """Flush this process and merge its numbers with every snapshot in the run directory."""
        with self.lock:
            self._flush_locked()
            own = self.agg.snapshot(
                self.pid,
                dropped=STATE.dropped,
                sink_errors=self.sink_errors,
                final=False,
                alive=True,
                values=instruments.collect(),
            )
            return self.collector.merged(self.pid, own, self.metrics_dir)

    def read(self) -> MetricsSnapshot:
        """The run's metrics now, merged, without side effects: nothing is taken from the buffer, exported or
        published, and no file is read (the other processes' snapshots are those of the last scan, at the
        flusher's last tick). So this process's own events of the last tick (``metrics_interval``) are not in
        yet. The per-process map is left out."""
        with self.lock:
            opened = [[sp.name, sp.cat, 0, {}] for sp in OPEN.copy().values()]
            own = self.agg.snapshot(
                self.pid,
                dropped=STATE.dropped,
                sink_errors=self.sink_errors,
                final=False,
                alive=True,
                values=instruments.collect(),
                open=opened,
            )
            return self.collector.merged(self.pid, own, self.metrics_dir, scan=False, processes=False)


RECORDER = Recorder()
