"""The per-process I/O runtime of raw-file streaming: a small thread pool with a live concurrency limit.

One :class:`IORuntime` per process, made on first use by :func:`runtime`. A forked child never touches its
parent's runtime (``os.register_at_fork`` drops it; a pid check backs that up), so a DataLoader worker starts
with no threads, no queues and no locks held by threads that do not exist in it.

Work is queued in two lanes: *demand* (what the training loop is waiting for) is always started before
*ahead* (prefetch). At most ``limit`` tasks run at once; threads start only when there is queued work and
fewer than ``limit`` are running, and idle threads exit after a while. ``set_limit`` may be called at any time
(the dataset reads the live ``raw_concurrency`` knob at every batch and passes it here).
"""

from __future__ import annotations

import os
import threading
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future
from contextlib import contextmanager
from typing import Any, TypeVar

from streamscope._core import config

__all__ = ["IORuntime", "countdown", "gather", "runtime", "settle", "then"]


T = TypeVar("T")
_IDLE_EXIT_S = 20.0


class IORuntime:
    """A demand-first task queue served by up to ``limit`` daemon threads."""

    def __init__(self, limit: int = 8) -> None:
        self.pid = os.getpid()
        self._cv = threading.Condition(threading.Lock())
        self._demand: deque[tuple[Future[Any], Callable[..., Any], tuple[Any, ...]]] = deque()
        self._ahead: deque[tuple[Future[Any], Callable[..., Any], tuple[Any, ...]]] = deque()
        self._threads = 0
        self._idle = 0
        self._cap = max(1, int(config.get("raw_io_threads")))
        self._limit = max(1, min(limit, self._cap))
        self._held = threading.local()
        self.started = 0  # tasks started, approximately (for tests and metrics)

    @property
    def limit(self) -> int:
        """Current cap on concurrently running tasks."""
        return self._limit

    @property
    def threads(self) -> int:
        """Threads alive now."""
        return self._threads

    def set_limit(self, limit: int) -> None:
        """Change the cap on running tasks (clamped to 1..``raw_io_threads``); takes effect at once."""
        limit = max(1, min(int(limit), self._cap))
        if limit == self._limit:
            return
        with self._cv:
            self._limit = limit
            self._spawn_locked()
            self._cv.notify_all()

    @contextmanager
    def batch(self) -> Iterator[None]:
        """Queue every ``submit`` made by this thread inside the block at once, on exit (one lock round)."""
        if getattr(self._held, "items", None) is not None:
            yield
            return
        held: list[tuple[Any, Any]] = []
        self._held.items = held
        try:
            yield
        finally:
            self._held.items = None
            if held:
                with self._cv:
                    for lane, item in held:
                        lane.append(item)
                    self._wake_locked(len(held))

    def submit(self, fn: Callable[..., T], *args: Any, ahead: bool = False) -> Future[T]:
        """Queue ``fn(*args)``; ``ahead=True`` puts it in the prefetch lane behind all demand work."""
        fut: Future[T] = Future()
        lane = self._ahead if ahead else self._demand
        held = getattr(self._held, "items", None)
        if held is not None:
            held.append((lane, (fut, fn, args)))
            return fut
        with self._cv:
            lane.append((fut, fn, args))
            self._wake_locked(1)
        return fut

    def _wake_locked(self, n: int) -> None:
        if self._idle:
            self._cv.notify(min(n, self._idle))
        self._spawn_locked()

    def _spawn_locked(self) -> None:
        queued = len(self._demand) + len(self._ahead)
        while self._threads < self._limit and queued > self._idle:
            self._threads += 1
            queued -= 1
            t = threading.Thread(target=self._serve, name="streamscope-raw-io", daemon=True)
            t.start()

    def _next(self) -> tuple[Future[Any], Callable[..., Any], tuple[Any, ...]] | None:
        """The next task, or None when this thread should exit (idle too long, or above the limit)."""
        while True:
            if self._threads > self._limit:
                with self._cv:
                    if self._threads > self._limit:
                        self._threads -= 1
                        return None
            try:
                return self._demand.popleft()
            except IndexError:
                pass
            try:
                return self._ahead.popleft()
            except IndexError:
                pass
            with self._cv:
                if self._demand or self._ahead:
                    continue
                self._idle += 1
                woke = self._cv.wait(_IDLE_EXIT_S)
                self._idle -= 1
                if not woke and not self._demand and not self._ahead:
                    self._threads -= 1
                    return None

    def _serve(self) -> None:
        while True:
            item = self._next()
            if item is None:
                return
            self.started += 1
            fut, fn, args = item
            if not fut.set_running_or_notify_cancel():
                continue
            try:
                result = fn(*args)
            except BaseException as exc:  # noqa: BLE001 - handed to the waiter
                fut.set_exception(exc)
            else:
                fut.set_result(result)
            del fut, fn, args, item


