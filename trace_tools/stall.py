"""The stall report: while the training loop waited for a batch, what were the workers doing?

Exact interval arithmetic. For one rank of one run, ``S`` is the union of the wait intervals and ``U_c`` the union of
the spans of activity class ``c``. Classes are ranked (download, decompress, read, sample, other); the time of
``S`` is split exclusively: class ``k`` gets ``|S ∩ (U_1 ∪ … ∪ U_k)| - |S ∩ (U_1 ∪ … ∪ U_{k-1})|`` and the rest of
``S`` is *idle* (no worker activity at all). ``|A ∩ B| = |A| + |B| - |A ∪ B|`` with ``|·|`` the measure of a
union of intervals, computed by sorting and merging with numpy.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field

import numpy as np

from streamscope.events import kinds as ek
from trace_tools.model import LOOP_CATEGORIES, WRITE_PATH_CATEGORIES, WRITE_PATH_NAMES

#: Activity classes in priority order (a moment with a download and a sample open counts as download).
CLASSES: tuple[str, ...] = ("download", "decompress", "read", "sample", "other")

LABELS: dict[str, str] = {
    "download": "downloading chunks",
    "decompress": "decompressing",
    "read": "reading chunks",
    "sample": "decoding samples",
    "other": "other worker work (locks, deletes, cache)",
    "idle": "nothing at all (idle workers)",
    "untraced": "no traced activity (decoding is not traced here, or idle)",
}


#: Spans that decode samples whatever their category (streamscope's per-batch ``decode_batch`` is in ``read`` so
#: that a DataLoader worker records it at level "chunk"). With num_workers=0 the loop decodes in its own process:
#: streamscope's ``epoch`` span then carries ``workers: 0`` and the whole epoch counts as decoding (the summary
#: adds it to the ``sample`` class, below download, decompress and read in priority).
DECODE_SPANS = frozenset({ek.DECODE_BATCH.name})

#: Categories whose spans are their own stall class (the class is named for the category).
_DECODING = (ek.DECOMPRESS.cat, ek.READ.cat, ek.SAMPLE.cat)


def activity_class(cat: str, name: str) -> str | None:
    """The stall-report class of a span, or ``None`` for training-loop spans (epoch, batch, stall, tune) and for
    the write path's (``optimize``/``map``: they do not feed the loop, whatever category an older log gave them)."""
    if cat in LOOP_CATEGORIES or cat in WRITE_PATH_CATEGORIES or name in WRITE_PATH_NAMES:
        return None
    if cat == ek.DOWNLOAD.cat:
        return "other" if name == ek.PREFETCH.name else "download"
    if name in DECODE_SPANS:
        return "sample"
    if cat in _DECODING:
        return cat
    return "other"


def union_measure(iv: np.ndarray) -> float:
    """Total length covered by the union of intervals ``iv`` (shape (n, 2), start <= end)."""
    if len(iv) == 0:
        return 0.0
    order = np.argsort(iv[:, 0], kind="stable")
    s = iv[order, 0]
    e = iv[order, 1]
    run_end = np.maximum.accumulate(e)
    # a new group starts where the start is past every earlier end
    new = np.empty(len(s), dtype=bool)
    new[0] = True
    new[1:] = s[1:] > run_end[:-1]
    starts = s[new]
    group_idx = np.flatnonzero(new)
    ends = np.empty(len(starts))
    ends[:-1] = run_end[group_idx[1:] - 1]
    ends[-1] = run_end[-1]
    return float(np.sum(ends - starts))


def _pairs(a: array) -> np.ndarray:
    return np.frombuffer(a, dtype=np.float64).reshape(-1, 2) if len(a) else np.empty((0, 2))


@dataclass
class RankLog:
    """The intervals of one (run, rank) the stall report needs (pairs of floats, microseconds)."""

    stalls: array = field(default_factory=lambda: array("d"))
    batches: list[tuple[str, float, float]] = field(default_factory=list)
    loops: list[tuple[str, float, float]] = field(default_factory=list)
    activity: dict[str, array] = field(default_factory=lambda: {c: array("d") for c in CLASSES})


