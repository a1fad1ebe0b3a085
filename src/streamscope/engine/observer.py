"""The loader is observed, not woven: what StreamingDataLoader tells an observer, and the no-op default.

The loader drives its epoch (reordering the workers' batches, yielding them, resume, the workers' shutdown) and
calls an observer at four points; everything the runtime records of a loader (trace parcels and their acks, the
wait split's ring, the ``epoch``/``batch``/``stall`` events, the loader's metrics) is the observer's:

* :meth:`LoaderObserver.begin`, once per iteration, before the workers are told: returns an :class:`Iteration`,
  whose opaque :attr:`Iteration.ticket` ``BatchMode`` carries to the dataset and its workers;
* :meth:`Ticket.share`, in each DataLoader worker: wraps the worker's items (``engine.batching.worker_items``);
* on the loop's thread, per batch: :attr:`Iteration.delivered` once the loop is done with batch ``j`` and
  :attr:`Iteration.fetch` for the next message of the workers (``next(it)``, the loop's wait);
* :meth:`Iteration.end` when the iteration ends (complete or not), then what it returns once the workers exited.

The engine imports no runtime: the runtime installs its observer with :func:`set_factory` (``streamscope``'s
package root provides the ``loader_observer`` hook that does it, as ``recording.install()`` installs the event
runtime; :func:`observer_for` runs the hook the first time a loader asks). Until then, and when nothing is
installed, every loader gets :data:`NOOP`, which records nothing and costs the loop nothing per batch
(``delivered`` None, ``fetch`` the builtin ``next``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from types import TracebackType
from typing import Any, Protocol

from streamscope._core import hooks

__all__ = ["NOOP", "Iteration", "LoaderObserver", "NoObserver", "Ticket", "observer_for", "set_factory"]


class Ticket(Protocol):
    """What one iteration's workers receive (``BatchMode.ticket``; pickled to spawned workers)."""

    def share(self, items: Iterator[Any]) -> Iterator[Any]:
        """A DataLoader worker's items of the iteration, as the loop is to receive them."""
        ...


class Iteration(Protocol):
    """The observer's side of one loader iteration (what :meth:`LoaderObserver.begin` returns)."""

    @property
    def ticket(self) -> Ticket | None:
        """What ``BatchMode`` carries to the workers (None: their items go unchanged)."""
        ...

    @property
    def count_bytes(self) -> bool:
        """The loop's reorder counts the bytes of single batches (the loader's byte metric)."""
        ...

    @property
    def delivered(self) -> Callable[[int], None] | None:
        """Called with ``j`` once the loop is done with batch ``j`` (None: nothing to call). Read once, when the
        loop has entered :meth:`epoch`."""
        ...

    @property
    def fetch(self) -> Callable[[Iterator[Any]], Any]:
        """Called instead of ``next(it)``: the workers' next message, or None when it was the observer's own (a
        parcel). Read at each call (the observer may replace it, e.g. after the first batch)."""
        ...

    def start_workers(self, start: Callable[[], Iterator[Any]]) -> Iterator[Any]:
        """``start()`` (``DataLoader.__iter__``: the workers are told to start) under what the observer needs
        around it; the iteration's epoch begins here."""
        ...

    def epoch(self, it: Iterator[Any], reorder: Any, epoch: int, rank: int, batches: int, workers: int) -> Any:
        """A context manager around the loop over ``it`` (the epoch's span; ``reorder``: the loop's
        ``engine.batching.Reorder``, whose ``expected`` batch a wait is for)."""
        ...

    def take(self, parcel: Any) -> None:
        """A parcel rode with a group of batches (``Reorder.add`` returned it)."""
        ...

    def settled(self) -> bool:
        """Nothing more the observer waits for from the workers (every parcel arrived)."""
        ...

    def end(self, done: bool) -> Callable[[list[int | None]], None] | None:
        """The iteration ended. ``done``: every batch, and all :meth:`settled` waits for, arrived before the
        workers' stop (they finish on their own); False: the loop left early, or ran until the workers stopped
        (always so without workers). Returns what to run with the workers' pids once they exited (None:
        nothing)."""
        ...


class LoaderObserver(Protocol):
    """What the runtime attaches to each loader (``factory(loader)``, see :func:`set_factory`)."""

    def begin(self, workers: int, persistent: bool, reuse: bool, context: Any, tuned: bool) -> Iteration:
        """An iteration begins (after the tuner's ``before_epoch``, before the loader's position moves):
        ``workers`` DataLoader workers, ``persistent`` ones (``reuse``: this iteration reuses running ones),
        started in ``context``; ``tuned``: an auto-tuner is attached."""
        ...


class _NoIteration:
    """An iteration nobody records: ``delivered`` None, ``fetch`` the builtin ``next``."""

    ticket: Ticket | None = None
    count_bytes = False
    delivered: Callable[[int], None] | None = None
    fetch: Callable[[Iterator[Any]], Any] = next  # a builtin: no binding, no layer of ours per batch

    def start_workers(self, start: Callable[[], Iterator[Any]]) -> Iterator[Any]:
        return start()

    def epoch(self, it: Iterator[Any], reorder: Any, epoch: int, rank: int, batches: int, workers: int) -> Any:
        return self

    def __enter__(self) -> _NoIteration:
        return self

    def __exit__(self, et: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        return None

    def take(self, parcel: Any) -> None:
        return None

    def settled(self) -> bool:
        return True

    def end(self, done: bool) -> Callable[[list[int | None]], None] | None:
        return None


class NoObserver:
    """The default observer: records nothing."""

    _ITERATION = _NoIteration()

    def begin(self, workers: int, persistent: bool, reuse: bool, context: Any, tuned: bool) -> Iteration:
        return self._ITERATION


#: The observer of a loader when no runtime installed one.
NOOP = NoObserver()

_factory: Callable[[Any], LoaderObserver] | None = None


def set_factory(factory: Callable[[Any], LoaderObserver] | None) -> None:
    """Install ``factory(loader) -> LoaderObserver`` for the loaders built from now on (None: :data:`NOOP`)."""
    global _factory
    _factory = factory


def observer_for(loader: Any) -> LoaderObserver:
    """The observer of a new ``loader``: the installed factory's (run the root's ``loader_observer`` hook first
    when none is installed yet), else :data:`NOOP`."""
    if _factory is None:
        install = hooks.find(hooks.LOADER_OBSERVER)
        if install is not None:
            install()
    factory = _factory
    return factory(loader) if factory is not None else NOOP
