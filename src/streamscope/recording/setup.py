"""Configuring the event bus of a process: explicitly, once; never as a side effect of importing it.

Importing :mod:`streamscope.events` reads no environment variable, registers no hook, starts no thread and
creates no file. A process is configured by

* :func:`streamscope.events.configure` (``enable_tracer`` and ``enable_metrics`` call it), or
* :func:`configure_from_env`: the documented variables (``STREAMSCOPE_TRACE_LEVEL`` / ``_CATEGORIES``,
  ``LITDATA_TRACE_LEVEL`` / ``_CATEGORIES``, ``STREAMSCOPE_METRICS_LEVEL`` and the tracer knobs) read once per
  process. streamscope's entry points call it: the public names of ``streamscope`` (``streamscope.
  StreamingDataset`` ...), importing ``streamscope.api.tracing``, a StreamingDataset or StreamingDataLoader
  built, and the bootstrap of a spawned worker (a dataset unpickled in a DataLoader worker, an optimize
  worker). A forked child inherits its parent's configuration (:func:`install_hooks`).

The first configuration installs the process hooks: fork (a fresh buffer, aggregator and flusher in the child)
and exit (open spans closed, events flushed, the final snapshot published): :mod:`.process_hooks`. The parsing of
the category knobs is :mod:`.category_knobs`'s.
"""

from __future__ import annotations

import os
import sys

from streamscope._core import config, hooks
from streamscope.events import vocab
from streamscope.recording import process_hooks
from streamscope.recording.category_knobs import compact_categories, metric_categories
from streamscope.recording.recorder import RECORDER

__all__ = [
    "OTEL_ENTRY_HOOK",
    "compact_categories",
    "configure_from_env",
    "install_hooks",
    "mark_configured",
    "metric_categories",
]


#: The hook (:mod:`streamscope._core.hooks`) run at every entry point once the application has loaded
#: OpenTelemetry's API, until it has run in this process: streamscope's metrics and spans then reach the
#: application's OpenTelemetry set-up with no streamscope call. ``streamscope/__init__.py`` provides it
#: (``streamscope.telemetry.otel.on_entry``): ``events`` does not import the layers above it.
OTEL_ENTRY_HOOK = hooks.OTEL_ENTRY
_OTEL_API = ("opentelemetry.metrics", "opentelemetry.trace")
_otel_hook_pid = 0  # the process where the hook ran


def configure_from_env(force: bool = False) -> None:
    """Configure this process from ``STREAMSCOPE_TRACE_*`` / ``LITDATA_TRACE_*`` and ``STREAMSCOPE_METRICS_LEVEL``.

    Once per process: a later call, or a call in a process already configured explicitly (or forked from one:
    a child inherits its parent's configuration), does nothing unless ``force``. A bad value is reported on
    stderr and tracing stays off: the data path must not fail to start.
    """
    if not process_hooks.configured() or force:
        process_hooks.mark_configured()
        try:
            cats = config.get("trace_categories")
            trace = vocab.resolve(config.get("trace_level"), cats if cats.strip() else None)
            metric = metric_categories(config.get("metrics_level"))
        except Exception as exc:
            sys.stderr.write(f"streamscope tracer: disabled, bad environment: {exc}\n")
            trace = metric = frozenset()
        if trace or metric:
            RECORDER.configure(trace, metric)
    if _otel_hook_pid != os.getpid():
        _otel_entry()


def _otel_entry() -> None:
    """Run the :data:`OTEL_ENTRY_HOOK` hook once per process, as soon as OpenTelemetry's API is loaded (two dict
    lookups until then). A failing hook is said on stderr; the data path carries on."""
    global _otel_hook_pid
    modules = sys.modules
    if _OTEL_API[0] not in modules and _OTEL_API[1] not in modules:
        return
    _otel_hook_pid = os.getpid()
    fn = hooks.find(OTEL_ENTRY_HOOK)
    if fn is None:  # nothing provided it (streamscope/__init__.py always does)
        return
    try:
        fn()
    except Exception as exc:
        sys.stderr.write(f"streamscope telemetry: OpenTelemetry not wired up: {type(exc).__name__}: {exc}\n")


def mark_configured() -> None:
    """This process was configured explicitly: :func:`configure_from_env` need not read the environment."""
    process_hooks.mark_configured()


def install_hooks() -> None:
    """Register the fork and exit hooks of the recorder, once per process (a forked child inherits its parent's
    fork hook and re-arms the exit hooks here; see :mod:`.process_hooks`)."""
    process_hooks.install(RECORDER)
