"""Hooks that a lower layer calls and a higher layer provides.

The layers of ARCHITECTURE.md import downwards only, yet the loader (``stream``) must start an auto-tuner
(``tune``, its sibling) that ``api`` wires to it. The loader asks this registry for the ``autotuner`` hook; ``api``
provides it when imported, and a hook not provided yet is imported lazily from its default dotted path (as the
event bus resolves its sinks), so the loader works whichever module the application imported first.
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Callable
from typing import Any, Protocol

__all__ = ["DEFAULTS", "LoaderTuner", "get", "provide"]


#: Hook name -> the dotted path of its default provider (``module:attribute``).
DEFAULTS: dict[str, str] = {"autotuner": "streamscope.api.autotune:attach"}

_provided: dict[str, Callable[..., Any]] = {}
_lock = threading.Lock()


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
