"""The epoch plan: which sample each rank, batch and worker reads, in which order, and how to resume.

An :class:`EpochPlan` is pure arithmetic over the chunk sizes of a dataset. It is built in well under a
second for millions of samples and materialises a batch only when asked for it. The same arguments give the
same plan on every machine.

Order of an epoch (the *global order*, identical on every rank and independent of the number of workers)
    1. The dataset is a list of *regions* ``(chunk_index, start, end)``: by default one per chunk covering
       all its items; :func:`~streamscope.engine.subsample.subsample_regions` produces other lists (a chunk
       may appear several times when upsampling).
    2. ``shuffle=False``: regions in list order, items of each region in order.
       ``shuffle=True``: regions permuted by a random stream derived from ``(seed, epoch)``; the items of
       each region permuted by a stream derived from ``(seed, epoch, chunk_index, copy)`` where ``copy``
       counts earlier regions of the same chunk. A new epoch gives a new order; the same epoch the same
       order. The streams are plain 64-bit arithmetic (:mod:`streamscope.engine.shuffle`), so the order is
       the same on every platform, numpy version and filesystem.
    3. ``shuffle_buffer=K > 0`` (opt-in, applied whether or not ``shuffle`` is set): the stream of step 2 is
       mixed across chunks by a deterministic window shuffle: every sample moves at most ``K`` positions.
       Cost: a reader needs about ``K / items_per_chunk + 2`` chunks open at once instead of one or two.

Ranks
    Rank ``r`` of ``world_size`` gets the contiguous slice ``[r*U // world_size, (r+1)*U // world_size)`` of the
    global order, where ``U`` is the number of samples used this epoch, so ranks read mostly different chunks
    and their sample counts differ by at most one (one exception, LitData's split, below).

    * ``drop_last=True``: ``U = floor(N / (world_size*B)) * world_size*B`` (the first ``U`` samples of the
      order; the last ``N - U < world_size*B`` are skipped this epoch, a different set each shuffled epoch).
      Every rank yields ``U / (world_size*B)`` full batches.
    * ``drop_last=False``: ``U = N``; every sample is yielded exactly once. Every rank yields the same number
      of batches ``K = ceil(ceil(N / world_size) / B)`` so no rank waits at the end of a DDP epoch for one that
      is done. A rank with fewer than ``K*B`` samples keeps as many full batches as it can while leaving at
      least one sample for each remaining batch, and spreads the rest evenly over those (B=4, K=3: 12
      samples → 4, 4, 4; 9 → 4, 4, 1; 7 → 4, 2, 1). No batch is empty and none exceeds ``B``.
    * ``drop_last=False`` with ``batch_size=1`` and ``N`` not a multiple of ``world_size`` (e.g. iterating
      the dataset directly in a DDP job): equal non-empty batch counts are impossible without dropping or
      repeating samples, so the ranks follow LitData instead: ranks ``0 .. world_size-2`` get
      ``floor(N / world_size)`` samples each and the last rank the rest (``N=1097``, two ranks: 548 and
      549), still contiguous slices of the global order, every sample exactly once. A warning (once per
      sample count and world size) says that a DDP loop may wait at the end of such an epoch and that
      ``drop_last=True`` evens the ranks.

    A selection of regions with no item (a ``0.0`` part of ``train_test_split``, a tiny ``subsample``) gives
    an empty plan on every rank: 0 samples, 0 batches, as LitData's empty datasets. Construction fails
    with :class:`~streamscope._core.errors.PlanError` when the dataset has no chunks or its chunks are all
    empty, when a rank would get no sample (``0 < N < world_size``) and when ``drop_last=True`` leaves no
    batch (``0 < N < world_size*B``).

    ``equal_batches=False`` (opt-out, for plans whose batches are not the training steps) keeps the rank
    slices ``[r*U // world_size, (r+1)*U // world_size)`` but cuts each rank into full batches and at most
    one partial last batch, so ranks may differ by one batch.

Workers
    Batches are dealt to DataLoader workers round robin from the batch the iteration starts at: starting
    at batch ``s`` (0 for a fresh epoch), worker ``w`` of ``W`` builds batches ``s + w, s + w + W, ...``.
    That is the order in which PyTorch's DataLoader (``in_order=True``) collects batches from its workers,
    beginning with worker 0, so the training loop receives batches ``s, s+1, s+2, ...``. The batches
    themselves do not depend on the number of workers; ``num_workers=0`` (main process) counts as one.

Resume
    A rank that has handed ``j`` batches to the training loop resumes at batch ``j`` with any number of
    workers. ``j == num_batches`` means the epoch is complete: the next epoch starts at batch 0.
    :meth:`EpochPlan.state` records everything that defines the order; :mod:`streamscope.engine.resume` checks
    a state and resumes it (``resume_point``, ``check_state``), also with another world size or batch size
    (``resume_plan``, elastic resume: the rest of the epoch, i.e. the samples no rank consumed, is cut into new
    rank slices and batches by the same rules). All ranks of a DDP job consume batches in lock step, so one
    ``j`` serves all.

Differences from LitData 0.2.68 (deliberate)
    The same seed gives a different order than LitData (its order depends on the number of workers, on the
    node count and, for POSIX-fast mounts, on the filesystem type; this one does not). Chunks are never
    assigned twice (no duplicated samples in later multi-node epochs), every rank has the same number of
    batches (except in the ``batch_size=1`` case above, where the counts are LitData's), and resume is an
    exact batch position instead of a replay of per-worker sample counts.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import numpy as np

from streamscope._core.errors import PlanError, StateDictError
from streamscope.engine.plan_layout import (
    as_int,
    digest,
    layout,
    map_virtual,
    occurrences,
    uneven_ranks,
    unique_in_order,
    validate_regions,
    warn_uneven,
)
from streamscope.engine.plan_protocol import fingerprint_of, position_state, worker_batches
from streamscope.engine.shuffle import ArrayPermutation, IndexPermutation, WindowShuffle, chunk_order, item_permutation
from streamscope.events import kinds

__all__ = ["PLAN_VERSION", "EpochPlan", "make_plan"]

#: Version of the order rules. A state written under another version cannot resume exactly.
PLAN_VERSION = 1

_MAX_SEED = 2**63 - 1
_PERM_CACHE = 64  # in-region permutations kept; materialised ones total at most _PERM_CACHE_BYTES
_PERM_CACHE_BYTES = 64 << 20


class EpochPlan:
    """The order, rank slice and batches of one rank for one epoch. Build it with :func:`make_plan`."""

    def __init__(
        self,
        *,
        chunk_sizes: np.ndarray,
        regions: np.ndarray | None,
        world_size: int,
        rank: int,
        batch_size: int,
        drop_last: bool,
        shuffle: bool,
        seed: int,
        epoch: int,
        shuffle_buffer: int,
        equal_batches: bool = True,
        resumed_from: Sequence[Sequence[int]] = (),
    ) -> None:
        self.world_size = world_size
        self.equal_batches = equal_batches
        self.rank = rank
        self.batch_size = batch_size
        self.drop_last = drop_last
        self.shuffle = shuffle
        self.seed = seed
        self.epoch = epoch
        self.shuffle_buffer = shuffle_buffer
        self.num_chunks = len(chunk_sizes)
        self._dataset_digest = digest(chunk_sizes)
        n_regions = len(chunk_sizes) if regions is None else len(regions)
        order = chunk_order(n_regions, seed, epoch) if shuffle else np.arange(n_regions)
        if regions is None:  # one region per whole chunk
            self._regions_digest = "whole-chunks"
            self._r_chunk = order
            self._r_start = np.zeros(n_regions, dtype=np.int64)
            self._r_size = chunk_sizes[order] if shuffle else chunk_sizes
            self._r_occ = np.zeros(n_regions, dtype=np.int64)
        else:
            self._regions_digest = digest(regions)
            self._r_chunk = regions[order, 0]
            self._r_start = regions[order, 1]
            self._r_size = regions[order, 2] - self._r_start
            self._r_occ = occurrences(regions[:, 0])[order]
        self._r_end = np.cumsum(self._r_size)
        self._r_begin = self._r_end - self._r_size

        n = int(self._r_end[-1]) if len(self._r_end) else 0
        self.total_samples = n
        ws, b = world_size, batch_size
        if n == 0 and regions is None:
            raise PlanError("the dataset has no samples to iterate: its chunks are all empty")
        # n == 0 with regions: an empty selection (a 0.0 train_test_split part, a tiny subsample) is an empty
        # plan, as LitData's empty datasets: no batch on any rank.
        # Resumed with another world size or batch size: the epoch continues over the samples the earlier
        # runs did not consume, in global order ("virtual" positions, mapped to global ones by segments).
        self.resumed_from = [tuple(int(x) for x in h) for h in resumed_from]
        seg_g = np.zeros(1, dtype=np.int64)  # global start of each segment
        seg_v = np.array([0, n], dtype=np.int64)  # virtual bounds of the segments
        for ws_e, b_e, j_e in self.resumed_from:
            virtual = int(seg_v[-1])
            pieces = []
            for r in range(ws_e):
                lay = layout(virtual, ws_e, r, b_e, drop_last, equal_batches)
                if not 0 <= j_e <= lay.k:
                    raise StateDictError(
                        f"resumed_from: {j_e} batches consumed, but world_size={ws_e}, batch_size={b_e} gives "
                        f"{lay.k} batches per rank"
                    )
                pieces += map_virtual(seg_g, seg_v, lay.lo + lay.start(j_e), lay.hi)
            pieces = [(g0, g1) for g0, g1 in pieces if g1 > g0]
            if not pieces:
                raise PlanError(f"nothing of epoch {epoch} is left after resuming from {self.resumed_from}")
            seg_g = np.array([g0 for g0, _ in pieces], dtype=np.int64)
            seg_v = np.zeros(len(pieces) + 1, dtype=np.int64)
            np.cumsum([g1 - g0 for g0, g1 in pieces], out=seg_v[1:])
        self._segments = (seg_g, seg_v) if self.resumed_from else None
        self.remaining_samples = int(seg_v[-1])
        lay = layout(self.remaining_samples, ws, rank, b, drop_last, equal_batches)
        self.used_samples = lay.used
        self._lo, self._hi = lay.lo, lay.hi
        self.num_samples = lay.hi - lay.lo
        self.num_batches = lay.k
        self._full, self._q, self._rem = lay.full, lay.q, lay.rem
        if ws > 1 and uneven_ranks(self.remaining_samples, ws, b, drop_last, equal_batches):
            warn_uneven(self.remaining_samples, ws)

        self._window = WindowShuffle(n, shuffle_buffer, seed, epoch) if shuffle_buffer > 0 and n > 0 else None
        self._perms: OrderedDict[int, ArrayPermutation | IndexPermutation] = OrderedDict()
        self._perm_bytes = 0
        self.fingerprint = self._fingerprint()

    # -- pickling: drop caches ------------------------------------------------------------------------

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_perms"] = OrderedDict()
        state["_perm_bytes"] = 0
        return state

    # -- configuration ----------------------------------------------------------------------------------

    def describe(self) -> dict[str, Any]:
        """Everything that defines the order except the epoch and rank (JSON-serialisable)."""
        return {
            "plan_version": PLAN_VERSION,
            "dataset": self._dataset_digest,
            "regions": self._regions_digest,
            "total_samples": self.total_samples,
            "world_size": self.world_size,
            "batch_size": self.batch_size,
            "drop_last": self.drop_last,
            "shuffle": self.shuffle,
            "seed": self.seed,
            "shuffle_buffer": self.shuffle_buffer,
            "equal_batches": self.equal_batches,
            "resumed_from": [list(h) for h in self.resumed_from],
        }

    def _fingerprint(self) -> str:
        return fingerprint_of(self.describe())

    def __repr__(self) -> str:
        return (
            f"EpochPlan(epoch={self.epoch}, rank={self.rank}/{self.world_size}, batches={self.num_batches}, "
            f"samples={self.num_samples}/{self.total_samples}, batch_size={self.batch_size}, "
            f"shuffle={self.shuffle}, shuffle_buffer={self.shuffle_buffer}, fingerprint={self.fingerprint})"
        )

    # -- batches ----------------------------------------------------------------------------------------

    def _pieces(self, a: int, b: int) -> list[tuple[int, int]]:
        """Global intervals of this plan's positions ``[a, b)``."""
        if self._segments is None:
            return [(a, b)]
        return map_virtual(self._segments[0], self._segments[1], a, b)

    def _check_batch(self, j: int) -> int:
        j = int(j)
        if not 0 <= j < self.num_batches:
            raise IndexError(f"batch {j} out of range: rank {self.rank} has {self.num_batches} batches")
        return j

    def batch_len(self, j: int) -> int:
        """Number of samples in batch ``j`` (``batch_size`` except in the last batches with drop_last=False)."""
        j = self._check_batch(j)
        if j < self._full:
            return self.batch_size
        return self._q + (1 if j - self._full < self._rem else 0)

    def batch_range(self, j: int) -> tuple[int, int]:
        """Positions ``[a, b)`` of batch ``j`` in the epoch's order (of the samples left, when ``resumed_from``)."""
        j = self._check_batch(j)
        b, f = self.batch_size, self._full
        if j < f:
            start = self._lo + j * b
            return start, start + b
        t = j - f
        start = self._lo + f * b + t * self._q + min(t, self._rem)
        return start, start + self._q + (1 if t < self._rem else 0)

    def _stream_positions(self, a: int, b: int) -> np.ndarray:
        if self._window is None:
            return np.arange(a, b, dtype=np.int64)
        return self._window.take(a, b)

    def _perm(self, k: int) -> ArrayPermutation | IndexPermutation:
        got = self._perms.get(k)
        if got is None:
            got = item_permutation(
                int(self._r_size[k]), self.seed, self.epoch, int(self._r_chunk[k]), int(self._r_occ[k])
            )
            self._perms[k] = got
            self._perm_bytes += got.perm.nbytes if isinstance(got, ArrayPermutation) else 0
            while len(self._perms) > 1 and (len(self._perms) > _PERM_CACHE or self._perm_bytes > _PERM_CACHE_BYTES):
                _, old = self._perms.popitem(last=False)
                self._perm_bytes -= old.perm.nbytes if isinstance(old, ArrayPermutation) else 0
        else:
            self._perms.move_to_end(k)
        return got

    def _items(self, k: int, off: np.ndarray) -> np.ndarray:
        start = self._r_start[k]
        items: np.ndarray = off + start if not self.shuffle else self._perm(k)(off) + start
        return items

    def _locate(self, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Map stream positions to (chunk index, item index in chunk)."""
        n = len(positions)
        if n == 0:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
        if self._window is None:
            # consecutive positions: one region, or a few regions one after the other
            r_end = self._r_end
            k0 = int(r_end.searchsorted(positions[0], side="right"))
            k1 = int(r_end.searchsorted(positions[-1], side="right"))
            if k0 == k1:
                off = positions - self._r_begin[k0]
                return np.full(n, self._r_chunk[k0], dtype=np.int64), self._items(k0, off)
            chunks = np.empty(n, dtype=np.int64)
            items = np.empty(n, dtype=np.int64)
            first = int(positions[0])
            for k in range(k0, k1 + 1):
                a = max(int(self._r_begin[k]), first) - first
                b = min(int(r_end[k]), first + n) - first
                if b <= a:
                    continue
                chunks[a:b] = self._r_chunk[k]
                items[a:b] = self._items(k, positions[a:b] - self._r_begin[k])
            return chunks, items
        region = np.searchsorted(self._r_end, positions, side="right")
        off = positions - self._r_begin[region]
        chunks = self._r_chunk[region]
        if not self.shuffle:
            return chunks, self._r_start[region] + off
        items = np.empty(n, dtype=np.int64)
        order = np.argsort(region, kind="stable")
        ks = region[order]
        cuts = np.flatnonzero(ks[1:] != ks[:-1]) + 1
        for grp in np.split(order, cuts):
            kk = int(region[grp[0]])
            items[grp] = self._items(kk, off[grp])
        return chunks, items

    def batch_arrays(self, j: int) -> tuple[np.ndarray, np.ndarray]:
        """Batch ``j`` as two int64 arrays: chunk indexes and item indexes within those chunks."""
        return self.range_arrays(*self.batch_range(j))

    def range_arrays(self, a: int, b: int) -> tuple[np.ndarray, np.ndarray]:
        """Positions ``[a, b)`` of the epoch's order (see :meth:`batch_range`) as chunk and item index arrays: many
        batches located in one call."""
        if self._segments is None:
            if self._window is None:
                return self._locate_range(a, b)
            return self._locate(self._window.take(a, b))
        return self._locate_pieces(a, b)

    def _locate_pieces(self, a: int, b: int) -> tuple[np.ndarray, np.ndarray]:
        """(chunk, item) of this plan's positions ``[a, b)``, one global interval at a time."""
        outs = []
        for g0, g1 in self._pieces(a, b):
            if self._window is None:
                outs.append(self._locate_range(g0, g1))
            else:
                outs.append(self._locate(self._window.take(g0, g1)))
        if not outs:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
        if len(outs) == 1:
            return outs[0]
        return np.concatenate([c for c, _ in outs]), np.concatenate([i for _, i in outs])

    def _positions(self, a: int, b: int) -> np.ndarray:
        """Stream positions of this plan's positions ``[a, b)`` (through segments and the window)."""
        parts = [self._stream_positions(g0, g1) for g0, g1 in self._pieces(a, b)]
        if not parts:
            return np.zeros(0, dtype=np.int64)
        return parts[0] if len(parts) == 1 else np.concatenate(parts)

    def _locate_range(self, a: int, b: int) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`_locate` for the consecutive stream positions ``[a, b)`` (the common, fast case)."""
        k = int(self._r_end.searchsorted(a, side="right"))
        end = int(self._r_end[k])
        if b <= end:  # one region
            o0 = a - int(self._r_begin[k])
            start = int(self._r_start[k])
            if not self.shuffle:
                items = np.arange(start + o0, start + o0 + (b - a), dtype=np.int64)
            else:
                perm = self._perm(k)
                if isinstance(perm, ArrayPermutation):
                    items = perm.perm[o0 : o0 + (b - a)] + start
                else:
                    items = perm(np.arange(o0, o0 + (b - a))) + start
            return np.full(b - a, self._r_chunk[k], dtype=np.int64), items
        return self._locate(np.arange(a, b, dtype=np.int64))

    def batch(self, j: int) -> list[tuple[int, int]]:
        """Batch ``j`` of this rank as ``[(chunk_index, item_in_chunk), ...]``."""
        c, i = self.batch_arrays(j)
        return list(zip(c.tolist(), i.tolist()))

    # -- workers ----------------------------------------------------------------------------------------

    def _worker_range(self, worker_id: int, num_workers: int, start_batch: int) -> range:
        return worker_batches(self.num_batches, worker_id, num_workers, start_batch)

    def batches_for_worker(self, worker_id: int, num_workers: int, start_batch: int = 0) -> range:
        """Batch indexes worker ``worker_id`` builds: ``start_batch + worker_id + k * num_workers``, k = 0, 1, ...

        ``num_workers=0`` (iteration in the main process) counts as one worker.
        """
        return self._worker_range(worker_id, num_workers, start_batch)

    def num_batches_for_worker(self, worker_id: int, num_workers: int, start_batch: int = 0) -> int:
        """How many batches :meth:`batches_for_worker` yields."""
        return len(self._worker_range(worker_id, num_workers, start_batch))

    def num_samples_for_worker(self, worker_id: int, num_workers: int, start_batch: int = 0) -> int:
        """How many samples worker ``worker_id`` yields from ``start_batch`` on."""
        return sum(self.batch_len(j) for j in self._worker_range(worker_id, num_workers, start_batch))

    def _ranges(self, batches: range) -> tuple[np.ndarray, np.ndarray]:
        js = np.arange(batches.start, batches.stop, batches.step, dtype=np.int64)
        b, f, q, rem = self.batch_size, self._full, self._q, self._rem
        t = np.maximum(js - f, 0)
        start = np.where(js < f, js * b, f * b + t * q + np.minimum(t, rem))
        size = np.where(js < f, b, q + (t < rem))
        return self._lo + start, self._lo + start + size

    def _worker_chunk_uses(self, batches: range) -> tuple[np.ndarray, np.ndarray]:
        """Chunk index of every region use by ``batches`` and the position (0, 1, ...) of the batch using it."""
        if len(batches) == 0:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
        starts, ends = self._ranges(batches)
        if self._segments is not None:
            lens = ends - starts
            parts = [self._positions(int(a), int(b)) for a, b in zip(starts.tolist(), ends.tolist())]
            ks = np.searchsorted(self._r_end, np.concatenate(parts), side="right")
            pos = np.repeat(np.arange(len(starts)), lens)
        elif self._window is None:
            # a batch covers a contiguous run of regions: expand [k0, k1] per batch
            k0 = np.searchsorted(self._r_end, starts, side="right")
            k1 = np.searchsorted(self._r_end, ends - 1, side="right")
            counts = k1 - k0 + 1
            base = np.repeat(k0 - np.cumsum(counts) + counts, counts)
            ks = base + np.arange(int(counts.sum()))
            pos = np.repeat(np.arange(len(counts)), counts)
            keep = self._r_size[ks] > 0  # a batch spans empty regions without reading them
            ks, pos = ks[keep], pos[keep]
        else:
            # map the whole span once, then gather the worker's batch ranges from it
            lo, hi = int(starts[0]), int(ends[-1])
            span = self._window.take(lo, hi)
            lens = ends - starts
            offsets = np.repeat(starts - lo - (np.cumsum(lens) - lens), lens) + np.arange(int(lens.sum()))
            ks = np.searchsorted(self._r_end, span[offsets], side="right")
            pos = np.repeat(np.arange(len(starts)), lens)
        return self._r_chunk[ks], pos

    def chunk_order_for_worker(self, worker_id: int, num_workers: int, start_batch: int = 0) -> list[int]:
        """Distinct chunk indexes worker ``worker_id`` reads from ``start_batch`` on, in order of first use."""
        chunks, _ = self._worker_chunk_uses(self._worker_range(worker_id, num_workers, start_batch))
        return unique_in_order(chunks)

    def chunk_schedule_for_worker(
        self, worker_id: int, num_workers: int, start_batch: int = 0
    ) -> list[tuple[int, int, int]]:
        """``(chunk_index, first, last)`` for every chunk the worker reads, in order of first use.

        ``first`` and ``last`` count the worker's own batches (0 = the first batch it builds from
        ``start_batch`` on): the chunk is needed from its ``first`` batch through its ``last`` batch, so a
        reader can prefetch in this order and release a chunk after batch ``last``.
        """
        chunks, pos = self._worker_chunk_uses(self._worker_range(worker_id, num_workers, start_batch))
        if len(chunks) == 0:
            return []
        uniq, first_idx = np.unique(chunks, return_index=True)
        _, rev_idx = np.unique(chunks[::-1], return_index=True)
        last_pos = pos[len(chunks) - 1 - rev_idx]
        order = np.argsort(first_idx, kind="stable")
        return list(zip(uniq[order].tolist(), pos[first_idx[order]].tolist(), last_pos[order].tolist()))

    def chunk_order(self, start_batch: int = 0) -> list[int]:
        """Distinct chunk indexes this rank reads from ``start_batch`` on, in order of first use."""
        return self.chunk_order_for_worker(0, 1, start_batch)

    def sample_range(self, a: int, b: int) -> tuple[np.ndarray, np.ndarray]:
        """Samples ``a .. b-1`` of this rank's epoch sequence (all its batches concatenated), as arrays."""
        if not 0 <= a <= b <= self.num_samples:
            raise IndexError(f"samples [{a}, {b}) out of range: rank {self.rank} has {self.num_samples}")
        if a == b:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
        return self._locate_pieces(self._lo + a, self._lo + b)

    # -- observability ----------------------------------------------------------------------------------

    def mixing(self, max_batches: int = 64) -> dict[str, float]:
        """Shuffle-quality summary over up to ``max_batches`` evenly spaced batches of this rank.

        Returns ``chunks_per_batch_mean/min/max`` (distinct chunks in a batch: 1 means a batch is drawn from a
        single chunk, the correlated case of LitData #797) and ``batches_sampled``. Emitted as ``tune``
        counters (``plan_chunks_per_batch``) when that category is traced.
        """
        k = self.num_batches
        if k == 0:
            return {
                "chunks_per_batch_mean": 0.0,
                "chunks_per_batch_min": 0.0,
                "chunks_per_batch_max": 0.0,
                "batches_sampled": 0.0,
            }
        picks = np.unique(np.linspace(0, k - 1, num=min(k, max(1, max_batches))).astype(np.int64))
        counts = np.array([len(np.unique(self.batch_arrays(int(j))[0])) for j in picks], dtype=np.float64)
        out = {
            "chunks_per_batch_mean": float(counts.mean()),
            "chunks_per_batch_min": float(counts.min()),
            "chunks_per_batch_max": float(counts.max()),
            "batches_sampled": float(len(picks)),
        }
        kinds.chunks_per_batch(out["chunks_per_batch_mean"], epoch=self.epoch, rank=self.rank)
        return out

    # -- resume -----------------------------------------------------------------------------------------

    def state(self, batches_consumed: int) -> dict[str, Any]:
        """A JSON-serialisable resume state after ``batches_consumed`` batches of this epoch."""
        batches_consumed = as_int("batches_consumed", batches_consumed, 0)
        if batches_consumed > self.num_batches:
            raise StateDictError(
                f"batches_consumed={batches_consumed} exceeds the {self.num_batches} batches of epoch "
                f"{self.epoch} on rank {self.rank}"
            )
        return position_state(self, batches_consumed, "plan")


