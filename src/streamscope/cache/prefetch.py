"""Fetch chunks ahead of a reader on a background thread, in the order the reader will need them.

The reader hands over its *schedule*: the chunks it will read, in first-use order. The thread keeps up to
``depth`` chunks beyond the reader's current one fetched and leased. ``depth`` is read live on every loop (a
dataset passes its knob board's ``prefetch_depth``, which the main process and the auto-tuner move while the
job runs, in every DataLoader worker). Up to ``download_concurrency`` chunks (also a live knob) are fetched at
once, on a pool of threads that grows when the knob is raised, so downloads overlap each other and the reader;
the reader is served as soon as its own chunk is local. Without a board the knobs are this process's
(``config.get``). A change reaches the fetch threads at the reader's next chunk, or within 0.5 s; with tracing
on, a prefetcher that sees the board change records a ``knobs_seen`` ``tune`` instant with the values it uses. With the live ``prefetch_head_first`` knob, a download of a later
chunk starts only once the chunk the reader is on (or waits for) is local, so a blocked reader does not share
the bandwidth with chunks it needs later (this is what makes the first batch come early). The reader blocks in :meth:`Prefetcher.get` on a condition
variable (no polling of the file system); an error on a fetch thread is re-raised in the reader at once.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

from streamscope import events as ev
from streamscope._core import config
from streamscope._core.board import BoardGroup, KnobBoard
from streamscope._core.errors import ChunkWaitTimeoutError
from streamscope.cache.chunk_cache import ChunkCache
from streamscope.events import kinds
from streamscope.events.registry import M

__all__ = ["MAX_FETCH_THREADS", "Prefetcher", "live_concurrency", "live_depth"]


def live_depth(default: int) -> int:
    """The prefetch depth now from this process's knobs (no board): the ``prefetch_depth`` knob when positive,
    else ``default``."""
    value = int(config.get("prefetch_depth") or 0)
    return value if value > 0 else max(0, int(default))


#: Threads one prefetcher may start, whatever ``download_concurrency`` says.
MAX_FETCH_THREADS = 32


def live_concurrency(read: Callable[[], Any] | None = None) -> int:
    """How many chunks may be fetched at once now: ``read()`` (a board's ``download_concurrency`` reader), else
    this process's knob; 1..MAX_FETCH_THREADS."""
    value = read() if read is not None else config.get("download_concurrency")
    return min(MAX_FETCH_THREADS, max(1, int(value)))


class Prefetcher:
    """Background fetching of ``schedule`` (chunk indexes in first-use order) into ``cache``.

    Position ``p`` of the schedule is leased once by the thread; the reader calls :meth:`get(p)` to wait for it
    and :meth:`release(p)` after its last use. ``knobs``: the dataset's knob board (``download_concurrency``
    and ``prefetch_head_first`` are read from it), else this process's knobs.
    """

    def __init__(
        self,
        cache: ChunkCache,
        schedule: Sequence[int],
        depth: Callable[[], int],
        knobs: KnobBoard | BoardGroup | None = None,
    ) -> None:
        self.cache = cache
        self.schedule = list(schedule)
        self._depth = depth
        if knobs is not None:
            self._concurrency: Callable[[], Any] | None = knobs.reader("download_concurrency")
            self._head_first: Callable[[], Any] = knobs.reader("prefetch_head_first")
            self._version: Callable[[], int] | None = knobs.version
            self._seen = knobs.version()
        else:
            self._concurrency = None
            self._head_first = partial(config.get, "prefetch_head_first")
            self._version = None
            self._seen = 0
        self._cond = threading.Condition()
        self._ready: dict[int, str] = {}
        self._errors: dict[int, BaseException] = {}
        self._released: set[int] = set()
        self._next = 0  # next schedule position the thread fetches
        self._want = 0  # highest position the reader asked for
        self._closed = False
        self._active = 0  # fetches under way
        self._threads: list[threading.Thread] = []
        ev.observe(self._observe)
        with self._cond:
            self._grow()

    def _grow(self) -> None:
        """Start fetch threads up to the live concurrency (called with the lock held)."""
        want = live_concurrency(self._concurrency)
        while len(self._threads) < want and len(self._threads) < max(1, len(self.schedule)):
            t = threading.Thread(target=self._run, name=f"streamscope-prefetch-{len(self._threads)}", daemon=True)
            self._threads.append(t)
            t.start()

    def _may_start(self) -> bool:
        if self._version is not None and self._version() != self._seen:
            self._knobs_seen()
        if not (
            self._next < len(self.schedule)
            and self._next <= self._want + max(0, self._depth())
            and self._active < live_concurrency(self._concurrency)
        ):
            return False
        if self._next > self._want and self._head_first():
            # the reader's chunk first: a later chunk starts only once the one it waits for (or will wait for
            # next) is local, so they do not split the bandwidth while the training loop is idle
            return self._want in self._ready or self._want in self._errors or self._want in self._released
        return True

    def _knobs_seen(self) -> None:
        """The board changed: note the values this prefetcher uses from now on (called with the lock held)."""
        assert self._version is not None
        self._seen = self._version()
        if "tune" in ev.ACTIVE:
            kinds.knobs_seen(
                prefetch_depth=int(self._depth()),
                download_concurrency=live_concurrency(self._concurrency),
                prefetch_head_first=bool(self._head_first()),
            )

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._closed and not self._may_start():
                    self._cond.wait(timeout=0.5)  # re-read the live knobs now and then
                    self._grow()
                if self._closed:
                    return
                pos = self._next
                self._next += 1
                self._active += 1
                if self._active > 1:
                    kinds.downloads_in_flight(self._active)
            try:
                self._fetch(pos)
            finally:
                with self._cond:
                    self._active -= 1
                    self._cond.notify_all()

    def _fetch(self, pos: int) -> None:
        chunk = self.schedule[pos]
        try:
            with kinds.prefetch(chunk=chunk, position=pos):
                path = self.cache.acquire(chunk, streaming=True)
        except BaseException as exc:  # handed to the reader, which raises it
            with self._cond:
                self._errors[pos] = exc
                self._cond.notify_all()
            return
        with self._cond:
            if self._closed or pos in self._released:
                self.cache.release(chunk)
            else:
                self._ready[pos] = path
            self._cond.notify_all()

    def get(self, pos: int) -> str:
        """Wait until schedule position ``pos`` is fetched; return its local path."""
        deadline = time.monotonic() + float(config.get("chunk_wait_timeout"))
        with self._cond:
            if pos > self._want:
                self._want = pos
                self._cond.notify_all()
            while pos not in self._ready:
                if pos in self._errors:
                    raise self._errors[pos]
                left = deadline - time.monotonic()
                if left <= 0:
                    raise ChunkWaitTimeoutError(
                        self.cache.path(self.schedule[pos]), float(config.get("chunk_wait_timeout"))
                    )
                self._cond.wait(timeout=left)
            return self._ready[pos]

    def _observe(self) -> list[tuple[ev.Metric, dict[str, object], float]]:
        """Its metrics now (``events.observe``: read at its process's flushes, never on the reader's path)."""
        if self._closed:
            return []
        return [(M.PREFETCH_DEPTH, {}, len(self._ready) + self._active), (M.DOWNLOAD_IN_FLIGHT, {}, self._active)]

    def release(self, pos: int) -> None:
        """The reader is done with schedule position ``pos``: drop its lease (eviction may follow)."""
        with self._cond:
            self._released.add(pos)
            had = self._ready.pop(pos, None)
        if had is not None:
            self.cache.release(self.schedule[pos])

    def close(self) -> None:
        """Stop the thread and drop every lease it still holds."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        for t in self._threads:
            t.join(timeout=5.0)
        with self._cond:
            ready = list(self._ready.items())
            self._ready.clear()
        for pos, _ in ready:
            self.cache.release(self.schedule[pos])
