"""Deterministic random streams and the lazy cross-chunk window shuffle of the epoch plan.

Every random number of the plan comes from :func:`stream`: the SplitMix64 sequence (Steele, Lea & Flood,
OOPSLA 2014) started from a 64-bit state that is itself a SplitMix64 hash of the purpose (a tag), the seed,
the epoch and, where it applies, the chunk. It is plain 64-bit integer arithmetic done here, not a numpy
generator, so the order of an epoch is the same on every platform and every numpy version (numpy does not
promise that ``Generator.permutation`` keeps its stream across releases). A permutation sorts the indexes
by random keys made distinct (see :func:`permutation`).

The window shuffle (``shuffle_buffer=K``) mixes samples across neighbouring chunks. Each position ``p`` of
the chunk-ordered stream gets a key ``p + K * u_p`` with ``u_p`` uniform in ``[0, 1)``; the output is the
stream sorted by key. A sample therefore moves at most ``K`` positions, a window of output holds samples
from at most about ``K / items_per_chunk + 2`` chunks, and any slice of the output can be computed from a
bounded neighbourhood of the stream, which keeps the plan lazy: nothing proportional to the dataset is
materialised until a batch asks for it.
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np

__all__ = [
    "ArrayPermutation",
    "FEISTEL_ROUNDS",
    "IndexPermutation",
    "MATERIALISE_MAX",
    "TAG_CHUNK_ORDER",
    "TAG_ITEMS",
    "TAG_WINDOW",
    "WINDOW_SEGMENT",
    "WindowShuffle",
    "chunk_order",
    "item_permutation",
    "permutation",
    "state",
    "stream",
    "uniforms",
]


# Domain tags: the first word hashed into each random stream.
TAG_CHUNK_ORDER = 0x53430001
TAG_ITEMS = 0x53430002
TAG_WINDOW = 0x53430003

#: Stream positions per window-shuffle segment (raised to the window when the window is larger). Part of the
#: order: changing it changes where a ``shuffle_buffer`` plan puts each sample.
WINDOW_SEGMENT = 65536

_M64 = 0xFFFFFFFFFFFFFFFF
_GOLDEN = 0x9E3779B97F4A7C15
_C1 = 0xBF58476D1CE4E5B9
_C2 = 0x94D049BB133111EB


def _mix(z: int) -> int:
    """SplitMix64 finaliser on a Python int (64-bit wrap-around)."""
    z &= _M64
    z = ((z ^ (z >> 30)) * _C1) & _M64
    z = ((z ^ (z >> 27)) * _C2) & _M64
    return z ^ (z >> 31)


_U30, _U27, _U31, _UC1, _UC2 = np.uint64(30), np.uint64(27), np.uint64(31), np.uint64(_C1), np.uint64(_C2)


def _mix_array(z: np.ndarray) -> np.ndarray:
    """SplitMix64 finaliser on a uint64 array (numpy arrays wrap on overflow)."""
    z = (z ^ (z >> _U30)) * _UC1
    z = (z ^ (z >> _U27)) * _UC2
    return z ^ (z >> _U31)


def state(tag: int, *values: int) -> int:
    """The 64-bit start state of the stream for ``tag`` and non-negative ints ``values`` (each < 2**64)."""
    h = _mix(tag + _GOLDEN)
    for v in values:
        h = _mix(h + _GOLDEN + (int(v) & _M64))
    return h


def stream(start_state: int, first: int, count: int) -> np.ndarray:
    """Numbers ``first .. first+count-1`` (uint64) of the SplitMix64 sequence from ``start_state``."""
    idx = np.arange(first + 1, first + count + 1, dtype=np.uint64)
    with np.errstate(over="ignore"):
        z = np.uint64(start_state) + idx * np.uint64(_GOLDEN)
        return _mix_array(z)


def uniforms(start_state: int, first: int, count: int) -> np.ndarray:
    """Floats uniform in ``[0, 1)`` with 53 random bits, from :func:`stream`."""
    return (stream(start_state, first, count) >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53))


def permutation(start_state: int, size: int) -> np.ndarray:
    """A random permutation of ``range(size)`` (int64) determined by ``start_state``.

    Each index gets a random key whose low bits are replaced by the index itself, so keys are distinct and
    every sort algorithm (numpy picks SIMD sorts by CPU) gives the same order; the sorted keys' low bits are
    the permutation.
    """
    if size <= 1:
        return np.arange(size, dtype=np.int64)
    mask = (1 << int(size - 1).bit_length()) - 1
    keys = stream(start_state, 0, size) & np.uint64(_M64 ^ mask)
    keys |= np.arange(size, dtype=np.uint64)
    keys.sort()
    return (keys & np.uint64(mask)).astype(np.int64)


def chunk_order(num_regions: int, seed: int, epoch: int) -> np.ndarray:
    """The permutation of region indices for ``(seed, epoch)``."""
    return permutation(state(TAG_CHUNK_ORDER, seed, epoch), num_regions)


FEISTEL_ROUNDS = 6


class IndexPermutation:
    """A random permutation of ``range(size)`` evaluated at any positions without materialising it.

    A balanced Feistel network over the smallest even number of bits covering ``size`` (SplitMix64 round
    functions keyed from ``start_state``) is a bijection on ``[0, 2**bits)``; "cycle walking" (apply it again
    while the result is ``>= size``) restricts it to a bijection on ``[0, size)``. Evaluating ``k`` positions
    costs O(k), whatever the size: a batch never pays for the whole chunk.
    """

    __slots__ = ("_half", "_keys", "_mask", "size")

    def __init__(self, start_state: int, size: int) -> None:
        self.size = int(size)
        bits = max(2, int(max(self.size - 1, 1)).bit_length())
        bits += bits & 1
        self._half = bits // 2
        self._mask = np.uint64((1 << self._half) - 1)
        self._keys = [np.uint64(_mix(start_state + _GOLDEN * (r + 1))) for r in range(FEISTEL_ROUNDS)]

    def _encrypt(self, x: np.ndarray) -> np.ndarray:
        half = np.uint64(self._half)
        left = x >> half
        right = x & self._mask
        with np.errstate(over="ignore"):
            for k in self._keys:
                left, right = right, left ^ (_mix_array(right + k) & self._mask)
        return (left << half) | right

    def __call__(self, positions: np.ndarray) -> np.ndarray:
        """``perm[positions]`` as int64 (positions must lie in ``[0, size)``)."""
        if self.size <= 1:
            return np.zeros(len(positions), dtype=np.int64)
        x = self._encrypt(np.asarray(positions, dtype=np.uint64))
        n = np.uint64(self.size)
        out_of_range = np.flatnonzero(x >= n)
        while len(out_of_range):
            y = self._encrypt(x[out_of_range])
            x[out_of_range] = y
            out_of_range = out_of_range[y >= n]
        return x.astype(np.int64)


#: Regions up to this many items get a materialised permutation (one sort, then one fancy index per batch);
#: larger ones an :class:`IndexPermutation` (no memory, O(batch) per batch). Part of the order rules.
MATERIALISE_MAX = 1 << 20


class ArrayPermutation:
    """A materialised permutation with the same call interface as :class:`IndexPermutation`."""

    __slots__ = ("perm", "size")

    def __init__(self, start_state: int, size: int) -> None:
        self.size = int(size)
        self.perm = permutation(start_state, self.size)

    def __call__(self, positions: np.ndarray) -> np.ndarray:
        """``perm[positions]``."""
        return self.perm[positions]


def item_permutation(
    size: int, seed: int, epoch: int, chunk_index: int, occurrence: int
) -> ArrayPermutation | IndexPermutation:
    """The order of the items of one region: depends on seed, epoch, chunk and which copy of the chunk it is.

    Returns a callable mapping offsets in the region's shuffled order to offsets in the region.
    """
    st = state(TAG_ITEMS, seed, epoch, chunk_index, occurrence)
    if size <= MATERIALISE_MAX:
        return ArrayPermutation(st, size)
    return IndexPermutation(st, size)


class WindowShuffle:
    """Lazy, deterministic window shuffle of ``n`` stream positions with window ``window``.

    Output positions are grouped in buckets of ``segment`` keys: bucket ``m`` holds the stream positions
    whose key lies in ``[m*segment, (m+1)*segment)``, in key order. Since a key exceeds its position by less
    than the window, bucket ``m`` only needs positions ``[m*segment - window, (m+1)*segment)``.
    """

    def __init__(self, n: int, window: int, seed: int, epoch: int, cache: int = 4) -> None:
        self.n = int(n)
        self.window = int(window)
        self.seed = int(seed)
        self.epoch = int(epoch)
        self.segment = max(WINDOW_SEGMENT, self.window)
        self._state = state(TAG_WINDOW, self.seed, self.epoch)
        self._cache = cache
        self._u: OrderedDict[int, np.ndarray] = OrderedDict()
        self._buckets: OrderedDict[int, np.ndarray] = OrderedDict()
        self._offsets: dict[int, int] = {}

    def __getstate__(self) -> dict[str, object]:
        state = dict(self.__dict__)
        state["_u"] = OrderedDict()
        state["_buckets"] = OrderedDict()
        state["_offsets"] = {}
        return state

    def _uniforms(self, seg: int) -> np.ndarray:
        got = self._u.get(seg)
        if got is None:
            first = seg * self.segment
            got = uniforms(self._state, first, max(0, min(self.segment, self.n - first)))
            self._u[seg] = got
            if len(self._u) > self._cache:
                self._u.popitem(last=False)
        else:
            self._u.move_to_end(seg)
        return got

    def _keys(self, lo: int, hi: int) -> np.ndarray:
        """Keys of stream positions ``[lo, hi)`` (``0 <= lo <= hi <= n``)."""
        if hi <= lo:
            return np.empty(0, dtype=np.float64)
        s = self.segment
        parts = []
        for seg in range(lo // s, (hi - 1) // s + 1):
            a = max(lo, seg * s)
            b = min(hi, (seg + 1) * s)
            parts.append(self._uniforms(seg)[a - seg * s : b - seg * s])
        u = parts[0] if len(parts) == 1 else np.concatenate(parts)
        return np.arange(lo, hi, dtype=np.float64) + u * self.window

    def offset(self, m: int) -> int:
        """Number of stream positions whose key is below ``m * segment`` (the first output of bucket m)."""
        got = self._offsets.get(m)
        if got is not None:
            return got
        edge = m * self.segment
        lo = max(0, edge - self.window)
        if lo >= self.n:
            out = self.n
        else:
            hi = min(edge, self.n)
            out = lo + int(np.count_nonzero(self._keys(lo, hi) < edge))
        if len(self._offsets) > 4096:
            self._offsets.clear()
        self._offsets[m] = out
        return out

    def bucket(self, m: int) -> np.ndarray:
        """Stream positions of bucket ``m`` in output order."""
        got = self._buckets.get(m)
        if got is not None:
            self._buckets.move_to_end(m)
            return got
        s = self.segment
        lo = max(0, m * s - self.window)
        hi = min((m + 1) * s, self.n)
        keys = self._keys(lo, hi)
        sel = np.flatnonzero((keys >= m * s) & (keys < (m + 1) * s))
        order = np.argsort(keys[sel], kind="stable")
        got = (sel[order] + lo).astype(np.int64)
        self._buckets[m] = got
        if len(self._buckets) > self._cache:
            self._buckets.popitem(last=False)
        return got

    def take(self, a: int, b: int) -> np.ndarray:
        """Stream positions of output positions ``[a, b)`` (``0 <= a <= b <= n``)."""
        if b <= a:
            return np.empty(0, dtype=np.int64)
        m = a // self.segment
        if a >= self.offset(m + 1):
            m += 1
        parts = []
        pos = a
        while pos < b:
            start = self.offset(m)
            end = self.offset(m + 1)
            if end > pos:
                bk = self.bucket(m)
                parts.append(bk[pos - start : min(b, end) - start])
                pos = min(b, end)
            m += 1
        return parts[0] if len(parts) == 1 else np.concatenate(parts)
