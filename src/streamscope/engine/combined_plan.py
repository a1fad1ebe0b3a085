"""Mixing several streaming datasets: the combined epoch plan (pure logic; numpy and stdlib only).

A combined epoch interleaves the per-rank sample sequences of several datasets (each dataset's own
:class:`~streamscope.engine.plan.EpochPlan` order on this rank). The result is a list of *picks*
``(dataset_index, k)`` — "the k-th sample of dataset d on this rank" — cut into batches. Like the single-dataset
plan it is identical on every machine, independent of the number of workers (batch ``j`` goes to worker
``(j - start) % num_workers``), and every rank has the same number of batches.

Batching methods (LitData's names and meaning, ``weights`` normalised, default proportional to sizes)
    ``"stratified"``: every sample is drawn from dataset ``d`` with probability ``w_d / sum(active w)``.
    Exhausted datasets drop out and the others' weights are renormalised (``iterate_over_all=True``), or the
    epoch stops when the first dataset is exhausted (``False``). The draws are competing exponential clocks:
    dataset ``d`` emits its samples at rate ``w_d`` and the picks are the merged arrival order, which has
    exactly this distribution and is computed vectorised.

    ``"per_stream"``: every batch is drawn from a single dataset: pick ``d`` by weight, take up to
    ``batch_size`` consecutive samples of it, then pick again among the *other* active datasets (when there
    are others), as LitData does. ``batch_size`` may also be one size per dataset (LitData's
    ``set_batch_size([b_0, b_1, ...])``): a batch of dataset ``d`` then holds up to ``b_d`` samples, and "full"
    (for ``drop_last``) means ``b_d`` samples. Stratified batches mix datasets and take one size only.

Unlike LitData 0.2.68 (``combined.py``, see litdata-facts §8.11) the random sequence is one per rank and
epoch, derived from ``(seed, epoch, rank)``, not the same sequence replayed in every worker; and resume is
the batch position in this plan, so it stays exact after datasets are exhausted and with ``per_stream``.

Equal batches across ranks
    ``iterate_over_all=True`` and ``drop_last=False``: every pick once; ranks get ``K = max`` batch count and
    ranks with fewer batches split theirs (stratified: the spread rule of the single plan; per_stream: the
    largest batches are halved, so every batch still comes from one dataset). ``iterate_over_all=False``: all
    ranks stop at the smallest count (``K = min``); ``drop_last=True``: only full batches are kept and all
    ranks keep the smallest count of them.
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from typing import Any, overload

import numpy as np

from streamscope._core.errors import PlanError
from streamscope.engine.plan_layout import split_batches
from streamscope.engine.plan_protocol import fingerprint_of, position_state, worker_batches
from streamscope.engine.shuffle import state, uniforms

__all__ = ["BATCHING_METHODS", "CombinedPlan", "check_batch_size", "make_combined_plan", "rank_counts"]

BATCHING_METHODS = ("stratified", "per_stream")
TAG_MIX = 0x53430004
TAG_PER_STREAM = 0x53430005
COMBINED_PLAN_VERSION = 1


@overload
def check_batch_size(
    batch_size: list[Any] | tuple[Any, ...], num_datasets: int, batching_method: str, error: type[Exception] = ...
) -> tuple[int, ...]: ...


@overload
def check_batch_size(
    batch_size: Any, num_datasets: int, batching_method: str, error: type[Exception] = ...
) -> int | tuple[int, ...]: ...


def check_batch_size(
    batch_size: Any, num_datasets: int, batching_method: str, error: type[Exception] = PlanError
) -> int | tuple[int, ...]:
    """``batch_size`` as a combined plan takes it: one int >= 1 for every dataset, or (``"per_stream"`` only)
    a list or tuple of one int >= 1 per dataset, returned as a tuple.

    Raises:
        error: (default :class:`PlanError`) a wrong number of sizes, a size that is not an int >= 1, or
            per-dataset sizes with ``"stratified"`` batching (its batches mix every dataset).
    """
    if isinstance(batch_size, (list, tuple)):
        sizes = list(batch_size)
        if len(sizes) != num_datasets:
            raise error(
                f"batch_size has {len(sizes)} per-dataset sizes for {num_datasets} datasets ({sizes}): pass one "
                f"size per dataset, or one int for all"
            )
        if any(isinstance(x, bool) or not isinstance(x, numbers.Integral) or x < 1 for x in sizes):
            raise error(f"every per-dataset batch size must be an int >= 1, got {sizes}")
        if batching_method != "per_stream":
            raise error(
                f"per-dataset batch sizes {sizes} need batching_method='per_stream' (each batch from one dataset); "
                f"{batching_method!r} batches mix the datasets and take one int batch_size"
            )
        return tuple(int(x) for x in sizes)
    if isinstance(batch_size, bool) or not isinstance(batch_size, numbers.Integral) or batch_size < 1:
        raise error(
            f"batch_size must be an int >= 1 (or, with per_stream batching, a list of one per dataset), "
            f"got {batch_size!r}"
        )
    return int(batch_size)


def _full_batches(seq: np.ndarray, bounds: np.ndarray, sizes: Sequence[int]) -> np.ndarray:
    """Mask of the per_stream batches holding their dataset's full batch size."""
    lens = np.diff(bounds)
    if not len(lens):
        return np.zeros(0, dtype=bool)
    full: np.ndarray = lens == np.asarray(sizes, dtype=np.int64)[seq[bounds[:-1]]]
    return full


