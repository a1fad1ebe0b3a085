"""Handing batches from DataLoader workers to the training loop with few hand-offs and no fresh memory.

Each batch sent through a worker's result queue costs a pickle, a queue message and, per tensor storage, a
shared-memory file descriptor passed between processes. And every fresh shared-memory block costs page faults
and zeroing on first touch (measured: copying into fresh blocks took 3x longer than decoding the batch).

So a worker decodes its batches straight into an *arena*: a shared-memory block that the column collator
allocates from (:data:`streamscope.engine.collate.ALLOC`). Consecutive batches of the worker's sequence share
one arena and travel as one *group* (one queue message, one descriptor). The first group holds one batch (the
time to first batch stays low); later groups as many batches as fit in ``group_bytes`` (at most ``MAX_GROUP``).

Arenas are reused. The main process watches each received arena's storage with a weak reference; once the
training loop has dropped every tensor of a group, it marks the arena's slot free in a small shared array
(:class:`ArenaFlags`), and the worker decodes a later group into the same, already faulted-in, memory. A loop
that keeps its batches simply keeps their arenas busy: the worker then allocates new ones (at most
``MAX_SLOTS`` pooled per worker, then unpooled blocks that are freed normally), so a kept batch is never
overwritten.

Batches whose tensors do not come from the arena (a user ``collate_fn``, the sample-by-sample path) are packed
into one shared block per group as before (:func:`pack`). The main process unpacks groups and hands batches to
the loop in batch order (:class:`Reorder`).
"""

from __future__ import annotations

import bisect
import copy
import gc
import multiprocessing
import operator
import os
from collections.abc import Iterator
from typing import Any

import torch
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils.data import get_worker_info

from streamscope.engine import collate
from streamscope.engine.batch_mode import BatchMode

__all__ = [
    "Arena",
    "ArenaFlags",
    "ArenaPool",
    "Group",
    "MAX_GROUP",
    "MAX_SLOTS",
    "Reorder",
    "batch_bytes",
    "freeze_inherited_heap",
    "grouped",
    "pack",
    "worker_items",
]


MAX_GROUP = 16
MAX_SLOTS = 8
_ALIGN = 64


