"""Knobs of the event bus: trace level and categories, the Litracer log, buffering and hand-over, metrics."""

from __future__ import annotations

from streamscope._core.knob_registry import knob

__all__: list[str] = []

knob(
    "trace_level",
    "off",
    "level",
    ("STREAMSCOPE_TRACE_LEVEL", "LITDATA_TRACE_LEVEL"),
    "Trace level: off, batch, chunk, sample or debug.",
)
knob(
    "trace_categories",
    "",
    "comma list",
    ("STREAMSCOPE_TRACE_CATEGORIES", "LITDATA_TRACE_CATEGORIES"),
    "Explicit trace categories (overrides the level).",
)
knob(
    "trace_log_file",
    "litdata_debug.log",
    "path",
    ("STREAMSCOPE_LOG_FILE", "LITDATA_LOG_FILE"),
    "Where the Litracer-compatible log is written.",
)
knob(
    "trace_flush_interval",
    5.0,
    "s",
    ("STREAMSCOPE_TRACE_FLUSH_INTERVAL",),
    "How often the background flusher hands buffered events to the sinks.",
)
knob(
    "trace_buffer_events",
    200_000,
    "events",
    ("STREAMSCOPE_TRACE_BUFFER_EVENTS",),
    "Per-process event buffer bound; events beyond it are dropped and counted.",
)
knob(
    "trace_hold_max",
    30.0,
    "s",
    ("STREAMSCOPE_TRACE_HOLD_MAX",),
    "Events a thread records after the begin of a complete event still open there are held back (so each "
    "thread's lines are in ts order) for at most this long.",
)
knob(
    "trace_handover_max_events",
    4096,
    "events",
    ("STREAMSCOPE_TRACE_HANDOVER_MAX_EVENTS",),
    "A non-persistent DataLoader worker whose epoch share ends with at most this many trace events unwritten "
    "hands them to the main process, which writes them (the worker then neither opens the log nor encodes); "
    "with more it writes them itself, in parallel with the other workers. 0: workers always write their own. "
    "Read when tracing is switched on.",
)
knob(
    "trace_handover_wait",
    60.0,
    "s",
    ("STREAMSCOPE_TRACE_HANDOVER_WAIT",),
    "A worker exiting before the main process has taken (or given up) its trace parcel waits at most this long "
    "for the answer, then writes the parcel's events itself. Read when tracing is switched on.",
)
knob(
    "trace_compact_categories",
    "sample,batch,stall,read",
    "comma list",
    ("STREAMSCOPE_TRACE_COMPACT",),
    "Categories whose spans are written as one complete X event (with dur) instead of a B/E pair (the "
    "loader's per-batch batch/stall events and the workers' decode_batch are then also recorded in bulk, off the loop's "
    "hot path); empty for LitData's B/E pairs everywhere.",
)
knob(
    "trace_sinks",
    "",
    "comma list",
    ("STREAMSCOPE_TRACE_SINKS",),
    "Sink factories as 'package.module:Factory' dotted paths or names streamscope installs, resolved lazily in "
    "every process (enable_tracer adds litracer, the Litracer log).",
)
knob(
    "trace_clock_anchor",
    "",
    "ns",
    ("STREAMSCOPE_TRACE_CLOCK_ANCHOR",),
    "Internal: Unix-epoch minus CLOCK_MONOTONIC nanoseconds of the run, set by the first traced process so "
    "that every process of the run stamps events on one time axis.",
)
knob(
    "metrics_level",
    "off",
    "level",
    ("STREAMSCOPE_METRICS_LEVEL",),
    "Categories aggregated into metrics even when no trace log is written (a level name or a comma list of "
    "categories); the traced categories are always aggregated too.",
)
knob(
    "metrics_dir",
    "",
    "path",
    ("STREAMSCOPE_METRICS_DIR",),
    "Run directory where every process publishes its metrics snapshot (<pid>.json); created by the first "
    "traced process and inherited by its workers.",
)
knob(
    "metrics_interval",
    1.0,
    "s",
    ("STREAMSCOPE_METRICS_INTERVAL",),
    "How often each process aggregates its events and publishes its metrics snapshot.",
)
