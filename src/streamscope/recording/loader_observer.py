"""The runtime's loader observer: what the event runtime records of a StreamingDataLoader.

The engine calls the protocol of ``streamscope.engine.observer`` and knows nothing else of the runtime; the
package root installs :class:`RecordingObserver` there (its ``loader_observer`` hook). One observer per loader:

* :meth:`RecordingObserver.begin` (each iteration, before the workers are told): the tuner's gauges when metrics
  are on and no tuner runs (the ``observer`` hook, ``streamscope.api.observe``), the trace parcels of
  non-persistent workers and their acks (:mod:`.loader_share`), the wait split's ring and its generation
  (:mod:`.waits`, :mod:`.attribution`); the workers get them as one :class:`~.loader_share.Ticket`.
* :class:`LoaderIteration`: the ``epoch`` span (begun when the workers are told, so the spans of persistent
  workers that start at once fall inside it), the loop's ``batch`` and ``stall`` timeline and the ring of its
  waits (one clock read per boundary), the parcels that arrive, and at the end the loader's counters.
* the loader's gauges (``events.observe``: batches, samples and bytes of the running iteration, time to first
  batch, queue depth, live workers).
"""

from __future__ import annotations

import multiprocessing
import os
import time
import weakref
from collections.abc import Callable, Iterator
from types import TracebackType
from typing import Any
from urllib.parse import urlsplit

from streamscope import events as ev
from streamscope._core import hooks
from streamscope.events import instruments, kinds
from streamscope.events.registry import M
from streamscope.events.series import Timeline
from streamscope.recording import attribution
from streamscope.recording.entry import deferred_flusher_in_children
from streamscope.recording.handover import Parcel
from streamscope.recording.loader_share import ParcelAcks, Ticket
from streamscope.recording.loop_waits import TimelineWaits
from streamscope.recording.recorder import RECORDER
from streamscope.recording.waits import WaitRing

__all__ = ["LoaderIteration", "RecordingObserver", "dataset_name"]

_now = ev.now
_cpu = time.thread_time_ns
_proc = time.process_time_ns


