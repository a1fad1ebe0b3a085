"""Deterministic random streams and the lazy cross-chunk window shuffle of the epoch plan.

Every random draw of the plan comes from :func:`rng`, a PCG64 generator (``numpy.random.default_rng``)
seeded with a fixed-length list of 32-bit words that starts with a domain tag. PCG64 and ``SeedSequence``
give the same numbers on every platform and numpy version that has them, and the tag keeps the streams of
different purposes (chunk order, items of a chunk, window keys) apart even when their numbers coincide.

The window shuffle (``shuffle_buffer=K``) mixes samples across neighbouring chunks. Each position ``p`` of
the chunk-ordered stream gets a key ``p + K * u_p`` with ``u_p`` uniform in ``[0, 1)``; the output is the
stream sorted by key. A sample therefore moves less than ``K`` positions, a window of output holds samples
from at most about ``K / items_per_chunk + 2`` chunks, and any slice of the output can be computed from a
bounded neighbourhood of the stream, which keeps the plan lazy: nothing proportional to the dataset is
materialised until a batch asks for it.
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np

# Domain tags: the first seed word of each random stream.
TAG_CHUNK_ORDER = 0x53430001
TAG_ITEMS = 0x53430002
TAG_WINDOW = 0x53430003

#: Stream positions per window-shuffle segment (raised to the window when the window is larger). Part of the
#: order: changing it changes where a ``shuffle_buffer`` plan puts each sample.
WINDOW_SEGMENT = 65536

_MASK32 = 0xFFFFFFFF


def _words(*values: int) -> list[int]:
    out: list[int] = []
    for v in values:
        v = int(v)
        out.append(v & _MASK32)
        out.append((v >> 32) & _MASK32)
    return out


def rng(tag: int, *values: int) -> np.random.Generator:
    """A PCG64 generator for ``tag`` and non-negative ints ``values`` (each below 2**64)."""
    return np.random.default_rng([tag, *_words(*values)])


def chunk_order(num_regions: int, seed: int, epoch: int) -> np.ndarray:
    """The permutation of region indices for ``(seed, epoch)``."""
    return rng(TAG_CHUNK_ORDER, seed, epoch).permutation(num_regions)


def item_permutation(size: int, seed: int, epoch: int, chunk_index: int, occurrence: int) -> np.ndarray:
    """The order of the items of one region: depends on seed, epoch, chunk and which copy of the chunk it is."""
    return rng(TAG_ITEMS, seed, epoch, chunk_index, occurrence).permutation(size)


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
            got = rng(TAG_WINDOW, self.seed, self.epoch, seg).random(self.segment)
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
