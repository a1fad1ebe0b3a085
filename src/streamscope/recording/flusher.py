"""The recorder's background thread: wakes every tick and runs the flush it was given."""

from __future__ import annotations

import _thread
import threading
from collections.abc import Callable

__all__ = ["Flusher"]


class Flusher:
    """A daemon thread started with ``_thread``: in a freshly forked DataLoader worker a ``threading.Thread``
    costs three times as much to start (its objects' pages are copied on first write) and its start waits until
    the thread runs, on the way to the worker's first batch.

    ``target(flusher)`` runs on the thread and loops on :meth:`wait` until it returns True.
    """

    __slots__ = ("_stop", "_done", "ident")

    def __init__(self, target: Callable[[Flusher], None]) -> None:
        self._stop = _thread.allocate_lock()
        self._stop.acquire()  # released by stop()
        self._done = _thread.allocate_lock()
        self._done.acquire()  # released when the thread ends
        self.ident: int | None = None
        _thread.start_new_thread(self._main, (target,))

    def _main(self, target: Callable[[Flusher], None]) -> None:
        self.ident = threading.get_ident()
        try:
            target(self)
        finally:
            self._done.release()

    def wait(self, timeout: float) -> bool:
        """Sleep up to ``timeout`` seconds; True once :meth:`stop` was called."""
        if self._stop.acquire(timeout=timeout):
            self._stop.release()  # stays released: every later wait returns at once
            return True
        return False

    def stop(self) -> None:
        """Ask the thread to end (it finishes its current flush first). Idempotent."""
        try:
            self._stop.release()
        except RuntimeError:  # already stopped
            pass

    def stopping(self) -> bool:
        return not self._stop.locked()

    def is_alive(self) -> bool:
        return self._done.locked()

    def join(self, timeout: float) -> None:
        if self._done.acquire(timeout=timeout):
            self._done.release()