class RecordingObserver:
    """The observer of one loader (``engine.observer.LoaderObserver``): its wait ring (kept across iterations,
    so persistent workers keep reading the one they were given) and its gauges."""

    def __init__(self, loader: Any) -> None:
        self._loader = weakref.ref(loader)
        self.dataset_name = dataset_name(getattr(loader, "dataset", None))
        #: the ring of the loop's waits (the wait split, metrics on), else None; the tuner reads it
        self.wait_ring: WaitRing | None = None
        # the running iteration: (batches and samples at its start, its reorder, torch's iterator)
        self.live: tuple[int, int, Any, Any] | None = None
        self.iter_t0 = 0
        self.first_batch_s = 0.0
        ev.observe(self._observe)

    def begin(self, workers: int, persistent: bool, reuse: bool, context: Any, tuned: bool) -> LoaderIteration:
        """An iteration of ``workers`` workers begins (see ``engine.observer.LoaderObserver.begin``)."""
        loader = self._loader()
        if not tuned and RECORDER.metric_cats and loader is not None:
            hooks.get("observer")(loader)  # the capacity model's gauges without the tuner (tune/observe.py)
        self.iter_t0 = _now()
        # Non-persistent workers end their share with a parcel of trace events, which this process writes
        # (see .loader_share); persistent ones write their own (their flusher runs on, and their next epoch's
        # events must not reach the log before this parcel).
        parcels = workers if ev.ACTIVE and not persistent else 0
        # one flag per worker, set when its parcel arrives (a worker whose parcel was lost writes its own events)
        acks = ParcelAcks(workers) if parcels else None
        # the wait split (metrics on): the loop's waits go to a ring its workers read (.loader_share); each
        # iteration is a generation of the ring, begun before its workers start (.attribution)
        split = bool(RECORDER.metric_cats) and "stall" in ev.ACTIVE
        # a ring in shared memory when workers read it, or the tuner reads the waits live; else a loop with no
        # workers splits its waits from its timeline (.loop_waits: no ring, nothing stored per wait)
        shared = split and (workers > 0 or tuned)
        if shared:
            old, ctx = self.wait_ring, context or multiprocessing.get_context()
            if old is None or (not reuse and (old.workers < workers or old.start_method != ctx.get_start_method())):
                self.wait_ring = WaitRing(workers, ctx)
        ring = self.wait_ring if shared else None
        gen = ring.new_iteration(workers) if ring is not None else 0
        ticket = Ticket(
            parcel=parcels > 0,
            acks=acks.flags if acks is not None else None,
            ring=ring,
            workers=workers,
        )
        # the tuner's decode cost without workers: this process produces the batches (see _timed; with workers,
        # each worker counts its own, .loader_share)
        return LoaderIteration(self, ticket, acks, ring, gen, local=split and not shared, cpu=tuned and workers == 0)

    def _observe(self) -> list[tuple[Any, dict[str, Any], float]]:
        """The loader's metrics now (``events.observe``: read when the metrics are, never on the loop's path): the
        running iteration's part of the counters (the finished ones are in this process's counters) and gauges;
        nothing before its first iteration (a loader only built, e.g. to read its length, has no series)."""
        if not self.iter_t0:
            return []
        batches = samples = nbytes = queued = alive = 0
        live, loader = self.live, self._loader()
        if live is not None and loader is not None:
            b0, s0, reorder, it = live
            batches = loader.batches_consumed - b0
            samples = loader.num_samples_yielded - s0
            nbytes = reorder.delivered_bytes()  # those handed to the loop, as its samples
            try:
                queued = int(it._data_queue.qsize())
            except Exception:  # no worker queue (num_workers=0), or a platform without qsize
                queued = 0
            alive = sum(1 for w in getattr(it, "_workers", ()) if w.is_alive())
        attrs = {"dataset": self.dataset_name}
        return [
            (M.LOADER_BATCHES, attrs, batches),
            (M.LOADER_SAMPLES, attrs, samples),
            (M.LOADER_BYTES, attrs, nbytes),
            (M.LOADER_TIME_TO_FIRST_BATCH, attrs, self.first_batch_s),
            (M.LOADER_QUEUE_DEPTH, attrs, queued),
            (M.LOADER_WORKERS, attrs, alive),
        ]


