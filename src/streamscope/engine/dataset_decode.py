"""How a StreamingDataset decodes: one sample (``decode_item``), a batch column-wise where the item loader's layout
allows (``_collator``), runs of one chunk in plain iteration (``RunDecoder``), and the per-worker batch loop
``iter_batches`` that reads the plan's batches through the scheduled chunk reads.

A mixin of :class:`~streamscope.engine.dataset.StreamingDataset` (it holds the attributes declared below); the
datasets built over one (Combined, Parallel) read through ``chunk_reader`` and ``samples_at``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from functools import partial
from typing import Any

import numpy as np
from torch.utils.data import default_collate, get_worker_info

from streamscope import events as ev
from streamscope._core.errors import DatasetIndexError
from streamscope.engine import batch_loop
from streamscope.engine.blocks import Block, blocks
from streamscope.engine.collate import ArrowCollator, BlockCollator, ColumnCollator
from streamscope.engine.plan import EpochPlan
from streamscope.engine.read_schedule import Schedule
from streamscope.engine.run_decoder import RunDecoder
from streamscope.events import kinds
from streamscope.format.item_loader import BaseItemLoader

__all__ = ["BatchDecoding"]

#: The hot-path kinds, by constant (module globals: no attribute look-up per batch); recorded by ev.series,
#: ev.bulk and ev.each, which take them as they are.
_SAMPLE, _SAMPLE_CAT = kinds.SAMPLE.name, kinds.SAMPLE.cat
_DECODE, _DECODE_CAT = kinds.DECODE_BATCH.name, kinds.DECODE_BATCH.cat


_NO_COLLATOR = ColumnCollator(["none"], None)  # never supported: the batch is decoded sample by sample


class BatchDecoding:
    """Decoding and the batch loop of a StreamingDataset (see the module docstring)."""

    item_loader: BaseItemLoader
    transform: Any
    config: dict[str, Any]
    chunks: list[dict[str, Any]]
    _column: ColumnCollator | BlockCollator | None
    _arrow_column: ArrowCollator | None
    _regions_by_chunk: dict[int, list[tuple[int, int, int]]] | None
    _r_chunk: np.ndarray
    _r_start: np.ndarray
    _r_end: np.ndarray

    def plan(self, epoch: int | None = None, batch_size: int | None = None) -> EpochPlan:  # pragma: no cover
        raise NotImplementedError

    def _get_reader(self) -> Any:  # pragma: no cover
        raise NotImplementedError

    def _overrides_getitem(self) -> bool:  # pragma: no cover
        raise NotImplementedError

    def __getitem__(self, index: Any) -> Any:  # pragma: no cover
        raise NotImplementedError

    def decode_item(self, oc: Any, item: int) -> Any:
        # the item loader reads its layout (token blocks, Parquet rows, MDS items, classic or Arrow chunk items)
        return self._apply_transform(self.item_loader.read_sample(oc.file, item, self.chunks[oc.index]))

    def _apply_transform(self, sample: Any) -> Any:
        t = self.transform
        if t is None:
            return sample
        if callable(t):
            return t(sample)
        for fn in t:
            sample = fn(sample)
        return sample

    def global_index(self, chunk: int, item: int) -> int:
        """The global index of ``item`` of ``chunk`` (the first region holding it): inverse of :meth:`locate`."""
        table = self._regions_by_chunk
        if table is None:
            table = {}
            begin = 0
            for c, a, end in zip(self._r_chunk.tolist(), self._r_start.tolist(), self._r_end.tolist()):
                table.setdefault(c, []).append((a, a + end - begin, begin))
                begin = end
            self._regions_by_chunk = table
        for a, b, begin in table.get(chunk, ()):
            if a <= item < b:
                return begin + item - a
        raise DatasetIndexError(f"item {item} of chunk {chunk} is not part of this dataset")

    def _collator(self, kind: str = "classic") -> Any:
        """The batch decoder of chunks of ``kind`` (``supported`` False: decode sample by sample)."""
        layout = self.item_loader.batch_layout
        if kind == "arrow" and layout == "tree":
            if self._arrow_column is None:
                self._arrow_column = ArrowCollator()
            return self._arrow_column
        if self._column is None:
            if layout == "tokens":
                self._column = BlockCollator(self.item_loader)
            elif layout is None:
                self._column = ColumnCollator(["parquet"], None)  # an unknown kind: never column-decoded
            else:
                self._column = ColumnCollator(self.config.get("data_format") or [], self.config.get("data_spec"))
        if kind != "classic" and layout != "tokens":
            return _NO_COLLATOR  # e.g. a framed chunk read in memory: sample by sample
        return self._column

    def _groups_collator(self, groups: list[tuple[Any, np.ndarray, np.ndarray]]) -> Any:
        """The batch decoder for a batch over these open chunks, or None when they differ in kind."""
        kind = groups[0][0].kind
        if any(oc.kind != kind for oc, _, _ in groups[1:]):
            return None
        col = self._collator(kind)
        return col if col.supported else None

    def _batch_ids(self, epoch: int, start_batch: int, worker_id: int, num_workers: int, batch_size: int) -> range:
        """The numbers of the batches a worker builds in ``epoch`` from ``start_batch`` on (every
        ``num_workers``-th)."""
        return range(start_batch + worker_id, self.plan(epoch, batch_size).num_batches, num_workers)

    def iter_batches(
        self,
        epoch: int,
        start_batch: int,
        worker_id: int,
        num_workers: int,
        batch_size: int,
        collate_fn: Callable[[list[Any]], Any] | None,
        collate: bool = True,
    ) -> Iterator[tuple[int, Any]]:
        """Yield ``(batch_number, batch)`` for the batches this worker builds (see module docstring).

        ``collate=False`` yields the list of samples instead of a collated batch.
        """
        plan = self.plan(epoch, batch_size)
        batch_ids = self._batch_ids(epoch, start_batch, worker_id, num_workers, batch_size)
        reader = self.chunk_reader()
        fast = collate and collate_fn is None and self.transform is None and not self._overrides_getitem()
        # plain iteration: decode a block's samples chunk run by chunk run (one call per run, not per sample)
        runs = not collate and not self._overrides_getitem() and _SAMPLE_CAT not in ev.ACTIVE
        # One event per batch at level "chunk" in a DataLoader worker: lets the stall report tell decoding from
        # idle workers. With num_workers=0 the loop's own stall is the decoding (the loader's epoch event says
        # ``workers: 0``), so it is recorded there only at level "sample", around the batch's sample events.
        on = _DECODE_CAT in ev.ACTIVE and (get_worker_info() is not None or _SAMPLE_CAT in ev.ACTIVE)
        decodes = ev.series(_DECODE, _DECODE_CAT, ("batch", "items")) if on else ev.NULL_SERIES
        now, mark, put = ev.now, decodes.mark, decodes.put
        located = blocks(plan, batch_ids)
        block: Block | None = None
        k0 = end = 0
        decoded: RunDecoder | None = None

        def build(k: int, j: int) -> Any:
            nonlocal block, k0, end, decoded
            if k >= end:  # this worker's next block of batches, located in one plan call
                k0, block = next(located)
                end = k0 + len(block.ids)
                # a run of one chunk is decoded when the batch reading its first sample comes, not before: the
                # chunk is opened (fetched, leased) no earlier than the release schedule expects (run_decoder.py)
                decoded = RunDecoder(block.ci, block.ii, partial(self._decode_run, reader)) if runs and not on else None
            assert block is not None
            a, b = block.bounds[k - k0]
            if decoded is not None:
                return decoded.take(b - a)
            ci, ii = block.ci[a:b], block.ii[a:b]
            if on:
                mark(now())
            batch: Any = None
            if fast:
                groups = self._groups(reader, ci, ii)
                collator = self._groups_collator(groups)
                if collator is not None:
                    t0 = ev.now()  # the chunks are open: the interval is the samples' decoding
                    batch = collator.collate([(oc.view, pos, items) for oc, pos, items in groups], len(ci))
                    if batch is not None and _SAMPLE_CAT in ev.ACTIVE:  # decoded together: one bulk entry
                        ev.bulk(_SAMPLE, _SAMPLE_CAT, t0, chunk=ci, item=ii, batch=j)
            if batch is None:
                samples = self._samples(reader, ci, ii)
                batch = samples if not collate else (collate_fn or default_collate)(samples)
            if on:
                mark(now())
                put(j)
                put(len(ci))
            return batch

        def schedules(_: Sequence[int]) -> list[Schedule]:
            if reader.cache is None:
                return [[]]
            return [plan.chunk_schedule_for_worker(worker_id, num_workers, start_batch)]

        # returned, not re-yielded: no generator layer of its own per batch (plain iteration's batches are samples)
        return batch_loop.iter_batches(
            plan, worker_id, num_workers, start_batch, build, [reader], schedules, stop=decodes.finish
        )

    def _decode_run(self, reader: Any, chunk: int, items: np.ndarray) -> list[Any]:
        """The samples ``items`` of ``chunk``, decoded together where the item loader can."""
        oc = reader.open(chunk)
        got = self.item_loader.read_samples(oc.file, items)
        if got is not None:
            return got if self.transform is None else [self._apply_transform(x) for x in got]
        return [self.decode_item(oc, i) for i in items.tolist()]

    def _groups(self, reader: Any, ci: np.ndarray, ii: np.ndarray) -> list[tuple[Any, np.ndarray, np.ndarray]]:
        n = len(ci)
        c0 = int(ci[0])
        if ci[-1] == c0 and (ci == c0).all():
            return [(reader.open(c0), np.arange(n), ii)]
        uniq, inv = np.unique(ci, return_inverse=True)
        out = []
        for k, c in enumerate(uniq.tolist()):
            pos = np.flatnonzero(inv == k)
            out.append((reader.open(c), pos, ii[pos]))
        return out

    # --- reading, for the datasets built over this one (Combined, Parallel) ---------------------------

    def chunk_reader(self) -> Any:
        """This process's chunk reader of the dataset (made at first use, one per process)."""
        return self._get_reader()

    def samples_at(self, reader: Any, chunks: np.ndarray, items: np.ndarray) -> list[Any]:
        """The samples at ``(chunks[k], items[k])`` read through ``reader``, decoded and transformed as iteration
        yields them (a subclass's ``__getitem__`` included)."""
        return self._samples(reader, chunks, items)

    def _samples(self, reader: Any, ci: np.ndarray, ii: np.ndarray) -> list[Any]:
        if self._overrides_getitem():  # the subclass's __getitem__ sees every sample, as in LitData
            if _SAMPLE_CAT in ev.ACTIVE:
                return ev.each(_SAMPLE, _SAMPLE_CAT, lambda c, i: self[self.global_index(c, i)], ci, ii)
            return [self[self.global_index(c, i)] for c, i in zip(ci.tolist(), ii.tolist())]
        if _SAMPLE_CAT in ev.ACTIVE:  # each sample timed, all recorded in one bulk entry
            return ev.each(_SAMPLE, _SAMPLE_CAT, self.decode_item, ci, ii, prepare=reader.open)
        out = []
        for c, i in zip(ci.tolist(), ii.tolist()):
            out.append(self.decode_item(reader.open(c), i))
        return out
