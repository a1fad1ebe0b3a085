"""The waits of a loop with no workers, as its own process splits them: read off the loop's timeline.

With ``num_workers=0`` the loop's process is its only worker: nothing in another process reads its waits, so
they need no ring in shared memory (:class:`~.waits.WaitRing`) and no stores on the loop's path. The loop's
``batch``/``stall`` timeline (``events.series.Timeline``) already holds every wait's boundaries; each time the
recorder takes its events (every flush, and at the end of the iteration), :meth:`TimelineWaits.taken` gets the
stall events cut off, and the loop's share of the wait split (``attribution.Attributor`` with ``workers`` 0)
settles them at its next fold. The share reads this object as it reads a ring (:meth:`generation`,
:meth:`head`, :meth:`waits`, :meth:`end_time`, :meth:`end_of`, :meth:`forgotten`).

What it gives up against a ring: nobody sees a wait before the timeline is taken, a tick late at most (the
tuner, which reads waits live, keeps its ring: see ``loader_observer``). Segments are kept from the begin of
the oldest event not taken yet (:meth:`head`'s second value), so a long wait still in progress keeps all its
segments, however long it lasts.
"""

from __future__ import annotations

import threading

import numpy as np

from streamscope.events.series import Timeline

__all__ = ["TimelineWaits"]

_EMPTY = np.empty(0, np.int64)


class TimelineWaits:
    """The complete waits of one iteration of a loop, as its timeline hands them over (see module doc).

    Args:
        since: CLOCK_MONOTONIC ns before the loop's first boundary: no wait begins earlier.
    """

    workers = 0

    def __init__(self, since: int) -> None:
        self._lock = threading.Lock()
        self._first = 0  # index of the first wait kept
        self._begins = _EMPTY
        self._ends = _EMPTY
        self._count = 0  # complete waits handed over
        self._horizon = since  # begin of the oldest event not handed over: no wait to come begins before it
        self._last_end = 0
        self._closed: int | None = None

    def since(self, t: int) -> None:
        """No wait begins before ``t`` (CLOCK_MONOTONIC ns): the loop starts now, before its first boundary."""
        with self._lock:
            self._horizon = t

    def listen(self, loop: Timeline) -> None:
        """Take the waits of ``loop`` (its second kind, ``stall``) from its takes on."""
        loop.listener = self.taken

    def taken(self, times: np.ndarray, codes: np.ndarray) -> None:
        """The timeline's ``listener``: events ``codes`` (``< 0``: a wait) ended at ``times[1:]``."""
        idx = np.flatnonzero(codes < 0)
        with self._lock:
            if len(idx):
                self._begins = np.concatenate((self._begins, times[idx]))
                self._ends = np.concatenate((self._ends, times[idx + 1]))
                self._count += len(idx)
                self._last_end = int(times[idx[-1] + 1])
            self._horizon = int(times[-1])

    def close(self) -> None:
        """The iteration ended (its timeline taken a last time): its waits are all here."""
        with self._lock:
            self._closed = self._count

    # --- what a share reads (as of a ring) ---

    def generation(self) -> tuple[int, int, int]:
        """(generation, its first wait, workers): one generation, from wait 0."""
        return 1, 0, 1

    def head(self) -> tuple[int, int]:
        """(waits handed over, the begin of the oldest event not handed over): the waits to come begin there or
        later (a wait in progress began there or later)."""
        with self._lock:
            return self._count, self._horizon

    def end_of(self, gen: int) -> int | None:
        return self._closed

    def forgotten(self, gen: int) -> bool:
        return False

    def waits(self, first: int, upto: int) -> tuple[np.ndarray, np.ndarray]:
        """Begins and ends of waits ``first`` to ``upto - 1``; those before ``first`` are dropped (one reader, which
        asks from where it settled last)."""
        with self._lock:
            drop = min(max(0, first - self._first), len(self._begins))
            if drop:
                self._begins, self._ends = self._begins[drop:], self._ends[drop:]
                self._first += drop
            a, b = max(0, first - self._first), max(0, upto - self._first)
            return self._begins[a:b].copy(), self._ends[a:b].copy()

    def end_time(self, i: int) -> int:
        """The end of wait ``i`` (0 when there is none, or it was dropped): no later wait begins before it."""
        with self._lock:
            if i == self._count - 1:
                return self._last_end
            k = i - self._first
            return int(self._ends[k]) if 0 <= k < len(self._ends) and i >= 0 else 0