class LoaderIteration:
    """One iteration of a loader as the runtime records it (``engine.observer.Iteration``).

    The loop's thread calls :attr:`delivered` once it is done with a batch and :attr:`fetch` for the workers'
    next message. Both are chosen when the loop starts (:meth:`epoch`) for what is recorded, so that nothing is
    tested per batch: ``delivered`` is None when neither ``batch`` nor ``stall`` is traced; ``fetch`` marks the
    boundary (and, with the wait split, writes the wait to the ring) only when they are; it takes parcels only
    when parcels come; its first call also measures the time to the first batch, then it is replaced by the
    steady one (the builtin ``next`` when nothing is recorded).
    """

    def __init__(
        self,
        owner: RecordingObserver,
        ticket: Ticket,
        acks: ParcelAcks | None,
        ring: WaitRing | None,
        gen: int,
        local: bool = False,
        cpu: bool = False,
    ) -> None:
        self.ticket = ticket
        self.count_bytes = bool(RECORDER.metric_cats)
        self.delivered: Callable[[int], None] | None = None
        self.fetch: Callable[[Iterator[Any]], Any] = self._first
        self._steady: Callable[[Iterator[Any]], Any] = next
        self._owner = owner
        self._acks = acks
        self._ring = ring
        self._gen = gen
        self._told = 0
        self._span: Any = None
        self._loop: Any = None
        self._own: attribution.Attributor | None = None
        self._waits: WaitRing | None = None
        #: the wait split of a loop with no workers, from its timeline (begin() decided: no ring)
        self._local: TimelineWaits | None = TimelineWaits(0) if local else None
        self._cpu = cpu
        self._inner: Callable[[Iterator[Any]], Any] = next  # what _timed wraps
        self._p = self._c = 0  # process and loop-thread CPU (ns) when the last fetch ended
        self._reorder: Any = None
        self._epoch = self._rank = 0
        self._marks: list[int] = []
        self._mark: Callable[[int], None] = self._marks.append
        self._put: Callable[[int], None] = self._marks.append  # (both replaced by the loop's timeline)

    def start_workers(self, start: Callable[[], Iterator[Any]]) -> Iterator[Any]:
        """Tell the workers (``start()``): the epoch's span begins here (persistent workers start on their share
        at once, before the loop asks for a first batch: their spans fall inside it in a trace)."""
        self._told = _now()
        # workers that hand their events over need no flusher thread unless their epoch runs long
        with deferred_flusher_in_children(self.ticket.parcel):
            return start()

    def epoch(self, it: Iterator[Any], reorder: Any, epoch: int, rank: int, batches: int, workers: int) -> Any:
        """The loop over ``it`` begins (see ``engine.observer.Iteration.epoch``)."""
        owner, loader = self._owner, self._owner._loader()
        self._reorder = reorder
        self._epoch, self._rank = epoch, rank
        if loader is not None:
            owner.live = (loader.batches_consumed, loader.num_samples_yielded, reorder, it)
        ring = self._ring
        waits = ring if ring is not None and RECORDER.metric_cats and "stall" in ev.ACTIVE else None
        self._waits = waits
        if waits is not None and workers == 0:
            self._own = attribution.start(waits, 0)  # the loop's own process decodes: it splits its waits
        elif self._local is not None:
            self._local.since(_now())  # the same, from its timeline (no ring: see begin())
            self._own = attribution.start(self._local, 0)
        self._span = kinds.epoch(t0=self._told, epoch=epoch, rank=rank, batches=batches, workers=workers)
        return self

    def __enter__(self) -> LoaderIteration:
        self._span.__enter__()
        # One event per batch each, back to back: the time the loop held the batch, and its wait for the next
        # one (a stall's value is the batch it waited for). One clock read per boundary.
        b, st = kinds.BATCH, kinds.STALL
        loop = ev.timeline(
            (b.name, b.cat, "batch", {"epoch": self._epoch, "rank": self._rank}),
            (st.name, st.cat, "batch", {"epoch": self._epoch}),
        )
        self._loop = loop
        on = "batch" in ev.ACTIVE or "stall" in ev.ACTIVE  # else no clock reads at all
        self._mark, self._put = loop.mark, loop.put
        waits = self._waits
        # the last boundary begins a wait (waits needs "stall" on: the loop is a Timeline then)
        self._marks = loop.marks if waits is not None and isinstance(loop, Timeline) else []
        if self._local is not None and isinstance(loop, Timeline):
            self._local.listen(loop)
        if on:
            self._mark(_now())
            self.delivered = self._delivered
            self._steady = self._split if waits is not None else self._marked
        elif self._acks is not None:
            self._steady = self._parcels
        if self._cpu:
            self._inner, self._steady = self._steady, self._timed
            self._p, self._c = _proc(), _cpu()
        return self

    def __exit__(self, et: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        try:
            if self._loop is not None:
                self._loop.finish()
        finally:
            self._span.__exit__(et, exc, tb)

    # --- the loop's thread, per batch ---

    def _delivered(self, j: int) -> None:
        """The loop is done with batch ``j``: the end of its ``batch`` event, the begin of what follows."""
        self._mark(_now())
        self._put(j)

    def _first(self, it: Iterator[Any]) -> Any:
        """The first message of the epoch: the time to the first batch, then the steady fetch from now on."""
        item = self._steady(it)
        if item is not None:
            owner = self._owner
            owner.first_batch_s = (_now() - owner.iter_t0) / 1e9
            self.fetch = self._steady
        return item

    def _parcels(self, it: Iterator[Any]) -> Any:
        """``next(it)``, taking a parcel that comes alone (None then): nothing else recorded."""
        item = next(it)
        if type(item) is Parcel:
            self._acks.take(item)  # type: ignore[union-attr]  # a worker's last trace events (no boundary)
            return None
        return item

    def _marked(self, it: Iterator[Any]) -> Any:
        """``next(it)`` and the boundary after it: the loop's wait ends."""
        try:
            item = next(it)
        except BaseException:
            self._mark(_now())
            self._put(~self._reorder.expected)
            raise
        if type(item) is Parcel:
            self._acks.take(item)  # type: ignore[union-attr]  # a worker's last trace events (no boundary)
            return None
        self._mark(_now())
        self._put(~self._reorder.expected)
        return item

    def _split(self, it: Iterator[Any]) -> Any:
        """:meth:`_marked`, the wait also written to the ring the workers read (the wait split)."""
        marks, waits = self._marks, self._waits
        waits.open_wait(marks[-1])  # type: ignore[union-attr]  # WaitRing.begin, with no Python frame
        try:
            item = next(it)
        except BaseException:
            t = _now()
            waits.end(marks[-1], t)  # type: ignore[union-attr]
            self._mark(t)
            self._put(~self._reorder.expected)
            raise
        if type(item) is Parcel:
            self._acks.take(item)  # type: ignore[union-attr]  # a worker's last trace events (no boundary)
            return None
        t = _now()
        waits.end(marks[-1], t)  # type: ignore[union-attr]
        self._mark(t)
        self._put(~self._reorder.expected)
        return item

    def _timed(self, it: Iterator[Any]) -> Any:
        """The steady fetch, with the CPU it took to produce the batch (no workers, the tuner on): the process's CPU
        since the last batch less the loop thread's own outside its fetches (the step). What workers would take
        off this process: the decoding in the fetch and the download threads' work, which at num_workers 0 share
        one interpreter with the loop (measured at S3 +50 ms: 3.2 ms a batch in the fetch, 10.8 in the process)."""
        c0 = _cpu()
        item = self._inner(it)
        p1, c1 = _proc(), _cpu()
        instruments.add(M.LOADER_DECODE_CPU, max(0, (p1 - self._p) - (c0 - self._c)) * 1e-9)
        self._p, self._c = p1, c1
        return item

    # --- the rest of the iteration ---

    def take(self, parcel: Any) -> None:
        """A worker's last trace events, with its last group."""
        self._acks.take(parcel)  # type: ignore[union-attr]

    def settled(self) -> bool:
        """Every trace parcel of the iteration arrived."""
        return self._acks is None or self._acks.pending <= 0

    def end(self, done: bool) -> Callable[[list[int | None]], None] | None:
        """The iteration ended: the ring's generation closes, the loop's own share of the wait split stops, the
        loader's counters take the iteration's part; parcels not taken are abandoned unless ``done`` (every
        parcel arrived). Returns what settles the parcels the workers left at exit, to run once they are gone."""
        if self._ring is not None:
            self._ring.close_iteration(self._gen)  # the loop waits no more: what the workers left is settled
        if self._local is not None:
            self._local.close()  # the timeline was taken a last time as the loop ended (__exit__)
        if self._own is not None:
            attribution.stop(self._own)
        owner, loader = self._owner, self._owner._loader()
        with instruments.LOCK:  # a read of the metrics sees the running part or the counters, never neither
            live, owner.live = owner.live, None
            if live is not None and loader is not None and ev.ACTIVE:
                name = owner.dataset_name
                instruments.add(M.LOADER_BATCHES, loader.batches_consumed - live[0], dataset=name)
                instruments.add(M.LOADER_SAMPLES, loader.num_samples_yielded - live[1], dataset=name)
                instruments.add(M.LOADER_BYTES, live[2].delivered_bytes(), dataset=name)
        acks = self._acks
        if acks is None:
            return None
        if done:
            return acks.drop_left  # the loop took every parcel: drop what the workers left at exit
        acks.abandon_rest()  # parcels not taken are abandoned: their workers write them themselves
        return acks.claim_left  # a worker that exited before the loop decided left its parcel behind


def dataset_name(ds: Any) -> str:
    """A short name of the dataset (the metrics' ``dataset`` attribute): the last part of its input directory,
    else its class."""
    d = getattr(ds, "input_dir", None)
    raw = getattr(d, "url", None) or getattr(d, "path", None) or (d if isinstance(d, str) else None)
    name = ""
    if raw:
        parts = urlsplit(str(raw))
        # the path's last part, else the bucket without any user:password@ (never a credential in a label)
        name = os.path.basename(parts.path.rstrip("/")) or parts.netloc.rpartition("@")[2]
    return (name or type(ds).__name__)[:64]
