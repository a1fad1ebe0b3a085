"""Hooks that a lower layer calls and a higher layer provides.

The layers of ARCHITECTURE.md import downwards only, yet the loader (``engine``) must start an auto-tuner
(``tune``, its sibling) that ``api`` wires to it. The loader asks this registry for the ``autotuner`` hook; ``api``
provides it when imported, and a hook not provided yet is imported lazily from its default dotted path (as the
event bus resolves its sinks), so the loader works whichever module the application imported first.

``first_use`` has no default: ``streamscope/__init__.py`` (imported before any module of the package) provides it,
and the engine calls :func:`first_use` when a dataset or loader is built. It switches on what the environment asks
for with no call in the training script (``STREAMSCOPE_PROMETHEUS_PORT``: the rank's Prometheus endpoint).
"""

from __future__ import annotations

import importlib
import os
import sys
import threading
from collections.abc import Callable
from typing import Any, Protocol

__all__ = ["DEFAULTS", "FIRST_USE", "LoaderTuner", "first_use", "get", "provide"]


#: Hook name -> the dotted path of its default provider (``module:attribute``).
DEFAULTS: dict[str, str] = {"autotuner": "streamscope.api.autotune:attach"}

#: The hook :func:`first_use` runs (provided by ``streamscope/__init__.py``; none: nothing to run).
FIRST_USE = "first_use"

_provided: dict[str, Callable[..., Any]] = {}
_lock = threading.Lock()
_first_use_pid = 0  # the process where first_use ran (a forked child runs it again, as its own process)


class LoaderTuner(Protocol):
    """What a loader calls on the tuner the ``autotuner`` hook attached to it (``hook(loader)``)."""

    def before_epoch(self) -> None:
        """An epoch is about to start (before its workers do): may change ``num_workers``; the first call checks
        the budgets (raising before the first batch) and starts tuning."""
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


def get(name: str) -> Callable[..., Any]:
    """The hook ``name``: the one provided, else its default provider, imported now."""
    fn = _provided.get(name)
    if fn is not None:
        return fn
    try:
        path = DEFAULTS[name]
    except KeyError:
        raise KeyError(f"no hook {name!r}; hooks: {', '.join(sorted(DEFAULTS))}") from None
    module, _, attr = path.partition(":")
    fn = getattr(importlib.import_module(module), attr)
    with _lock:
        return _provided.setdefault(name, fn)


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
