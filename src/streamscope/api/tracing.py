"""User-facing switches of the event bus: ``enable_tracer``, ``enable_metrics``, ``metrics``, ``flush_tracer``.

``enable_tracer`` keeps LitData's signature. It validates everything first (an unknown level or category
raises ``ValueError`` (:class:`~streamscope._core.errors.TraceConfigError`), an unusable log file raises
``TraceConfigError`` naming it) and only then writes the environment that worker processes inherit:

* ``STREAMSCOPE_TRACE_LEVEL``, ``STREAMSCOPE_TRACE_CATEGORIES`` (sorted), ``STREAMSCOPE_LOG_FILE`` (absolute),
  ``STREAMSCOPE_TRACE_FLUSH_INTERVAL``;
* ``STREAMSCOPE_TRACE_SINKS`` gains ``litracer`` (the Litracer log), so a spawned worker that imports streamscope
  builds its own sink; forked workers rebuild theirs after fork;
* ``STREAMSCOPE_METRICS_DIR`` and ``STREAMSCOPE_TRACE_CLOCK_ANCHOR`` (set by the recorder) give the run one
  metrics directory and one time axis.

Importing this module configures the process from the environment (once, see
:func:`streamscope.events.configure_from_env`): a spawned process that uses the tracing API picks up what its
parent switched on. ``streamscope.events`` itself configures nothing when imported.

Metrics: whatever is traced is also aggregated. ``enable_metrics(level)`` aggregates categories without
writing a log (cost: the recorder's buffer append per event plus a ~1 s flusher tick per process). With
neither switched on nothing is recorded and ``metrics()`` is empty.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import sys
import time
from collections.abc import Sequence

from streamscope import events as ev
from streamscope import recording
from streamscope._core import config
from streamscope._core.errors import TraceConfigError
from streamscope._core.procs import pid_alive
from streamscope.events import vocab
from streamscope.recording.snapshots import MetricsSnapshot, read_snapshots
from streamscope.trace import LITRACER_SINK
from streamscope.trace.files import open_log

__all__ = ["enable_metrics", "enable_tracer", "flush_tracer", "metrics"]

ev.configure_from_env()  # the public switch: a spawned child that imports it traces as its parent does


def enable_tracer(
    level: str = "chunk",
    *,
    categories: Sequence[str] | None = None,
    flush_interval: float = 5,
    log_file: str = "litdata_debug.log",
    item_loader: bool | None = None,
    iterating_dataset: bool | None = None,
    getitem_dataset_for_chunk_index: bool | None = None,
) -> logging.Logger:
    """Trace the pipeline into a Litracer-compatible log, in this process and in every worker it starts.

    Call once in the main process before creating the DataLoader (calling it again reconfigures).

    Args:
        level: ``off``, ``batch``, ``chunk`` (default), ``sample`` or ``debug``
            (see :mod:`streamscope.events.vocab` for the categories of each).
        categories: an explicit category list; overrides ``level``.
        flush_interval: seconds between writes of buffered events to the log.
        log_file: the Litracer input, appended to (one ``key: value;`` event per line).
        item_loader: ``False`` removes the ``sample`` category (LitData's legacy switch).
        iterating_dataset: ``False`` removes the ``epoch`` category.
        getitem_dataset_for_chunk_index: ``False`` removes the ``sample`` category.

    Returns:
        The ``streamscope.trace`` logger (for LitData compatibility; events do not go through logging).

    Raises:
        TraceConfigError: (a ``ValueError``) unknown level or category, bad ``flush_interval``, or a log file
            that cannot be opened for appending. The environment is untouched in that case.
    """
    cats = vocab.categories_for_level(level)
    if categories is not None:
        cats = vocab.parse_categories(list(categories) if not isinstance(categories, str) else categories)
    if iterating_dataset is False:
        cats -= {"epoch"}
    if item_loader is False or getitem_dataset_for_chunk_index is False:
        cats -= {"sample"}
    try:
        interval = float(flush_interval)
    except (TypeError, ValueError):
        raise TraceConfigError(f"flush_interval must be a number of seconds, got {flush_interval!r}") from None
    if not interval > 0:
        raise TraceConfigError(f"flush_interval must be > 0 seconds, got {flush_interval!r}")
    path = os.path.abspath(os.fspath(log_file))
    if cats:
        os.close(open_log(path))  # raises TraceConfigError naming the file

    os.environ["STREAMSCOPE_LOG_FILE"] = path
    os.environ["STREAMSCOPE_TRACE_LEVEL"] = str(level).strip().lower() if cats else "off"
    os.environ["STREAMSCOPE_TRACE_CATEGORIES"] = ",".join(sorted(cats))
    os.environ["STREAMSCOPE_TRACE_FLUSH_INTERVAL"] = repr(interval)
    specs = [s.strip() for s in os.environ.get("STREAMSCOPE_TRACE_SINKS", "").split(",") if s.strip()]
    if cats and LITRACER_SINK not in specs:
        specs.append(LITRACER_SINK)
    os.environ["STREAMSCOPE_TRACE_SINKS"] = ",".join(specs)

    ev.configure(cats, _metric_cats(), interval)
    recording.RECORDER.open_sinks()  # the log is opened once, here, not by the first flush
    return logging.getLogger("streamscope.trace")


def _metric_cats() -> frozenset[str]:
    raw = str(config.get("metrics_level") or "").strip()
    if not raw:
        return frozenset()
    if raw.lower() in vocab.LEVELS:
        return vocab.LEVELS[raw.lower()]
    return vocab.parse_categories(raw)


def enable_metrics(level: str = "chunk", *, categories: Sequence[str] | None = None) -> None:
    """Aggregate metrics for ``level`` (or ``categories``) in this process and its workers, without a log.

    Raises:
        TraceConfigError: unknown level or category (environment untouched).
    """
    cats = vocab.categories_for_level(level) if categories is None else vocab.parse_categories(list(categories))
    os.environ["STREAMSCOPE_METRICS_LEVEL"] = ",".join(sorted(cats)) if cats else ""
    ev.configure(
        recording.RECORDER.trace_cats,
        cats,
        None if not recording.RECORDER.started else recording.RECORDER.flush_interval,
    )


def metrics() -> MetricsSnapshot:
    """Current metrics of the loader: this process merged with the snapshots its workers published.

    Workers publish every ``metrics_interval`` seconds (default 1) and at exit, so their latest second may
    be missing while they run.
    """
    return recording.metrics_snapshot()


def flush_tracer(wait_workers: float = 0.0) -> None:
    """Write every event buffered in this process to the sinks now (workers flush on their own).

    Then waits (up to 10 s) for the DataLoader workers of finished epochs to exit, so their events are in, and
    writes again.

    Worker processes write their last events when they exit; after a complete epoch the loader lets its
    workers exit in the background. ``wait_workers`` (seconds) waits, at most that long, until this
    process has no running multiprocessing children and every other process of the run that published
    metrics has written its final snapshot or is gone, so the log is complete when this returns (persistent
    workers stay alive: the wait then runs to its end).
    """
    loader = sys.modules.get("streamscope.engine.dataloader")  # only if a loader ran here (it imports torch)
    exiting = loader is not None and loader.pending_worker_shutdowns()
    # this process's own events, written while the workers of finished epochs exit (they are retired after)
    ev.flush(repair=not exiting)
    if exiting and loader is not None:
        loader.join_worker_shutdowns()  # the workers of finished epochs have exited (and written their events)
        ev.flush()
    d = recording.RECORDER.metrics_dir
    if wait_workers <= 0 or not d:
        return
    deadline = time.monotonic() + float(wait_workers)
    me = os.getpid()
    again = True
    while time.monotonic() < deadline:
        if not multiprocessing.active_children():
            others = [(pid, s) for pid, s in read_snapshots(d).items() if pid != me]
            if all(s.get("final") or not pid_alive(pid) for pid, s in others):
                # nothing to write again unless a process went away since the last flush (with no other
                # process's snapshot left, e.g. num_workers=0, there is nothing to repair or retire)
                again = bool(others) and (not exiting or any(not s.get("final") for _pid, s in others))
                break
        again = True
        time.sleep(0.02)
    if again:
        ev.flush()  # also closes the spans of workers that died without closing them
