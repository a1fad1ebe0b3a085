"""Handing batches from DataLoader workers to the training loop with few hand-offs.

Each batch sent through a worker's result queue costs a pickle, a queue message and, per tensor, a shared-memory
file descriptor passed between processes (two process wake-ups). On a busy machine those wake-ups, not the
decoding, bound the loader. So workers send *groups* of consecutive batches of their own sequence: the first
group holds one batch (time to first batch stays low), later ones as many as fit in ``group_bytes`` (at most
``MAX_GROUP``). All tensors of a group are packed into ONE shared-memory block (one descriptor per group);
each batch's tensors are views into it. The main process unpacks groups and hands batches to the loop in batch
order (see :class:`Reorder`).
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import torch

from streamscope.stream import collate

MAX_GROUP = 16
_ALIGN = 64


class Group(list):  # type: ignore[type-arg]
    """A list of ``(batch_number, batch)`` sent by a worker as one queue message."""


def _tensors(obj: Any, out: list[torch.Tensor]) -> None:
    if isinstance(obj, torch.Tensor):
        out.append(obj)
    elif isinstance(obj, dict):
        for v in obj.values():
            _tensors(v, out)
    elif isinstance(obj, (list, tuple)):
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
        total += -(-(t.numel() * t.element_size()) // _ALIGN) * _ALIGN
    base = torch.empty(0, dtype=torch.uint8)
    storage = base._typed_storage()._new_shared(total, device=base.device)
    arena = base.new(storage).resize_(total)
    table: dict[int, torch.Tensor] = {}
    for t, off in zip(tensors, offsets):
        nbytes = t.numel() * t.element_size()
        dst = arena[off : off + nbytes].view(t.dtype).view(t.shape)
        dst.copy_(t)
        table[id(t)] = dst
    return Group((j, _replace(batch, table)) for j, batch in group)


def batch_bytes(batch: Any) -> int:
    """Bytes of the tensors in ``batch``."""
    tensors: list[torch.Tensor] = []
    _tensors(batch, tensors)
    return sum(t.numel() * t.element_size() for t in tensors)


def grouped(batches: Iterator[tuple[int, Any]], group_bytes: int) -> Iterator[Group]:
    """Groups of consecutive ``(j, batch)`` of one worker, packed into shared memory (see module docstring)."""
    collate.SHARED_ALLOC[0] = False  # this worker packs whole groups instead of allocating per batch
    size = 1
    group = Group()
    for item in batches:
        group.append(item)
        if len(group) >= size:
            if size == 1 and len(group) == 1:
                per = max(1, batch_bytes(item[1]))
                size = max(1, min(MAX_GROUP, group_bytes // per))
            yield pack(group)
            group = Group()
    if group:
        yield pack(group)


class Reorder:
    """Main-process side: turn worker messages (single batches or groups) into batches in batch order."""

    def __init__(self, first: int) -> None:
        self.expected = first
        self._held: dict[int, Any] = {}

    def add(self, item: Any) -> None:
        """Take one worker message."""
        if isinstance(item, Group):
            for j, batch in item:
                self._held[j] = batch
        else:
            j, batch = item
            self._held[j] = batch

    def ready(self) -> Iterator[tuple[int, Any]]:
        """Batches that can be handed out now, in order."""
        while self.expected in self._held:
            j = self.expected
            self.expected += 1
            yield j, self._held.pop(j)

    def pending(self) -> int:
        """Batches received but not yet handed out."""
        return len(self._held)
