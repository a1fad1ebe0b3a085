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
and exit (open spans closed, events flushed, the final snapshot published).
"""

from __future__ import annotations

import atexit
import importlib
import os
import sys
import threading
import traceback

from streamscope._core import config
from streamscope.events import context, vocab
from streamscope.events.bus import ACTIVE
from streamscope.events.recorder import RECORDER

__all__ = [
    "OTEL_ENTRY_HOOK",
    "compact_categories",
    "configure_from_env",
    "install_hooks",
    "mark_configured",
    "metric_categories",
]


_hooks_pid = 0  # the process that installed the hooks (fork hooks are inherited; exit hooks re-armed)
#: This process (or the parent it was forked from) was configured: from the environment or explicitly.
_configured = False

#: Called (``module:function``, resolved lazily: ``events`` cannot import the layers above it) at every entry point
#: once the application has loaded OpenTelemetry's API, until it has run in this process: streamscope's metrics and
#: spans then reach the application's OpenTelemetry set-up with no streamscope call (see streamscope.telemetry).
OTEL_ENTRY_HOOK = "streamscope.telemetry.otel:on_entry"
_OTEL_API = ("opentelemetry.metrics", "opentelemetry.trace")
_otel_hook_pid = 0  # the process where the hook ran


def configure_from_env(force: bool = False) -> None:
    """Configure this process from ``STREAMSCOPE_TRACE_*`` / ``LITDATA_TRACE_*`` and ``STREAMSCOPE_METRICS_LEVEL``.

    Once per process: a later call, or a call in a process already configured explicitly (or forked from one:
    a child inherits its parent's configuration), does nothing unless ``force``. A bad value is reported on
    stderr and tracing stays off: the data path must not fail to start.
    """
    global _configured
    if not _configured or force:
        _configured = True
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
    """Run :data:`OTEL_ENTRY_HOOK` once per process, as soon as OpenTelemetry's API is loaded (two dict lookups
    until then). A failing hook is said on stderr; the data path carries on."""
    global _otel_hook_pid
    modules = sys.modules
    if _OTEL_API[0] not in modules and _OTEL_API[1] not in modules:
        return
    _otel_hook_pid = os.getpid()
    mod, _, fn = OTEL_ENTRY_HOOK.partition(":")
    try:
        getattr(importlib.import_module(mod), fn)()
    except Exception as exc:
        sys.stderr.write(f"streamscope telemetry: OpenTelemetry not wired up: {type(exc).__name__}: {exc}\n")


def mark_configured() -> None:
    """This process was configured explicitly: :func:`configure_from_env` need not read the environment."""
    global _configured
    _configured = True


def metric_categories(raw: str) -> frozenset[str]:
    """The categories of a ``metrics_level`` value: a level name or a comma list of categories.

    Raises:
        TraceConfigError: an unknown category.
    """
    raw = (raw or "").strip()
    if not raw:
        return frozenset()
    if raw.lower() in vocab.LEVELS:
        return vocab.LEVELS[raw.lower()]
    return vocab.parse_categories(raw)


def compact_categories() -> frozenset[str]:
    """The ``trace_compact_categories`` knob (reported and ignored when bad)."""
    try:
        return vocab.parse_categories(config.get("trace_compact_categories"))
    except Exception as exc:
        sys.stderr.write(f"streamscope tracer: trace_compact_categories ignored: {exc}\n")
        return frozenset()


def install_hooks() -> None:
    """Register the fork and exit hooks of the recorder, once per process (a forked child inherits its parent's
    fork hook and re-arms the exit hooks here)."""
    global _hooks_pid
    pid = os.getpid()
    if _hooks_pid == pid:
        return
    if not _hooks_pid:
        os.register_at_fork(before=_before_fork, after_in_parent=context.after_fork_in_parent, after_in_child=_child)
    _hooks_pid = pid
    atexit.register(_exit_hook)
    reg = getattr(threading, "_register_atexit", None)
    if reg is not None:
        try:
            reg(_exit_hook)  # runs in threading._shutdown: at interpreter exit and in multiprocessing children
        except RuntimeError:
            pass


def _child() -> None:
    global _hooks_pid
    _hooks_pid = os.getpid()  # the parent's exit hooks are inherited with its registrations
    RECORDER.after_fork_in_child()


def _before_fork() -> None:
    if ACTIVE:  # tracing or metrics on (off: a fork costs the tracer nothing)
        try:
            context.before_fork()
        except Exception:  # a fork must never fail for the tracer
            pass


def _exit_hook() -> None:
    try:
        RECORDER.shutdown()
    except Exception:
        traceback.print_exc()