def _align(n: int) -> int:
    return -(-n // _ALIGN) * _ALIGN


def _new_shared(nbytes: int) -> torch.Tensor:
    base = torch.empty(0, dtype=torch.uint8)
    # torch leaves _typed_storage, StorageWeakRef and its expired() unannotated: hence the no-untyped-call ignores
    storage = base._typed_storage()._new_shared(nbytes, device=base.device)  # type: ignore[no-untyped-call]
    return base.new(storage).resize_(nbytes)


class Group(list):  # type: ignore[type-arg]
    """A list of ``(batch_number, batch)`` sent by a worker as one queue message.

    ``slot`` is the arena slot the batches live in (-1: none) and ``anchor`` the arena itself, so the main
    process can tell when the loop has dropped the group; ``nbytes`` the bytes they take (the loader's bytes
    delivered). ``last``: the worker's last group of the epoch, sent
    after its batch generator has finished (see :func:`grouped`); ``parcel``: the worker's trace parcel riding
    with it (see ``streamscope.recording.loader_share.worker_share``).
    """

    slot: int = -1
    anchor: torch.Tensor | None = None
    last: bool = False
    parcel: Any = None
    nbytes: int = 0  # tensor bytes of the group's batches (its arena's used bytes, or the packed block's size)
    #: its batch numbers in order, listed by the worker (the main process counts its bytes as they are handed out)
    numbers: list[int] | None = None


class ArenaFlags:
    """Busy flags of every worker's arena slots, shared between the main process and its workers.

    Created by the loader before its workers start; a worker sets its slot busy when it sends the arena, the main
    process clears it when the loop has dropped every tensor of the arena.
    """

    def __init__(self, num_workers: int) -> None:
        self.num_workers = max(1, num_workers)
        self.flags = multiprocessing.RawArray("b", self.num_workers * MAX_SLOTS)
        self._watch: list[tuple[StorageWeakRef, int]] = []

    def reset(self) -> None:
        """Forget every arena (the workers that owned them are gone)."""
        self._watch.clear()
        for i in range(len(self.flags)):
            self.flags[i] = 0

    def watch(self, group: Group) -> None:
        """Main process: start watching a received group's arena."""
        anchor = group.anchor
        group.anchor = None
        if anchor is not None and group.slot >= 0:
            self._watch.append((StorageWeakRef(anchor.untyped_storage()), group.slot))  # type: ignore[no-untyped-call]

    def release_dropped(self) -> None:
        """Main process: free the slots whose arenas the loop no longer references."""
        if not self._watch:
            return
        keep = []
        for ref, slot in self._watch:
            if ref.expired():  # type: ignore[no-untyped-call]
                self.flags[slot] = 0
            else:
                keep.append((ref, slot))
        self._watch = keep


class Arena:
    """A shared-memory block handed out front to back (a bump allocator)."""

    def __init__(self, slot: int, nbytes: int) -> None:
        self.slot = slot
        self.tensor = _new_shared(nbytes)
        self.used = 0

    @property
    def free(self) -> int:
        return self.tensor.numel() - self.used

    def take(self, nbytes: int) -> torch.Tensor | None:
        """``nbytes`` of the arena, or None when they do not fit."""
        size = _align(nbytes)
        if size > self.free:
            return None
        out = self.tensor[self.used : self.used + nbytes]
        self.used += size
        return out


class ArenaPool:
    """A worker's arenas: reuses slots the main process has freed, else makes new ones."""

    def __init__(self, flags: Any, worker_id: int, arena_bytes: int) -> None:
        self.flags = flags
        self.base = worker_id * MAX_SLOTS
        self.arena_bytes = arena_bytes
        self.slots: list[Arena | None] = [None] * MAX_SLOTS

    def acquire(self, nbytes: int) -> Arena:
        """An empty arena of at least ``nbytes`` (pooled when a slot is free)."""
        nbytes = max(nbytes, self.arena_bytes)
        for k, arena in enumerate(self.slots):
            if self.flags[self.base + k]:
                continue
            if arena is None or arena.tensor.numel() < nbytes:
                arena = Arena(self.base + k, nbytes)  # a grown arena replaces the slot's old one
                self.slots[k] = arena
            arena.used = 0
            return arena
        return Arena(-1, nbytes)  # every slot is still held by the loop: an unpooled block


def _tensors(obj: Any, out: list[torch.Tensor]) -> None:
    if isinstance(obj, torch.Tensor):
        out.append(obj)
    elif isinstance(obj, dict):
        for v in obj.values():
            _tensors(v, out)
    elif isinstance(obj, (list, tuple)):
        if obj and isinstance(obj[0], str):
            return  # a string column (the usual non-tensor list): nothing to find in it
        for v in obj:
            _tensors(v, out)


def _replace(obj: Any, table: dict[int, torch.Tensor]) -> Any:
    if isinstance(obj, torch.Tensor):
        return table.get(id(obj), obj)
    if isinstance(obj, dict):
        new = copy.copy(obj)
        for k, v in obj.items():
            new[k] = _replace(v, table)
        return new
    if isinstance(obj, tuple) and not hasattr(obj, "_fields"):
        return tuple(_replace(v, table) for v in obj)
    if isinstance(obj, list):
        return [_replace(v, table) for v in obj]
    return obj


def pack(group: Group) -> Group:
    """Copy every CPU tensor of ``group`` into one shared-memory block and refer to views of it."""
    tensors: list[torch.Tensor] = []
    for _, batch in group:
        _tensors(batch, tensors)
    tensors = [t for t in tensors if t.device.type == "cpu" and not t.is_sparse and t.numel() > 0]
    if not tensors:
        return group
    offsets = []
    total = 0
    for t in tensors:
        offsets.append(total)
        total += _align(t.numel() * t.element_size())
    arena = _new_shared(total)
    table: dict[int, torch.Tensor] = {}
    for t, off in zip(tensors, offsets):
        nbytes = t.numel() * t.element_size()
        dst = arena[off : off + nbytes].view(t.dtype).view(t.shape)
        dst.copy_(t)
        table[id(t)] = dst
    out = Group((j, _replace(batch, table)) for j, batch in group)
    out.nbytes = total
    return out


def batch_bytes(batch: Any) -> int:
    """Bytes of the tensors in ``batch``."""
    last = collate.LAST
    if batch is last[0]:
        n: int = last[1]  # the batch a collator of this process built last: it counted them
        return n
    if type(batch) is dict:
        # the usual batch (a dict of column tensors and string lists) without the generic walk: with metrics on,
        # a num_workers=0 loop counts every batch's bytes on its own thread
        n = 0
        for v in batch.values():
            if type(v) is torch.Tensor and v.layout is torch.strided:
                n += v.nbytes
            elif not (type(v) is list and v and type(v[0]) is str):  # a string column holds no tensor
                n += batch_bytes(v)
        return n
    tensors: list[torch.Tensor] = []
    _tensors(batch, tensors)
    return sum(t.numel() * t.element_size() for t in tensors)


class _ArenaAllocator:
    """The collator's allocation hook in a worker: takes from the current arena (None when it is full)."""

    def __init__(self, pool: ArenaPool) -> None:
        self.pool = pool
        self.arena: Arena | None = None
        self.hint = 0  # tensor bytes of the last batch: a new arena holds at least one such batch

    def __call__(self, nbytes: int) -> torch.Tensor | None:
        if self.arena is None:
            self.arena = self.pool.acquire(max(nbytes, self.hint + _ALIGN * 8))
        return self.arena.take(nbytes)


def grouped(
    batches: Iterator[tuple[int, Any]], group_bytes: int, flags: Any = None, worker_id: int = 0, total: int = -1
) -> Iterator[Group]:
    """Groups of consecutive ``(j, batch)`` of one worker, in arenas or packed (see module docstring).

    Args:
        batches: the worker's ``(batch_number, batch)`` sequence; the batches are decoded lazily, while the
            arena hook is installed.
        group_bytes: about how many tensor bytes a group holds (the arena size).
        flags: the loader's :class:`ArenaFlags` ``flags`` array; None packs every group into a fresh block.
        worker_id: this worker's index (its slots in ``flags``).
        total: how many batches ``batches`` yields (-1: unknown). Once that many have come, ``batches`` is run
            to its end (its cleanup, and the events it records, come first) and the group holding the last batch
            is marked :attr:`Group.last`. It is also marked when ``batches`` ends before a full group is sent.
    """
    alloc = _ArenaAllocator(ArenaPool(flags, worker_id, max(group_bytes, 1))) if flags is not None else None
    saved = collate.ALLOC[0]
    collate.ALLOC[0] = alloc
    try:
        yield from _groups(batches, group_bytes, alloc, total)
    finally:
        collate.ALLOC[0] = saved


def worker_items(items: Iterator[Any], mode: BatchMode) -> Iterator[Any]:
    """``items`` as the loader receives them: in a DataLoader worker through the loader observer's ticket
    (``engine.observer.Ticket.share``: e.g. its last trace events handed over), unchanged in the loop's own
    process (no generator layer on its path) or without a ticket."""
    if get_worker_info() is None:
        return items
    freeze_inherited_heap()
    ticket = mode.ticket
    return items if ticket is None else ticket.share(items)


_frozen_in = -1


def freeze_inherited_heap() -> None:
    """Move every object this process holds now out of the garbage collector's reach, once per process.

    A forked DataLoader worker inherits its parent's heap: about 166,000 tracked objects after importing
    torch. A full collection in the worker visits each of them and writes to its header, so every page of the
    inherited heap is copied (measured: 118-166 ms per collection, in the first epochs of a run). Frozen
    (``gc.freeze``), they are never visited; what the worker allocates afterwards is collected as usual.
    Garbage cycles inherited from the parent stay where they are, shared with it.
    """
    global _frozen_in
    pid = os.getpid()
    if _frozen_in != pid:
        _frozen_in = pid
        gc.freeze()


def _groups(
    batches: Iterator[tuple[int, Any]], group_bytes: int, alloc: _ArenaAllocator | None, total: int = -1
) -> Iterator[Group]:
    size = 1  # the first group is one batch
    later = 1
    group = Group()
    per = 0
    it = iter(batches)
    count = 0
    ahead: list[tuple[int, Any]] = []
    while True:
        item = ahead.pop() if ahead else next(it, None)  # None: the batches are tuples
        if item is None:
            break
        group.append(item)
        count += 1
        if per == 0:
            per = max(1, batch_bytes(item[1]))
            later = max(1, min(MAX_GROUP, group_bytes // per))
            if alloc is not None:
                alloc.hint = per
        if count == total:
            # the last batch: the generator runs to its end now, so its cleanup (and the events it records)
            # comes before the last group is sent
            more = next(it, None)
            if more is None:
                break
            ahead.append(more)  # more batches than announced: go on as usual
        full = len(group) >= size
        if alloc is not None and alloc.arena is not None and alloc.arena.free < per:
            full = True  # the next batch would not fit this arena
        if full:
            yield _numbered(_seal(group, alloc))
            group = Group()
            size = later
    if group:
        sealed = _numbered(_seal(group, alloc))
        sealed.last = True  # the generator has ended
        yield sealed


def _numbered(group: Group) -> Group:
    group.numbers = [j for j, _ in group]
    return group


def _seal(group: Group, alloc: _ArenaAllocator | None) -> Group:
    """Finish a group: mark its arena busy (the main process frees it), or pack it into one fresh block."""
    arena = alloc.arena if alloc is not None else None
    if alloc is None or arena is None or arena.used == 0:
        return pack(group)  # no batch of the group was decoded into an arena
    alloc.arena = None  # the next batch starts a new arena
    if arena.slot >= 0:
        alloc.pool.flags[arena.slot] = 1
        group.slot = arena.slot
    group.anchor = arena.tensor
    group.nbytes = arena.used
    return group


_FIRST = operator.itemgetter(0)


class Reorder:
    """Main-process side: turn worker messages (single batches or groups) into batches in batch order.

    ``bytes`` counts the tensor bytes received: a group's ``nbytes``, and with ``count_bytes`` (metrics on) a
    single batch's, measured as it comes. :meth:`delivered_bytes` counts those of the batches handed out."""

    def __init__(self, first: int, arenas: ArenaFlags | None = None, count_bytes: bool = False) -> None:
        self.expected = first
        self._held: dict[int, Any] = {}
        self._arenas = arenas
        self.bytes = 0
        self._count_bytes = count_bytes
        self._single = 0  # bytes of single batches (handed out in the loop's next() they arrive in)
        # (bytes of the groups whose batches were all handed out, the other groups as (batch numbers, bytes)):
        # replaced whole at each group by the loop's thread, so any thread reads it at once (delivered_bytes)
        self._groups: tuple[int, tuple[tuple[list[int], int], ...]] = (0, ())

    def add(self, item: Any) -> Any:
        """Take one worker message; the trace parcel that rode with it, if any (``engine.observer``: ``take``)."""
        if isinstance(item, Group):
            if self._arenas is not None:
                self._arenas.watch(item)
            else:
                item.anchor = None
            self._held.update(item)  # (j, batch) pairs
            self.bytes += item.nbytes
            # a group's bytes count as its batches are handed out (a group of 8 MB reaches a slow loop at once
            # and is handed out over seconds: counted on arrival, the loader's MB/s jumped from 2 to 6 and back)
            done, groups = self._groups
            exp, k = self.expected, 0
            while k < len(groups) and groups[k][0][-1] < exp:  # the oldest, all handed out: folded in
                done += groups[k][1]
                k += 1
            numbers = item.numbers if item.numbers is not None else list(map(_FIRST, item))
            self._groups = (done, groups[k:] + ((numbers, item.nbytes),))
            parcel, item.parcel = item.parcel, None
            return parcel
        j, batch = item
        self._held[j] = batch
        if self._count_bytes:
            n = batch_bytes(batch)
            self.bytes += n
            self._single += n
        return None

    def delivered_bytes(self) -> int:
        """Tensor bytes of the batches handed out so far (any thread; never less than a read before): each group's
        ``nbytes`` in proportion to its batches handed out, and single batches' (counted with ``count_bytes``)."""
        done, groups = self._groups
        exp = self.expected
        total = done + self._single
        for js, nbytes in groups:
            if js:
                total += nbytes * bisect.bisect_left(js, exp) // len(js)
        return total

    def ready(self) -> Iterator[tuple[int, Any]]:
        """Batches that can be handed out now, in order."""
        while self.expected in self._held:
            j = self.expected
            self.expected += 1
            yield j, self._held.pop(j)

    def pending(self) -> int:
        """Batches received but not yet handed out."""
        return len(self._held)
