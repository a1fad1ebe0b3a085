"""A loader worker's side of the loader observer: its share of an epoch, then its trace events (parcels, acks).

A non-persistent DataLoader worker lives one epoch. While tracing or metrics are on it ends its share with a
parcel of the events it recorded and has not written, and its metrics snapshot (:func:`worker_share`,
``recording.hand_over``); the main process writes them (``recording.adopt``). The parcel rides with the worker's
last group of batches (sent once the worker's batch generator has finished, so its cleanup and last events are
in), or, when batches are sent one by one, comes as a message of its own after the last one.

Each parcel received is acknowledged in shared memory (:class:`ParcelAcks`): torch tells an exhausted worker to
exit as soon as its stop arrives, possibly before the loop has taken a parcel queued behind a later batch; such a
worker leaves its parcel in the run directory and exits at once. When the epoch completes the loader drops those
files (it took every parcel, :meth:`ParcelAcks.drop_left`); when the loop leaves early it marks the parcels it
did not take as abandoned (their workers, if still running, write their events themselves) and, once the workers
are gone, adopts the ones they left (:meth:`ParcelAcks.claim_left`). Every event is written once.

What a worker needs of all this travels as one :class:`Ticket` (``engine.batch_mode.BatchMode.ticket``, pickled
to spawned workers with the dataset); the engine calls :meth:`Ticket.share` on a worker's items and knows nothing
else of it (``engine.observer``). The loader's side is :mod:`.loader_observer`.
"""

from __future__ import annotations

import multiprocessing
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from torch.utils.data import get_worker_info

from streamscope import events as ev
from streamscope.events import instruments, kinds
from streamscope.events.registry import M
from streamscope.recording import attribution
from streamscope.recording.entry import adopt, claim_spool, drop_spool, hand_over
from streamscope.recording.handover import Parcel
from streamscope.recording.waits import WaitRing

__all__ = ["PARCEL_ABANDONED", "PARCEL_PENDING", "PARCEL_RECEIVED", "ParcelAcks", "Ticket", "worker_share"]


#: A worker's parcel flag: not yet answered, received by the loop, abandoned by it.
PARCEL_PENDING, PARCEL_RECEIVED, PARCEL_ABANDONED = 0, 1, 2
#: The flag as ``recording.hand_over``'s ``received()`` answers it.
_ACK = {PARCEL_PENDING: None, PARCEL_RECEIVED: True, PARCEL_ABANDONED: False}


class ParcelAcks:
    """Main-process side of one epoch's parcels: one shared flag per worker, and how many are still to come.

    Args:
        num_workers: the epoch's workers, one parcel each.
    """

    def __init__(self, num_workers: int) -> None:
        self.flags = multiprocessing.RawArray("b", num_workers)
        self.pending = num_workers

    def take(self, parcel: Parcel) -> None:
        """A worker's parcel arrived (with its last group, or alone): mark it received, adopt its events."""
        adopt(parcel)  # first: the worker may exit as soon as it sees the flag (see recording.handover)
        flags = self.flags
        if 0 <= parcel.tag < len(flags):
            flags[parcel.tag] = PARCEL_RECEIVED
        self.pending -= 1

    def abandon_rest(self) -> None:
        """The loop left the epoch early: the parcels not taken are abandoned (their workers write them)."""
        flags = self.flags
        for w in range(len(flags)):
            flags[w] = flags[w] or PARCEL_ABANDONED

    def claim_left(self, pids: list[int | None]) -> None:
        """Once the workers (``pids``, by worker id) are gone: adopt the parcels they left in the run directory
        before the loop decided, unless the loop took them itself."""
        flags = self.flags
        for w, pid in enumerate(pids):
            if pid is None:
                continue
            if flags[w] == PARCEL_RECEIVED:
                drop_spool(pid)
            else:
                claim_spool(pid, adopt=True)

    @staticmethod
    def drop_left(pids: list[int | None]) -> None:
        """A complete epoch: remove the parcels its workers left at exit (the loop took every parcel)."""
        for pid in pids:
            if pid is not None:
                drop_spool(pid)


@dataclass(frozen=True)
class Ticket:
    """What a loader iteration's workers need of the runtime (pickled to spawned workers with the dataset).

    Attributes:
        parcel: end the share with a parcel of the worker's trace events (non-persistent workers, tracing).
        acks: the loader's per-worker flags marking each parcel received or abandoned (``ParcelAcks.flags``).
        ring: the ring of the loop's waits the workers read (the wait split: metrics and ``stall`` on), else None.
        workers: the loader's number of workers.
    """

    parcel: bool = False
    acks: Any = None
    ring: WaitRing | None = None
    workers: int = 1

    def share(self, items: Iterator[Any]) -> Iterator[Any]:
        """A DataLoader worker's items of one epoch, then its trace events (:func:`worker_share`)."""
        return worker_share(items, self)


