"""The runtime of the event bus: what records the events the API (:mod:`streamscope.events`) buffers.

Per process, the :data:`RECORDER` ties the roles together (:mod:`.recorder`): the flusher thread (:mod:`.flusher`)
takes the buffer every tick, the processor (:mod:`.processor`) hands the traced events to the exporters, the
aggregator (:mod:`.metrics`) folds every event into metrics published as snapshots (:mod:`.snapshots`) and read as
a view (:mod:`.views`); a worker hands its events to its parent (:mod:`.handover`), the run's owner collects the
others (:mod:`.collect`); the environment configures a process once (:mod:`.setup`), fork and exit are hooked
(:mod:`.process_hooks`); the loader's wait is split among stages (:mod:`.attribution`, over the ring of
:mod:`.waits`); the loader observer (:mod:`.loader_observer`, its workers' side :mod:`.loader_share`) is what the
engine's ``StreamingDataLoader`` calls (``streamscope.engine.observer``; the package root installs it).

Layer: above ``streamscope.cache``, below the engine (pyproject.toml's import-linter contracts). ``trace`` and
``telemetry`` use this package's names here only, never its modules. The event API never imports it: this package
installs itself into the API with :func:`install` (``streamscope.events.set_runtime``), which the package root's
``runtime`` hook calls the first time the API needs it (see :mod:`streamscope.events.runtime`).
"""

from __future__ import annotations

from streamscope import events
from streamscope.recording.entry import (
    Runtime,
    add_sink,
    adopt,
    claim_spool,
    configure,
    configure_from_env,
    deferred_flusher_in_children,
    drop_spool,
    ensure_metrics,
    flush,
    force_flush,
    hand_over,
    metrics_snapshot,
    metrics_view,
    remove_sink,
    shutdown,
)
from streamscope.recording.handover import Parcel
from streamscope.recording.metrics import SpanStats
from streamscope.recording.processor import DEFAULT_SINK
from streamscope.recording.recorder import RECORDER, Recorder
from streamscope.recording.report import Reporter
from streamscope.recording.snapshots import MetricsSnapshot

__all__ = [
    "DEFAULT_SINK",
    "MetricsSnapshot",
    "Parcel",
    "RECORDER",
    "Recorder",
    "Reporter",
    "Runtime",
    "SpanStats",
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
    "install",
    "metrics_snapshot",
    "metrics_view",
    "remove_sink",
    "shutdown",
]

_RUNTIME = Runtime()


def install() -> None:
    """Install this runtime into the event API (``streamscope.events.set_runtime``), once; idempotent."""
    if events.runtime.installed() is not _RUNTIME:
        events.set_runtime(_RUNTIME)
