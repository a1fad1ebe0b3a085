"""Hooks that a lower layer calls and the application-facing layer provides.

The layers of ARCHITECTURE.md import downwards only, yet the lower layers need pieces of the higher ones at run
time: the loader (``engine``) starts an auto-tuner (``tune``, its sibling, which ``api`` wires to it); the event
bus (``events``) writes the Litracer log by default (``trace``) and hands its metrics and spans to OpenTelemetry
once the application has loaded it (``telemetry``). A lower layer asks this registry by name; the package root,
``streamscope/__init__.py``, provides every hook when it is imported, as OpenTelemetry's ``set_tracer_provider``
installs a provider once, and no module names a higher layer in a dotted string.

Python imports a package before any of its submodules, so ``import streamscope.engine.dataset`` (what a
DataLoader worker started with "spawn" does when it unpickles its dataset) runs ``streamscope/__init__.py`` first:
every process that imports any module of streamscope has the hooks. A lower layer may import a higher one only
through a function the root provides here, called when it is needed (so ``import streamscope`` stays cheap).

* ``autotuner`` (:data:`AUTOTUNER`): ``hook(loader) -> LoaderTuner``, what ``StreamingDataLoader(tune=...)`` starts.
* ``observer``: ``hook(loader)``, called at each epoch when metrics are on and the tuner is off: publishes the
  tuner's model as gauges (``streamscope.tune.observe``) without moving a knob.
* ``first_use`` (:data:`FIRST_USE`): run by :func:`first_use` when a dataset or loader is built. It switches on
  what the environment asks for with no call in the training script (``STREAMSCOPE_PROMETHEUS_PORT``: the rank's
  Prometheus endpoint).
* ``otel_entry`` (:data:`OTEL_ENTRY`): run once per process by the event bus's entry points once OpenTelemetry's
  API is loaded (``streamscope.telemetry.otel.on_entry``).
* ``runtime`` (:data:`RUNTIME`): installs the event bus's runtime (``streamscope.recording.install``) into the event
  API (``streamscope.events.set_runtime``); the API runs it the first time it needs the runtime.
* ``loader_observer`` (:data:`LOADER_OBSERVER`): installs the runtime's loader observer
  (``streamscope.recording.loader_observer``) into the engine (``streamscope.engine.observer.set_factory``); the
  engine runs it when the first loader is built.
* ``sink:<name>`` (:func:`sink`): an exporter factory of the event bus by the name ``STREAMSCOPE_TRACE_SINKS`` may
  give instead of a dotted path (``sink:litracer``: the Litracer log).
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable
from typing import Any, Protocol

__all__ = [
    "AUTOTUNER",
    "FIRST_USE",
    "LOADER_OBSERVER",
    "OTEL_ENTRY",
    "RUNTIME",
    "LoaderTuner",
    "find",
    "first_use",
    "get",
    "provide",
    "sink",
]


#: The hook that attaches an auto-tuner to a loader.
AUTOTUNER = "autotuner"
#: The hook :func:`first_use` runs (none provided: nothing to run).
FIRST_USE = "first_use"
#: The hook that installs the event runtime's loader observer into the engine.
LOADER_OBSERVER = "loader_observer"
#: The hook the event bus runs once OpenTelemetry's API is loaded.
OTEL_ENTRY = "otel_entry"
#: The hook that installs the event bus's runtime into the event API.
RUNTIME = "runtime"

_provided: dict[str, Callable[..., Any]] = {}
_lock = threading.Lock()
_first_use_pid = 0  # the process where first_use ran (a forked child runs it again, as its own process)


def sink(name: str) -> str:
    """The hook name of the event bus's exporter factory called ``name`` in ``STREAMSCOPE_TRACE_SINKS``."""
    return f"sink:{name}"


class LoaderTuner(Protocol):
    """What a loader calls on the tuner the ``autotuner`` hook attached to it (``hook(loader)``)."""

    def before_epoch(self) -> None:
        """An epoch is about to start (before its workers do): may change ``num_workers``; the first call checks
        the budgets (raising before the first batch) and starts tuning."""
        ...

    def after_epoch(self, batches: int) -> None:
        """The loop is done with an epoch (complete or not) after ``batches`` batches of it."""
        ...

    def state_dict(self) -> dict[str, Any]:
        """The tuned values, for the loader's ``state_dict``."""
        ...

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Start from a saved run's tuned values."""
        ...

    def close(self) -> None:
        """Stop tuning."""
        ...


def provide(name: str, fn: Callable[..., Any]) -> None:
    """Make ``fn`` the hook ``name``."""
    with _lock:
        _provided[name] = fn


def find(name: str) -> Callable[..., Any] | None:
    """The hook ``name``, or None when nothing provided it."""
    return _provided.get(name)


def get(name: str) -> Callable[..., Any]:
    """The hook ``name``.

    Raises:
        KeyError: nothing provided it (naming the hooks provided).
    """
    fn = _provided.get(name)
    if fn is None:
        known = ", ".join(sorted(_provided)) or "none"
        raise KeyError(
            f"no hook {name!r} provided (streamscope/__init__.py provides them when imported); provided: {known}"
        )
    return fn


def first_use() -> None:
    """A dataset or loader is being built: run the ``first_use`` hook, once per process.

    The engine calls this where a user's code first meets it (StreamingDataset, StreamingRawDataset and
    StreamingDataLoader built); a spawned worker unpickling its dataset does not. The hook decides what to do and
    where (the Prometheus endpoint opens in a rank's main process only). After the first call it costs a pid
    comparison. A hook that raises is said on stderr in one line: building a dataset never fails because of it.
    """
    global _first_use_pid
    pid = os.getpid()
    if _first_use_pid == pid:
        return
    _first_use_pid = pid
    fn = _provided.get(FIRST_USE)
    if fn is None:
        return
    try:
        fn()
    except Exception as exc:  # the data path carries on; the hook says its own expected failures itself
        why = " ".join(str(exc).split())  # one line
        print(f"streamscope: {FIRST_USE} hook failed: {type(exc).__name__}: {why}", file=sys.stderr, flush=True)