def worker_share(items: Iterator[Any], ticket: Ticket) -> Iterator[Any]:
    """A DataLoader worker's items of one epoch, then its trace events.

    When the loader asks for them (``ticket.parcel``: non-persistent workers while tracing or aggregating
    metrics) the worker hands over a :class:`~streamscope.recording.Parcel` with the events it recorded and has
    not written, and its metrics snapshot: the main process writes them, so a worker that lives one epoch
    neither opens the log nor encodes (a fresh process pays several times a warm one's cost for that) nor writes
    a snapshot file. The parcel rides with the worker's last group (a group whose ``last`` is set, sent once its
    batch generator has finished; see ``engine.batching.Group``), or else comes as an item of its own after the
    last item. The loader marks each parcel it takes in ``ticket.acks`` (received, or abandoned by a loop that
    left the epoch early); a worker whose parcel was abandoned writes it itself at exit.

    Otherwise, and when the share is abandoned (early ``break``, an error: then after a ``crash`` instant with the
    exception's class and message), the worker writes its events itself as the share ends, while the loop still
    consumes the batches it queued: its exit, on the epoch's critical path, is then short. (Its metrics snapshot
    is written at exit, final, a moment later.)

    With metrics on the loader passes the ring of its loop's waits (``ticket.ring``): the worker then counts its
    share of the wait split (:mod:`streamscope.recording.attribution`), its batch production as ``decode``,
    until its share ends.
    """
    parcel = bool(ticket.parcel)
    handed = False
    finished = False
    poll = ev.poll  # a flusher deferred at the fork starts once a tick is due (a long epoch)
    ring = ticket.ring
    if ring is not None:
        attribution.start(ring, int(ticket.workers or 1), instruments.add_key)
        items = _produced(items, attribution.CLOCK)
    try:
        for item in items:
            poll()
            if parcel and type(item) is not tuple and getattr(item, "last", False):
                item.parcel = _hand_over(ticket)  # no queue message of its own, no wait for it in the loop
                handed = True
            yield item
        finished = True
    except Exception as exc:
        # recorded here, in the worker, and written by the flush below before torch sends the error to the loop
        kinds.crash(exc)
        raise
    finally:
        if not finished:
            close = getattr(items, "close", None)
            if close is not None:
                close()  # as ``yield from`` would: the generators below clean up first
            if ring is not None:
                attribution.stop()
            if ev.ACTIVE:
                ev.flush(publish=False)
    if parcel:
        if not handed:
            yield _hand_over(ticket)
    else:
        if ring is not None:
            attribution.stop()
        if ev.ACTIVE:
            ev.flush(publish=False)


def _produced(items: Iterator[Any], clock: attribution.StageClock) -> Iterator[Any]:
    """``items``, the time spent producing each shown on ``clock`` as ``decode`` (the worker's batch work)."""
    it = iter(items)
    cpu = time.thread_time_ns  # the tuner's decode cost: thread CPU per batch, not wall (one pair per item)
    try:
        while True:
            clock.enter(attribution.DECODE)
            c0 = cpu()
            try:
                item = next(it)
            except StopIteration:
                return
            finally:
                clock.exit(attribution.DECODE)
            # Counted with the item it produced, so it rides with that item's parcel; a count after the last item
            # (the search for the end) would be left for the worker's exit to write as a snapshot file.
            instruments.add(M.LOADER_DECODE_CPU, (cpu() - c0) * 1e-9)
            yield item
    finally:
        close = getattr(it, "close", None)
        if close is not None:
            close()


def _hand_over(ticket: Ticket) -> Parcel:
    """This worker's parcel (``recording.hand_over``), tagged with its worker id and asking the loader's acks."""
    if ticket.ring is not None:
        attribution.stop()  # its share of the wait split is complete: in the parcel's snapshot
    info = get_worker_info()
    wid = info.id if info is not None else -1
    acks = ticket.acks  # the loader marks each parcel: received or abandoned (pending: not yet)
    received = (lambda: _ACK.get(acks[wid], False)) if acks is not None and 0 <= wid < len(acks) else None
    return hand_over(wid, received)
