"""The model's gauges of a loader the tuner does not tune: the ``observer`` hook a loader calls at each epoch.

``StreamingDataLoader.__iter__`` calls the hook when metrics are on in this process and ``autotune`` is off
(through :mod:`streamscope._core.hooks`: ``engine`` may not import ``tune`` or ``api``). The first call starts a
:class:`streamscope.tune.observe.Observer` on the loader (adapted as the tuner adapts it,
:class:`~streamscope.api.autotune.LoaderTarget`); every call counts the epoch, as the tuner's ``before_epoch``
does, so the loop's batch count runs on across epochs. Nothing starts in a DataLoader worker; the observer stops
when its loader is collected.
"""

from __future__ import annotations

import weakref
from typing import Any

from streamscope import recording
from streamscope.api.autotune import LoaderTarget
from streamscope.tune.observe import Observer

__all__ = ["before_epoch", "observer_of"]

_observers: weakref.WeakKeyDictionary[Any, Observer] = weakref.WeakKeyDictionary()


def _in_worker() -> bool:
    try:
        from torch.utils.data import get_worker_info
    except ImportError:  # pragma: no cover - torch is a dependency
        return False
    return get_worker_info() is not None


def before_epoch(loader: Any) -> Observer | None:
    """An epoch of ``loader`` is about to start: the observer counts it (started on the first call). None, and
    nothing started, with metrics off or in a DataLoader worker."""
    if not recording.RECORDER.metric_cats or _in_worker():
        return None
    obs = _observers.get(loader)
    if obs is None:
        obs = Observer(LoaderTarget(loader))
        _observers[loader] = obs
        weakref.finalize(loader, obs.stop, 0.0)
    target: Any = obs.target
    target._final = int(loader.batches_consumed)  # before the epoch count moves (progress() reads both)
    target._epochs += 1
    obs.start()
    return obs


def observer_of(loader: Any) -> Observer | None:
    """The observer of ``loader`` (None: none started)."""
    return _observers.get(loader)
