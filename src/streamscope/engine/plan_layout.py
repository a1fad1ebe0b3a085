"""The arithmetic under an epoch plan: argument checks, content digests, region checks, and how ``n`` ordered
samples are cut into rank slices and batches (:func:`layout`, :func:`split_batches`; the rules are in
:mod:`streamscope.engine.plan`'s docstring). Pure numpy, no state beyond the set of warnings already given."""

from __future__ import annotations

import hashlib
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from streamscope._core.errors import PlanError

__all__ = [
    "WARNED_UNEVEN",
    "Layout",
    "as_int",
    "digest",
    "layout",
    "map_virtual",
    "occurrences",
    "split_batches",
    "uneven_ranks",
    "unique_in_order",
    "validate_regions",
    "warn_uneven",
]


def as_int(name: str, value: Any, low: int, high: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise PlanError(f"{name} must be an int, got {value!r}")
    v = int(value)
    if v < low or (high is not None and v > high):
        bound = f">= {low}" if high is None else f"in [{low}, {high}]"
        raise PlanError(f"{name} must be {bound}, got {v}")
    return v


def digest(a: np.ndarray) -> str:
    """Short content hash of an int array (as int32 when the values fit, for speed)."""
    if len(a) == 0 or (a.min() >= -(2**31) and a.max() < 2**31):
        data = np.ascontiguousarray(a, dtype=np.int32)
    else:
        data = np.ascontiguousarray(a, dtype=np.int64)
    h = hashlib.blake2b(digest_size=8)
    h.update(str(a.shape).encode())
    h.update(data.tobytes())
    return h.hexdigest()


def validate_regions(chunk_sizes: np.ndarray, regions: Sequence[Sequence[int]] | np.ndarray) -> np.ndarray:
    n_chunks = len(chunk_sizes)
    try:
        out = np.asarray(regions, dtype=np.int64).reshape(-1, 3) if len(regions) else np.zeros((0, 3), np.int64)
    except (TypeError, ValueError) as exc:
        raise PlanError(f"regions must be a list of (chunk_index, start, end) int triples: {exc}") from None
    if len(out) != len(regions):
        raise PlanError("regions must be a list of (chunk_index, start, end) int triples")
    c, s, e = out[:, 0], out[:, 1], out[:, 2]
    bad = np.flatnonzero((c < 0) | (c >= n_chunks))
    if len(bad):
        i = int(bad[0])
        raise PlanError(f"region {i} {tuple(out[i].tolist())}: chunk index out of range for {n_chunks} chunks")
    bad = np.flatnonzero((s < 0) | (s > e) | (e > chunk_sizes[c]))
    if len(bad):
        i = int(bad[0])
        raise PlanError(
            f"region {i} {tuple(out[i].tolist())}: item range must satisfy 0 <= start <= end <= "
            f"{int(chunk_sizes[out[i, 0]])} (size of chunk {int(out[i, 0])})"
        )
    return out


def occurrences(chunks: np.ndarray) -> np.ndarray:
    """For each entry, how many earlier entries hold the same chunk index."""
    if len(chunks) == 0:
        return np.zeros(0, dtype=np.int64)
    order = np.argsort(chunks, kind="stable")
    sc = chunks[order]
    new_group = np.ones(len(sc), dtype=bool)
    new_group[1:] = sc[1:] != sc[:-1]
    group_start = np.maximum.accumulate(np.where(new_group, np.arange(len(sc)), 0))
    occ = np.empty(len(chunks), dtype=np.int64)
    occ[order] = np.arange(len(sc)) - group_start
    return occ


def unique_in_order(values: np.ndarray) -> list[int]:
    if len(values) == 0:
        return []
    _, first = np.unique(values, return_index=True)
    unique: list[int] = values[np.sort(first)].tolist()
    return unique


@dataclass(frozen=True)
class Layout:
    """Rank slice and batch cut of ``n`` ordered samples for one rank (positions in that order)."""

    used: int
    lo: int
    hi: int
    k: int
    full: int
    q: int
    rem: int
    b: int

    def start(self, j: int) -> int:
        """Offset of batch ``j`` (``0 <= j <= k``) from ``lo``."""
        if j <= self.full:
            return j * self.b
        t = j - self.full
        return self.full * self.b + t * self.q + min(t, self.rem)


def uneven_ranks(n: int, ws: int, b: int, drop_last: bool, equal_batches: bool) -> bool:
    """True in the one case whose ranks get LitData's unequal sample counts (see the module docstring)."""
    return not drop_last and equal_batches and b == 1 and n % ws != 0


WARNED_UNEVEN: set[tuple[int, int]] = set()


def warn_uneven(n: int, ws: int) -> None:
    if (n, ws) in WARNED_UNEVEN:
        return
    WARNED_UNEVEN.add((n, ws))
    base = n // ws
    first = "rank 0 gets" if ws == 2 else f"ranks 0..{ws - 2} get"
    warnings.warn(
        f"drop_last=False with batch_size=1: {n} samples do not split evenly over world_size={ws} ranks, so the "
        f"ranks get different numbers of samples ({first} {base}, rank {ws - 1} gets "
        f"{n - (ws - 1) * base}, as in LitData). A DDP training loop can then wait at the end of the epoch for "
        f"the rank with more batches; drop_last=True evens them ({base} per rank, {n - ws * base} skipped).",
        UserWarning,
        stacklevel=4,
    )


def layout(n: int, ws: int, rank: int, b: int, drop_last: bool, equal_batches: bool) -> Layout:
    if n == 0:  # an empty selection (e.g. a 0.0 split): nothing to read on any rank
        return Layout(0, 0, 0, 0, 0, 0, 0, b)
    if n < ws:
        raise PlanError(
            f"{n} samples cannot feed world_size={ws} ranks: every rank needs at least one sample "
            f"(use fewer ranks or more data)"
        )
    if drop_last:
        used = (n // (ws * b)) * ws * b
        if used == 0:
            raise PlanError(
                f"drop_last=True with {n} samples, world_size={ws} and batch_size={b} leaves no batch: "
                f"at least {ws * b} samples are needed (or set drop_last=False)"
            )
    else:
        used = n
        if uneven_ranks(n, ws, b, drop_last, equal_batches):
            # Equal non-empty batch counts are impossible: LitData's split, the last rank takes the remainder.
            base = n // ws
            lo = rank * base
            hi = n if rank == ws - 1 else lo + base
            return Layout(used, lo, hi, hi - lo, hi - lo, 0, 0, b)
    lo = rank * used // ws
    hi = (rank + 1) * used // ws
    local = hi - lo
    if drop_last:
        k = local // b
        full = k
    elif not equal_batches:
        k = -(-local // b)
        full = local // b
    else:
        largest = -(-used // ws)  # ceil(used / ws): samples of the largest rank
        k = -(-largest // b)
        full = k if local == k * b else min(k - 1, (local - k) // (b - 1))
    if local < k:  # pragma: no cover - excluded by the checks above
        raise PlanError(f"rank {rank} has {local} samples for {k} batches")
    rest = local - full * b
    tail = k - full
    q, rem = (rest // tail, rest % tail) if tail else (0, 0)
    return Layout(used, lo, hi, k, full, q, rem, b)


def split_batches(num_samples: int, num_batches: int, batch_size: int) -> np.ndarray:
    """Bounds (``num_batches + 1`` offsets) cutting ``num_samples`` into ``num_batches`` non-empty batches.

    The rule of the epoch plan: as many full batches as possible while every later batch keeps at least
    one sample, the rest spread evenly (sizes differ by at most one).

    Raises:
        PlanError: ``num_samples`` is not in ``[num_batches, num_batches * batch_size]``.
    """
    n, k, b = int(num_samples), int(num_batches), int(batch_size)
    if not k <= n <= k * b:
        raise PlanError(f"{n} samples cannot fill {k} non-empty batches of at most {b}")
    full = k if n == k * b else min(k - 1, (n - k) // (b - 1))
    tail = k - full
    rest = n - full * b
    sizes = np.full(k, b, dtype=np.int64)
    if tail:
        q, rem = divmod(rest, tail)
        sizes[full:] = q
        sizes[full : full + rem] += 1
    bounds = np.zeros(k + 1, dtype=np.int64)
    np.cumsum(sizes, out=bounds[1:])
    return bounds


def map_virtual(seg_g: np.ndarray, seg_v: np.ndarray, a: int, b: int) -> list[tuple[int, int]]:
    """Global position intervals of virtual positions ``[a, b)``: segment ``s`` maps virtual ``seg_v[s] ..
    seg_v[s + 1]`` to global positions from ``seg_g[s]`` on (the samples left of an epoch resumed elastically)."""
    if len(seg_g) == 1 and seg_v[0] == 0:
        g = int(seg_g[0])
        return [(g + a, g + b)] if b > a else []
    out = []
    s = int(np.searchsorted(seg_v, a, side="right")) - 1
    while a < b and s < len(seg_g):
        end = min(b, int(seg_v[s + 1]))
        if end > a:
            g = int(seg_g[s]) + a - int(seg_v[s])
            out.append((g, g + end - a))
            a = end
        s += 1
    return out