@dataclass
class StallResult:
    """Breakdown of wait time for one (run, rank)."""

    label: str
    source: str  # "stall spans" | "gaps between batch spans" | "none"
    waits: int
    wait_us: float
    loop_us: float
    parts: dict[str, float]
    activity_spans: int = 0
    seen: frozenset[str] = frozenset()
    first_wait_us: float = 0.0
    over_time: WaitOverTime | None = None

    def percent(self, key: str) -> float:
        """Share of the wait time spent in ``key`` (a class or ``"idle"``), in percent."""
        return 100.0 * self.parts.get(key, 0.0) / self.wait_us if self.wait_us > 0 else 0.0


def derive_waits(batches: list[tuple[str, float, float]], loops: list[tuple[str, float, float]]) -> np.ndarray:
    """Wait intervals from LitData-style batch spans (the span is the consumer's time; gaps are data waits).

    Within each epoch: from the ``dataloader`` start to the first batch, between consecutive batches, and from the
    last batch to the ``dataloader`` end.
    """
    by_epoch: dict[str, list[tuple[float, float]]] = {}
    for ep, b, e in batches:
        by_epoch.setdefault(ep, []).append((b, e))
    loop_by_epoch: dict[str, list[tuple[float, float]]] = {}
    for ep, b, e in loops:
        loop_by_epoch.setdefault(ep, []).append((b, e))
    out: list[tuple[float, float]] = []
    for ep, spans in by_epoch.items():
        spans.sort()
        for (_, e0), (b1, _) in zip(spans, spans[1:]):
            if b1 > e0:
                out.append((e0, b1))
        for lb, le in loop_by_epoch.get(ep, []):
            inside = [s for s in spans if lb <= s[0] <= le]
            if inside:
                if inside[0][0] > lb:
                    out.append((lb, inside[0][0]))
                if le > inside[-1][1]:
                    out.append((inside[-1][1], le))
    for ep, lst in loop_by_epoch.items():
        if ep not in by_epoch:
            out.extend((b, e) for b, e in lst if e > b)  # an epoch with no batch at all: all waiting
    return np.array(out, dtype=np.float64).reshape(-1, 2)


def split_wait(S: np.ndarray, activity: list[np.ndarray]) -> tuple[float, dict[str, float]]:
    """``|S|`` and its exclusive split among :data:`CLASSES` (``activity[k]`` holds class ``k``'s spans) and idle.

    The one derivation of the split: :func:`analyse` applies it to a rank's whole wait, :func:`wait_over_time` to
    the part of the wait in each time bin.
    """
    m_s = union_measure(S)
    parts: dict[str, float] = {}
    acc: list[np.ndarray] = []
    prev = 0.0
    for c, a in zip(CLASSES, activity):
        if len(a):
            acc.append(a)
        if not acc:
            parts[c] = 0.0
            continue
        U = np.concatenate(acc)
        inter = m_s + union_measure(U) - union_measure(np.concatenate([S, U]))
        inter = min(max(inter, prev), m_s)
        parts[c] = inter - prev
        prev = inter
    parts["idle"] = m_s - prev
    return m_s, parts


@dataclass
class WaitOverTime:
    """The loop's wait per time bin of one rank, split like the stall report (microseconds, absolute times)."""

    edges: np.ndarray  # nbins + 1 bin edges
    loop_us: np.ndarray  # time in the bin the loop ran (inside its epoch or batch spans, or waiting)
    wait_us: np.ndarray  # time in the bin the loop waited
    parts: dict[str, np.ndarray]  # class (and "idle") -> its share of wait_us, in microseconds

    def share(self, key: str) -> np.ndarray:
        """Per bin, the part ``key`` of the wait as a share (0..1) of the loop's time in the bin."""
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(self.loop_us > 0, self.parts[key] / self.loop_us, 0.0)

    def wait_share(self) -> np.ndarray:
        """Per bin, the share (0..1) of the loop's time in the bin spent waiting."""
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(self.loop_us > 0, self.wait_us / self.loop_us, 0.0)


def _clip(iv: np.ndarray, lo: float, hi: float) -> np.ndarray:
    if len(iv) == 0:
        return iv
    keep = (iv[:, 1] > lo) & (iv[:, 0] < hi)
    return np.clip(iv[keep], lo, hi)


