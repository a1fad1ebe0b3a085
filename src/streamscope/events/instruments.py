"""Instruments: metric values a process reports without events (counters it adds to, values it observes).

Most metrics are derived from events (:mod:`streamscope.recording.metrics`). Some are not events at all: a cache hit (a chunk already
local), the depth of a prefetcher, the batches a loader handed out. Components report those here, cheaply and
only while metrics or tracing are on:

* :func:`add` adds to a counter of this process (``add(M.CACHE_HITS)``);
* :func:`observe` registers a callback (held weakly when it is a bound method) that returns
  ``[(metric, attributes, value), ...]`` when asked, as OpenTelemetry's asynchronous instruments do: the value is
  read when a snapshot is taken (each flush of a worker) or the metrics are read (the main process), never on the
  data path.

Both land in the process's snapshot as ``values``: ``{"<metric name>|<attr>=<value>,...": number}``
(:func:`key`). A metric that declares the ``worker`` attribute gets this process's DataLoader worker id.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Iterable
from typing import Any

from streamscope.events import context
from streamscope.events.bus import ACTIVE, LEFT_BEHIND
from streamscope.events.registry import Metric

__all__ = [
    "COUNTS",
    "Callback",
    "Observation",
    "add",
    "add_key",
    "after_fork_in_child",
    "collect",
    "counts",
    "key",
    "observe",
    "parse_key",
    "reset",
]


Observation = tuple[Metric, dict[str, Any], float]
Callback = Callable[[], Iterable[Observation]]

#: This process's counters (see :func:`add`).
COUNTS: dict[str, float] = {}
#: Moves at every change of :data:`COUNTS`: a process publishes its snapshot when its counters moved, even with
#: no new event (e.g. a worker's share of the wait split settled after its last batch).
VERSION = 0
#: Held while the counters change and while :func:`collect` reads them and asks the callbacks: a component that
#: moves a running amount its callback reports into a counter does it under this lock, so a read sees the amount
#: in one place or the other, never in both nor in neither (a counter that would otherwise dip or jump back).
LOCK = threading.RLock()
_lock = LOCK
_callbacks: list[Callable[[], Callback | None]] = []


def key(metric: Metric, attrs: dict[str, Any] | None = None) -> str:
    """The snapshot key of ``metric`` with ``attrs`` (sorted, values as strings)."""
    if not attrs:
        return metric.name
    return metric.name + "|" + ",".join(f"{k}={attrs[k]}" for k in sorted(attrs))


def parse_key(k: str) -> tuple[str, dict[str, str]]:
    """(metric name, attributes) of a snapshot key."""
    name, _, rest = k.partition("|")
    attrs = dict(p.split("=", 1) for p in rest.split(",") if "=" in p) if rest else {}
    return name, attrs


def add(metric: Metric, value: float = 1, **attrs: Any) -> None:
    """Add ``value`` to ``metric`` (a counter) in this process; nothing while metrics and tracing are off."""
    global VERSION
    if ACTIVE:
        k = key(metric, attrs)
        with _lock:
            COUNTS[k] = COUNTS.get(k, 0) + value
            VERSION += 1


def add_key(k: str, value: float) -> None:
    """:func:`add` by snapshot key (whatever is on)."""
    global VERSION
    with _lock:
        COUNTS[k] = COUNTS.get(k, 0) + value
        VERSION += 1


def reset() -> None:
    """Counters back to zero (a new run)."""
    global VERSION
    with _lock:
        COUNTS.clear()
        VERSION += 1


def counts() -> dict[str, float]:
    """This process's counters as they are now (a copy)."""
    with _lock:
        return dict(COUNTS)


def observe(callback: Callback) -> None:
    """Ask ``callback`` for its observations whenever this process's metrics are collected (see module doc)."""
    ref: Callable[[], Callback | None]
    try:
        ref = weakref.WeakMethod(callback)  # type: ignore[arg-type]
    except TypeError:
        ref = lambda: callback  # noqa: E731  a plain function: held
    with _lock:
        if len(_callbacks) >= 64:  # components come and go (a prefetcher per epoch): forget the dead ones
            _callbacks[:] = [r for r in _callbacks if r() is not None]
        _callbacks.append(ref)


def collect() -> dict[str, float]:
    """This process's counters and what its callbacks observe now (a callback that fails is skipped), read under
    :data:`LOCK` (see there)."""
    dead = False
    worker: str | None = None
    with _lock:
        out = dict(COUNTS)
        for ref in _callbacks:
            fn = ref()
            if fn is None:
                dead = True
                continue
            try:
                for metric, attrs, value in fn():
                    if "worker" in metric.attributes and "worker" not in attrs:
                        if worker is None:
                            worker = str(context.env_fields()["worker_rank"])
                        attrs = {**attrs, "worker": worker}
                    k = key(metric, attrs)
                    out[k] = out.get(k, 0) + float(value)
            except Exception:
                continue
        if dead:
            _callbacks[:] = [r for r in _callbacks if r() is not None]
    return out


def after_fork_in_child() -> None:
    """A forked child counts from zero and observes only what it registers itself (the parent's objects, e.g. a
    loader, are the parent's to report). The parent's are left behind unreleased, as the recorder's state."""
    global COUNTS, LOCK, _lock, _callbacks
    LEFT_BEHIND.append((COUNTS, _callbacks))
    COUNTS, _callbacks = {}, []
    LOCK = _lock = threading.RLock()