def rank_counts(total: int, world_size: int) -> list[int]:
    """Samples of each rank when ``total`` samples are cut into ``world_size`` contiguous slices."""
    return [(r + 1) * total // world_size - r * total // world_size for r in range(world_size)]


def _normalise(weights: Sequence[float] | None, sizes: Sequence[int]) -> np.ndarray:
    if weights is None:
        w = np.asarray(sizes, dtype=np.float64)
    else:
        if len(weights) != len(sizes):
            raise PlanError(f"{len(weights)} weights for {len(sizes)} datasets")
        w = np.asarray(weights, dtype=np.float64)
        if not np.isfinite(w).all() or (w < 0).any():
            raise PlanError(f"weights must be finite and >= 0, got {list(weights)}")
    if w.sum() <= 0:
        raise PlanError(f"weights sum to zero (weights={list(w)}, dataset sizes={list(sizes)})")
    normalised: np.ndarray = w / w.sum()
    return normalised


def _stratified(counts: Sequence[int], w: np.ndarray, st: int, over_all: bool) -> np.ndarray:
    """Dataset index of every pick: merge of per-dataset exponential clocks."""
    times, ids = [], []
    ends = []
    for d, n in enumerate(counts):
        if n == 0:
            continue
        u = uniforms(state(st, d), 0, n)
        t = np.cumsum(-np.log1p(-u)) / w[d]
        times.append(t)
        ids.append(np.full(n, d, dtype=np.int64))
        ends.append(float(t[-1]))
    if not times:
        return np.zeros(0, dtype=np.int64)
    t_all = np.concatenate(times)
    d_all = np.concatenate(ids)
    order = np.lexsort((d_all, t_all))
    seq = d_all[order]
    if not over_all:
        # stop when the first dataset is exhausted
        seq = seq[t_all[order] <= min(ends)]
    return seq


def _per_stream(
    counts: Sequence[int], w: np.ndarray, sizes: Sequence[int], st: int, over_all: bool
) -> tuple[np.ndarray, np.ndarray]:
    """(dataset of every pick, batch bounds) for single-dataset batches (``sizes``: batch size per dataset)."""
    left = [int(n) for n in counts]
    n_live = sum(1 for n in left if n > 0)
    weights = [float(x) for x in w]
    # one draw per batch: at most ceil(n_d / b_d) batches per dataset
    draws = uniforms(st, 0, sum(-(-n // b) for n, b in zip(left, sizes)) + 1).tolist()
    picks: list[int] = []
    takes: list[int] = []
    prev = -1
    active = [d for d in range(len(left)) if left[d] > 0]
    for u in draws:
        if not active or (not over_all and len(active) < n_live):
            break
        choices = [d for d in active if d != prev] if len(active) > 1 else active
        target = u * sum(weights[d] for d in choices)
        pick = choices[-1]
        acc = 0.0
        for d in choices:
            acc += weights[d]
            if target < acc:
                pick = d
                break
        take = min(sizes[pick], left[pick])
        left[pick] -= take
        if left[pick] == 0:
            active.remove(pick)
        picks.append(pick)
        takes.append(take)
        prev = pick
    seq = np.repeat(np.asarray(picks, dtype=np.int64), np.asarray(takes, dtype=np.int64))
    bounds = np.zeros(len(takes) + 1, dtype=np.int64)
    np.cumsum(np.asarray(takes, dtype=np.int64), out=bounds[1:])
    return seq, bounds


def _split_to(bounds: np.ndarray, k: int) -> np.ndarray:
    """Split the largest batches in halves until there are ``k`` (each piece keeps >= 1 sample)."""
    sizes = list(np.diff(bounds).tolist())
    if not sizes and k:
        raise PlanError(f"0 samples cannot fill {k} non-empty batches")
    while len(sizes) < k:
        i = max(range(len(sizes)), key=lambda x: (sizes[x], -x))
        if sizes[i] < 2:
            raise PlanError(f"{sum(sizes)} samples cannot fill {k} non-empty batches")
        a = sizes[i] - sizes[i] // 2
        sizes[i : i + 1] = [a, sizes[i] - a]
    out = np.zeros(len(sizes) + 1, dtype=np.int64)
    np.cumsum(sizes, out=out[1:])
    return out


def _occurrence_index(seq: np.ndarray) -> np.ndarray:
    """For each pick, how many earlier picks chose the same dataset (its k)."""
    k = np.empty(len(seq), dtype=np.int64)
    if len(seq) == 0:
        return k
    order = np.argsort(seq, kind="stable")
    s = seq[order]
    starts = np.flatnonzero(np.r_[True, s[1:] != s[:-1]])
    group_start = np.repeat(starts, np.diff(np.r_[starts, len(s)]))
    k[order] = np.arange(len(s)) - group_start
    return k


class CombinedPlan:
    """The combined batches of one rank for one epoch. Build it with :func:`make_combined_plan`."""

    def __init__(self, seq: np.ndarray, bounds: np.ndarray, rank: int, epoch: int, config: dict[str, Any]) -> None:
        self._seq = seq
        self._k = _occurrence_index(seq)
        self._bounds = bounds
        self.rank = rank
        self.epoch = epoch
        self.num_batches = len(bounds) - 1
        self.num_samples = int(bounds[-1])
        bs = config["batch_size"]
        #: the batch size (an int), or one per dataset (a list, ``"per_stream"`` only)
        self.batch_size: int | list[int] = [int(x) for x in bs] if isinstance(bs, list) else int(bs)
        self._config = config
        self.fingerprint = fingerprint_of(config)

    def describe(self) -> dict[str, Any]:
        """Everything that defines the combined order except epoch and rank."""
        return dict(self._config)

    def _check(self, j: int) -> int:
        if not 0 <= j < self.num_batches:
            raise IndexError(f"batch {j} out of range: rank {self.rank} has {self.num_batches} combined batches")
        return int(j)

    def batch_len(self, j: int) -> int:
        """Samples in batch ``j``."""
        j = self._check(j)
        return int(self._bounds[j + 1] - self._bounds[j])

    def batch_arrays(self, j: int) -> tuple[np.ndarray, np.ndarray]:
        """Batch ``j`` as (dataset index, k) arrays: k-th sample of that dataset's sequence on this rank."""
        j = self._check(j)
        a, b = int(self._bounds[j]), int(self._bounds[j + 1])
        return self._seq[a:b], self._k[a:b]

    def batch(self, j: int) -> list[tuple[int, int]]:
        """Batch ``j`` as ``[(dataset_index, k), ...]``."""
        d, k = self.batch_arrays(j)
        return list(zip(d.tolist(), k.tolist()))

    def batches_for_worker(self, worker_id: int, num_workers: int, start_batch: int = 0) -> range:
        """Batches worker ``worker_id`` builds: ``start_batch + worker_id + i * num_workers``."""
        return worker_batches(self.num_batches, worker_id, num_workers, start_batch)

    def batches_started(self, num_samples: int) -> int:
        """Batches that begin within the first ``num_samples`` samples of the epoch (a partly yielded batch
        counts as consumed, as ``ceil(num_samples / batch_size)`` does for one batch size)."""
        return int(np.searchsorted(self._bounds[:-1], int(num_samples), side="left"))

    def consumed(self, start_batch: int) -> list[int]:
        """Samples of each dataset used by batches before ``start_batch`` (where each dataset resumes)."""
        end = int(self._bounds[min(max(0, start_batch), self.num_batches)])
        n = int(self._config["datasets"])
        per_dataset: list[int] = np.bincount(self._seq[:end], minlength=n).tolist()
        return per_dataset

    def state(self, batches_consumed: int) -> dict[str, Any]:
        """JSON-serialisable resume state after ``batches_consumed`` batches."""
        return position_state(self, batches_consumed, "combined")


def make_combined_plan(
    totals: Sequence[int],
    *,
    world_size: int,
    rank: int,
    batch_size: int | list[int] | tuple[int, ...],
    seed: int,
    epoch: int,
    weights: Sequence[float] | None = None,
    iterate_over_all: bool = True,
    batching_method: str = "stratified",
    drop_last: bool = False,
    dataset_fingerprints: Sequence[str] | None = None,
) -> CombinedPlan:
    """Build the combined plan of ``rank`` for ``epoch``.

    Args:
        totals: Samples per epoch of each dataset over all ranks (each is cut into contiguous rank slices,
            see :func:`rank_counts`, as its own plan does with ``drop_last=False``).
        world_size: Number of ranks.
        rank: This rank.
        batch_size: Samples per batch; with ``"per_stream"`` also a list of one size per dataset (a batch of
            dataset ``d`` holds up to ``batch_size[d]`` samples, see :func:`check_batch_size`).
        seed: Non-negative seed.
        epoch: Epoch number.
        weights: Relative weight of each dataset (default: proportional to ``totals``).
        iterate_over_all: Continue until every dataset is exhausted (True) or stop at the first (False).
        batching_method: ``"stratified"`` or ``"per_stream"``.
        drop_last: Keep only full batches.
        dataset_fingerprints: Identity of each dataset, recorded in the fingerprint.

    Raises:
        PlanError: Bad arguments or a rank without a batch.
    """
    if batching_method not in BATCHING_METHODS:
        raise PlanError(f"batching_method must be one of {BATCHING_METHODS}, got {batching_method!r}")
    if not totals:
        raise PlanError("CombinedStreamingDataset needs at least one dataset")
    if world_size < 1 or not 0 <= rank < world_size:
        raise PlanError(f"rank {rank} out of range for world_size={world_size}")
    if isinstance(batch_size, (list, tuple)):
        sizes = list(check_batch_size(batch_size, len(totals), batching_method))
        b: Any = sizes  # recorded as a list in the configuration
    elif batch_size < 1:
        raise PlanError(f"batch_size must be >= 1, got {batch_size}")
    else:
        b = int(batch_size)
        sizes = [b] * len(totals)
    if seed < 0 or epoch < 0:
        raise PlanError(f"seed and epoch must be >= 0, got seed={seed}, epoch={epoch}")
    w = _normalise(weights, totals)
    per_rank = [rank_counts(int(t), world_size) for t in totals]

    def counts(r: int) -> list[int]:
        # a dataset of weight 0 is never drawn: it takes no part in the epoch
        return [per_rank[d][r] if w[d] > 0 else 0 for d in range(len(totals))]

    def picks(r: int) -> tuple[np.ndarray, np.ndarray | None]:
        if batching_method == "stratified":
            return _stratified(counts(r), w, state(TAG_MIX, seed, epoch, r), iterate_over_all), None
        return _per_stream(counts(r), w, sizes, state(TAG_PER_STREAM, seed, epoch, r), iterate_over_all)

    empty = [r for r in range(world_size) if sum(counts(r)) == 0]
    if empty:
        raise PlanError(
            f"rank {empty[0]} of {world_size} gets no samples from the combined datasets (samples per dataset "
            f"{list(totals)}, weights {[round(float(x), 4) for x in w]}): use fewer ranks or more data"
        )
    # K depends on every rank. With iterate_over_all the other ranks' sizes follow from their counts alone
    # (per_stream: each dataset gives ceil(n/b_d) batches, all full but its last); otherwise where each rank
    # stops depends on its draws, so it is simulated (vectorised for stratified, one step per batch else).
    seq, bounds = picks(rank)
    others = None if iterate_over_all else [picks(r) if r != rank else (seq, bounds) for r in range(world_size)]
    if batching_method == "stratified":
        if others is None:
            lengths = [sum(counts(r)) for r in range(world_size)]
        else:
            lengths = [len(sq) for sq, _ in others]
        if drop_last:
            k = min(lengths) // b
            seq = seq[: k * b]
            bounds = np.arange(k + 1, dtype=np.int64) * b
        elif iterate_over_all:
            k = -(-max(lengths) // b)
            if len(seq) < k:
                raise PlanError(
                    f"rank {rank} has {len(seq)} samples for {k} batches of {b}: use drop_last=True or a larger "
                    f"batch size"
                )
            bounds = split_batches(len(seq), k, b)
        else:
            k = -(-min(lengths) // b)
            seq = seq[: min(len(seq), k * b)]
            bounds = split_batches(len(seq), k, b) if k else np.zeros(1, dtype=np.int64)
    else:
        assert bounds is not None
        if others is None:
            n_batches = [sum(-(-c // bb) for c, bb in zip(counts(r), sizes)) for r in range(world_size)]
            n_full = [sum(c // bb for c, bb in zip(counts(r), sizes)) for r in range(world_size)]
        else:
            n_batches = [len(bd) - 1 for _, bd in others]  # type: ignore[arg-type]
            n_full = [int(np.count_nonzero(_full_batches(sq, bd, sizes))) for sq, bd in others]  # type: ignore[arg-type]
        if drop_last:
            k = min(n_full)
            keep = np.flatnonzero(_full_batches(seq, bounds, sizes))[:k]
            seq = np.concatenate([seq[bounds[i] : bounds[i + 1]] for i in keep]) if k else seq[:0]
            kept = np.diff(bounds)[keep]
            bounds = np.zeros(k + 1, dtype=np.int64)
            np.cumsum(kept, out=bounds[1:])
        elif iterate_over_all:
            k = max(n_batches)
            bounds = _split_to(bounds, k)
        else:
            k = min(n_batches)
            bounds = bounds[: k + 1]
            seq = seq[: int(bounds[-1])]
    if k == 0:
        raise PlanError(
            f"the combined datasets (samples per dataset {list(totals)}) leave no batch of {b} on rank {rank} "
            f"of {world_size} (iterate_over_all={iterate_over_all}, drop_last={drop_last})"
        )
    config = {
        "combined_plan_version": COMBINED_PLAN_VERSION,
        "datasets": len(totals),
        "totals": [int(t) for t in totals],
        "dataset_fingerprints": list(dataset_fingerprints or []),
        "weights": [round(float(x), 12) for x in w],
        "world_size": world_size,
        "batch_size": b,
        "seed": seed,
        "iterate_over_all": bool(iterate_over_all),
        "batching_method": batching_method,
        "drop_last": bool(drop_last),
    }
    return CombinedPlan(seq, bounds, rank, epoch, config)
