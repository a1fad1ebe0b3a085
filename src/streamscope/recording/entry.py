"""The runtime's entry points: what users (through ``streamscope.api``), the engine and the event API call on it.

Each works on this process's :data:`~.recorder.RECORDER`. The event API's own entry points (``streamscope.events``
``configure``, ``configure_from_env``, ``ensure_metrics``, ``flush``, ``metrics_view``) call the ones here through
:class:`Runtime`, which :func:`streamscope.recording.install` hands to ``streamscope.events.set_runtime``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from streamscope.events import context, vocab
from streamscope.events.exporters import FLUSH_TIMEOUT_MILLIS, SinkFactory
from streamscope.events.view import MetricsView
from streamscope.recording.attribution import stage, staged_span
from streamscope.recording.handover import Parcel, take_spool
from streamscope.recording.recorder import RECORDER
from streamscope.recording.setup import configure_from_env
from streamscope.recording.snapshots import MetricsSnapshot
from streamscope.recording.views import build, node_rank

__all__ = [
    "Runtime",
    "add_sink",
    "adopt",
    "claim_spool",
    "configure",
    "configure_from_env",
    "deferred_flusher_in_children",
    "drop_spool",
    "ensure_metrics",
    "flush",
    "force_flush",
    "hand_over",
    "metrics_snapshot",
    "metrics_view",
    "remove_sink",
    "shutdown",
]


def configure(
    trace: frozenset[str] | set[str] = frozenset(),
    metrics: frozenset[str] | set[str] = frozenset(),
    flush_interval: float | None = None,
) -> None:
    """Set the traced and the metrics-only categories of this process and start the flusher.

    ``streamscope.enable_tracer`` is the user-facing way; this is the low-level one (``streamscope.events.configure``
    calls it). Once called, :func:`configure_from_env` leaves this process's configuration alone.
    """
    RECORDER.configure(frozenset(trace), frozenset(metrics), flush_interval)


def ensure_metrics(level: str = "chunk") -> None:
    """Switch metrics recording on at ``level``'s categories (metrics only: no trace log) unless what this process
    records already covers them; workers started from now on inherit it (``STREAMSCOPE_METRICS_LEVEL``). What an
    exporter that needs the metrics (the Prometheus endpoint, OpenTelemetry's collections) calls."""
    want = vocab.LEVELS[level]
    rec = RECORDER
    if rec.started and rec.pid == os.getpid() and want <= (rec.trace_cats | rec.metric_cats):
        return
    cats = rec.metric_cats | want
    os.environ["STREAMSCOPE_METRICS_LEVEL"] = ",".join(sorted(cats))  # workers, spawned ones too, inherit it
    configure(rec.trace_cats, cats, rec.flush_interval if rec.started else None)


def add_sink(factory: SinkFactory) -> None:
    """Register a sink factory (a zero-argument callable returning a :class:`Sink`) in this process.

    Forked children build their own instance from the factory; spawned processes need the
    ``STREAMSCOPE_TRACE_SINKS`` environment variable instead (see :mod:`streamscope.events.exporters`).
    """
    with RECORDER.lock:
        if factory not in RECORDER.factories:
            RECORDER.factories.append(factory)
        if RECORDER.sinks is not None:
            RECORDER._flush_locked(hold=False)
            RECORDER._shutdown_sinks()


def remove_sink(factory: SinkFactory) -> None:
    """Unregister a sink factory added with :func:`add_sink` (its instance is shut down)."""
    with RECORDER.lock:
        if factory in RECORDER.factories:
            RECORDER._flush_locked(hold=False)
            RECORDER.factories.remove(factory)
            RECORDER._shutdown_sinks()


def flush(publish: bool = True, repair: bool = True) -> None:
    """Hand everything buffered in this process (its series' complete events too) to the sinks and metrics now.

    ``publish=False``: the process's metrics snapshot file is left to the flusher's next tick or to exit.
    ``repair=False``: the run's done processes are retired (and the spans dead ones left open closed) at a later
    flush, e.g. once the workers now exiting are gone.
    """
    RECORDER.flush(publish, repair)
    RECORDER.force_flush()


def force_flush(timeout_millis: int = FLUSH_TIMEOUT_MILLIS) -> bool:
    """Ask this process's exporters to push what they buffered (each within ``timeout_millis``); True when all
    did. Does not take the buffer: :func:`flush` does both."""
    return RECORDER.force_flush(timeout_millis)


def hand_over(tag: int = -1, received: Callable[[], bool | None] | None = None) -> Parcel:
    """Take this process's buffered events for another process of the run to write (:class:`Parcel`).

    ``received()``, asked at exit, says whether the receiver got it: True, False (this process then writes them
    itself) or None (not yet: asked again, see :meth:`Recorder.hand_over`).
    """
    return RECORDER.hand_over(tag, received)


def adopt(parcel: Parcel) -> None:
    """Write another process's :class:`Parcel` to this process's sinks at the next flush (any thread)."""
    RECORDER.adopt(parcel)


def claim_spool(pid: int, adopt: bool = False) -> Parcel | None:
    """The parcel process ``pid`` of this run left at exit because nobody had taken it yet (None: it left
    none), removed from the run directory. Its receiver calls this once the sender is gone: it adopts the parcel
    only if it never took it otherwise. ``adopt``: adopt it here, before its file goes (a flush in between would
    see the sender's parcel nowhere and retire the sender on its older snapshot, to count it again later)."""
    d = RECORDER.metrics_dir
    if not d:
        return None
    try:
        return take_spool(d, pid, RECORDER.adopt if adopt else None)
    except Exception as exc:  # a damaged file (it is renamed into place whole, so only from outside): reported
        RECORDER._report(f"spool:{pid}", f"trace parcel of pid {pid} unreadable, its events are lost: {exc!r}")
        return None


def drop_spool(pid: int) -> None:
    """Remove the parcel process ``pid`` left at exit: its receiver took the parcel itself. What that process
    recorded after handing it over (its last events, its final snapshot: :meth:`Parcel.late`) is adopted, before
    the file goes (as in :func:`claim_spool`)."""
    d = RECORDER.metrics_dir
    if not d:
        return

    def adopt_late(parcel: Parcel) -> None:
        late = parcel.late()
        if late is not None:
            RECORDER.adopt(late)

    try:
        take_spool(d, pid, adopt_late)
    except Exception as exc:  # a damaged file (it is renamed into place whole, so only from outside): reported
        RECORDER._report(f"spool:{pid}", f"trace parcel of pid {pid} unreadable, its last events are lost: {exc!r}")


@contextmanager
def deferred_flusher_in_children(on: bool = True) -> Iterator[None]:
    """Children forked inside the block (``on``; by any thread of this process) start their flusher thread only
    when they need it: one tick after the fork (at an event recorded, or :func:`poll`, from then on) or when a
    ``B``/``E`` span begins. For processes that hand their events over (:func:`hand_over`) before the first
    tick is due, e.g. the DataLoader workers of one epoch; their loop calls :func:`poll` now and then.
    """
    if not on:
        yield
        return
    RECORDER.defer_in_children = True
    try:
        yield
    finally:
        RECORDER.defer_in_children = False


def shutdown() -> None:
    """What process exit does: close open spans (``aborted``), flush, shut the sinks down."""
    RECORDER.shutdown()


def metrics_snapshot() -> MetricsSnapshot:
    """Metrics of this process merged with those its worker processes published (flushes first: see
    :func:`metrics_view` for the read without side effects)."""
    return RECORDER.snapshot_all()


def metrics_view() -> MetricsView:
    """The run's metrics as data points of the registry (:mod:`.registry`), read without side effects.

    This process merged with every process of its run (its DataLoader workers, the finished ones included): as
    of the flusher's last tick for the others, and for this process's own events (``metrics_interval``, 1 s);
    nothing is flushed or exported and no file is read. Rank and node attributes are this process's.
    """
    snap = RECORDER.read() if RECORDER.started else MetricsSnapshot()
    rank = int(context.env_fields()["dist_global_rank"])
    return build(snap, rank, node_rank(rank))


class Runtime:
    """What this package provides the event API (:class:`streamscope.events.Runtime`), installed by
    :func:`streamscope.recording.install`."""

    configure = staticmethod(configure)
    configure_from_env = staticmethod(configure_from_env)
    ensure_metrics = staticmethod(ensure_metrics)
    flush = staticmethod(flush)
    metrics_view = staticmethod(metrics_view)
    staged_span = staticmethod(staged_span)
    stage = staticmethod(stage)