def make_plan(
    chunk_sizes: Sequence[int] | np.ndarray,
    *,
    world_size: int,
    rank: int,
    batch_size: int,
    drop_last: bool,
    shuffle: bool,
    seed: int,
    epoch: int,
    shuffle_buffer: int = 0,
    regions: Sequence[Sequence[int]] | np.ndarray | None = None,
    equal_batches: bool = True,
    resumed_from: Sequence[Sequence[int]] = (),
) -> EpochPlan:
    """Build the plan of one rank for one epoch (see the module docstring for the rules).

    Args:
        chunk_sizes: Number of items in each chunk, in index.json order.
        world_size: Number of DDP ranks.
        rank: This rank, ``0 <= rank < world_size``.
        batch_size: Samples per batch (the DataLoader's batch size).
        drop_last: Skip the tail that does not fill a full batch on every rank.
        shuffle: Shuffle chunk order and items within chunks by ``(seed, epoch)``.
        seed: Non-negative seed.
        epoch: Epoch number (any non-negative int; LitData counts from 1).
        shuffle_buffer: Window of the cross-chunk shuffle; 0 disables it.
        regions: ``(chunk_index, start, end)`` item ranges to run over instead of whole chunks.
        equal_batches: With ``drop_last=False``, give every rank the same number of batches (the default,
            required when the plan's batches are the DDP training steps; impossible for ``batch_size=1`` and
            a sample count that is not a multiple of ``world_size``, which gets LitData's split and a
            warning). ``False`` splits each rank's samples into full batches plus one partial batch, so ranks
            may differ by one batch; for plans whose batches are not training steps (e.g. a plain DataLoader
            batching samples itself).
        resumed_from: ``(world_size, batch_size, batches_consumed)`` of earlier runs of this same epoch, oldest
            first: the plan then covers only the samples they did not consume (see :func:`~streamscope.engine.resume.resume_plan`).

    Returns:
        The :class:`EpochPlan`; an empty one (0 samples, 0 batches) when ``regions`` select no item.

    Raises:
        PlanError: Bad arguments, no chunks, chunks that are all empty, or (with at least one sample) a rank
            that would get no data or no batch.
    """
    world_size = as_int("world_size", world_size, 1)
    rank = as_int("rank", rank, 0, world_size - 1)
    batch_size = as_int("batch_size", batch_size, 1)
    seed = as_int("seed", seed, 0, _MAX_SEED)
    epoch = as_int("epoch", epoch, 0, _MAX_SEED)
    shuffle_buffer = as_int("shuffle_buffer", shuffle_buffer, 0)
    sizes = np.asarray(chunk_sizes, dtype=np.int64).reshape(-1)
    if len(sizes) == 0:
        raise PlanError("the dataset has no chunks (chunk_sizes is empty)")
    if (sizes < 0).any():
        i = int(np.flatnonzero(sizes < 0)[0])
        raise PlanError(f"chunk {i} has a negative size {int(sizes[i])}")
    regs = None if regions is None else validate_regions(sizes, regions)
    with kinds.plan(epoch=epoch, rank=rank, world_size=world_size, chunks=len(sizes)) as f:
        plan = EpochPlan(
            chunk_sizes=sizes,
            regions=regs,
            world_size=world_size,
            rank=rank,
            batch_size=batch_size,
            drop_last=bool(drop_last),
            shuffle=bool(shuffle),
            seed=seed,
            epoch=epoch,
            shuffle_buffer=shuffle_buffer,
            equal_batches=bool(equal_batches),
            resumed_from=resumed_from,
        )
        f["batches"] = plan.num_batches
        f["samples"] = plan.num_samples
    return plan