def wait_over_time(S: np.ndarray, activity: list[np.ndarray], loops: np.ndarray, nbins: int) -> WaitOverTime:
    """Split the wait ``S`` per time bin with :func:`split_wait` (times relative to a common base).

    ``nbins`` equal bins span the loop (``loops``: its epoch and batch spans, and its waits). The denominator of a
    share is the time of the bin covered by the loop (those spans or a wait), so the shares of a bin add up to the
    loop's wait share in that bin.
    """
    both = np.concatenate([S, loops]) if len(loops) else S
    lo, hi = float(both[:, 0].min()), float(both[:, 1].max())
    n = max(1, nbins if hi > lo else 1)
    edges = np.linspace(lo, hi if hi > lo else lo + 1.0, n + 1)
    loop_us = np.zeros(n)
    wait_us = np.zeros(n)
    parts = {c: np.zeros(n) for c in (*CLASSES, "idle")}
    for i in range(n):
        b0, b1 = float(edges[i]), float(edges[i + 1])
        s_b = _clip(S, b0, b1)
        loop_us[i] = union_measure(_clip(both, b0, b1))
        if len(s_b) == 0:
            continue
        wait_us[i], split = split_wait(s_b, [_clip(a, b0, b1) for a in activity])
        for c, v in split.items():
            parts[c][i] = v
    return WaitOverTime(edges, loop_us, wait_us, parts)


def analyse(label: str, rl: RankLog, bins: int = 0) -> StallResult:
    """Split the wait time of one (run, rank) among the activity classes and idle.

    With ``bins`` > 0 the result also holds the split per time bin (:class:`WaitOverTime`, for the plot).
    """
    stalls = _pairs(rl.stalls)
    source = "stall spans"
    if len(stalls) == 0:
        stalls = derive_waits(rl.batches, rl.loops)
        source = "gaps between batch spans" if len(stalls) else "none"
    loops = np.array([(b, e) for _, b, e in rl.loops], dtype=np.float64).reshape(-1, 2)
    loop_us = union_measure(loops)
    n_act = sum(len(a) // 2 for a in rl.activity.values())
    seen = frozenset(c for c in CLASSES if len(rl.activity[c]))
    if len(stalls) == 0:
        return StallResult(label, source, 0, 0.0, loop_us, {}, n_act, seen)
    first = stalls[int(np.argmin(stalls[:, 0]))]
    first_wait = float(first[1] - first[0])
    base = float(stalls[:, 0].min())
    S = stalls - base
    activity = [_pairs(rl.activity[c]) - base for c in CLASSES]
    m_s, parts = split_wait(S, activity)
    r = StallResult(label, source, len(stalls), m_s, loop_us, parts, n_act, seen, first_wait)
    if bins > 0:
        batches = np.array([(b, e) for _, b, e in rl.batches], dtype=np.float64).reshape(-1, 2)
        over = wait_over_time(S, activity, np.concatenate([loops, batches]) - base, min(bins, len(stalls)))
        over.edges += base
        r.over_time = over
    return r


def recommendation(r: StallResult) -> str:
    """One sentence saying what to do about the wait."""
    if r.wait_us <= 0:
        return "The training loop never waited for data: the loader keeps up."
    idle = r.percent("idle")
    share = f" (the loop waited {100.0 * r.wait_us / r.loop_us:.1f}% of its time)" if r.loop_us > 0 else ""
    if r.activity_spans == 0:
        return (
            f"The loop waited{share}, but the log holds no worker spans for this rank, so the wait cannot be "
            "attributed: trace at level 'chunk' or 'sample' with worker events recorded (LitData loses forked "
            "workers' buffered lines and drops spawned workers' events)."
        )
    if idle >= 30.0 and "sample" not in r.seen:
        return (
            f"For {idle:.0f}% of the wait{share} no worker activity was traced, and this log has no sample spans: "
            "the workers were decoding samples or idle; trace at level 'sample' to tell which (more num_workers "
            "helps in the first case, more prefetching in the second)."
        )
    if idle >= 30.0:
        return (
            f"Workers were idle for {idle:.0f}% of the wait{share}: the data was not requested early enough; "
            "raise prefetching (prefetch_factor, max_pre_download) or num_workers."
        )
    best = max(CLASSES, key=lambda c: r.parts.get(c, 0.0))
    pct = r.percent(best)
    advice = {
        "download": "raise download concurrency and chunks kept in flight (max_pre_download), or move the data closer",
        "decompress": "add workers or use a lighter compression level",
        "read": "use a faster local cache disk, a larger max_cache_size, or more workers",
        "sample": "add workers (num_workers) or make the per-sample decode and transforms cheaper",
        "other": "look at lock, delete and cache spans: bookkeeping is holding the workers up",
    }[best]
    return f"The wait overlapped {LABELS[best]} for {pct:.0f}% of its time{share}: {advice}."