_runtime: IORuntime | None = None
_runtime_lock = threading.Lock()


def runtime() -> IORuntime:
    """This process's runtime (created on first use, never inherited across fork)."""
    global _runtime
    rt = _runtime
    if rt is not None and rt.pid == os.getpid():
        return rt
    with _runtime_lock:
        if _runtime is None or _runtime.pid != os.getpid():
            _runtime = IORuntime()
        return _runtime


def _forget_after_fork() -> None:
    global _runtime, _runtime_lock
    _runtime = None
    _runtime_lock = threading.Lock()


os.register_at_fork(after_in_child=_forget_after_fork)


def gather(futures: Sequence[Future[Any]]) -> Future[list[Any]]:
    """A future of all results in order; fails with the first exception seen (the others still run)."""
    out: Future[list[Any]] = Future()
    out.set_running_or_notify_cancel()
    if not futures:
        out.set_result([])
        return out
    remaining = [len(futures)]
    lock = threading.Lock()

    def done(f: Future[Any]) -> None:
        with lock:
            remaining[0] -= 1
            last = remaining[0] == 0
        if out.done():
            return
        exc = f.exception() if not f.cancelled() else None
        if f.cancelled():
            _settle(out, exc=RuntimeError("a part of this item was cancelled"))
        elif exc is not None:
            _settle(out, exc=exc)
        elif last:
            _settle(out, result=[g.result() for g in futures])

    for f in futures:
        f.add_done_callback(done)
    return out


def countdown(futures: Sequence[Future[Any]], left: int) -> Future[None]:
    """A future that settles (with None) once at most ``left`` of ``futures`` are unfinished, or one fails."""
    out: Future[None] = Future()
    out.set_running_or_notify_cancel()
    remaining = [len(futures)]
    if remaining[0] <= left:
        out.set_result(None)
        return out
    lock = threading.Lock()

    def done(f: Future[Any]) -> None:
        with lock:
            remaining[0] -= 1
            now_left = remaining[0]
        if now_left <= left or f.cancelled() or f.exception() is not None:
            _settle(out, result=None)

    for f in futures:
        f.add_done_callback(done)
    return out


def then(fut: Future[Any], fn: Callable[[Any], T]) -> Future[T]:
    """A future of ``fn(fut.result())``; ``fn`` runs in the thread that completes ``fut``."""
    out: Future[T] = Future()
    out.set_running_or_notify_cancel()

    def done(f: Future[Any]) -> None:
        if f.cancelled():
            _settle(out, exc=RuntimeError("cancelled"))
            return
        exc = f.exception()
        if exc is not None:
            _settle(out, exc=exc)
            return
        try:
            _settle(out, result=fn(f.result()))
        except BaseException as e:  # noqa: BLE001 - handed to the waiter
            _settle(out, exc=e)

    fut.add_done_callback(done)
    return out


def _settle(fut: Future[Any], result: Any = None, exc: BaseException | None = None) -> bool:
    """Complete ``fut`` unless it already is; True when this call completed it."""
    try:
        if exc is not None:
            fut.set_exception(exc)
        else:
            fut.set_result(result)
        return True
    except Exception:  # InvalidStateError: someone else settled it first
        return False


settle = _settle
