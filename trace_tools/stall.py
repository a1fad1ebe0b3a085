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
DECODE_SPANS = frozenset({"decode_batch"})


def activity_class(cat: str, name: str) -> str | None:
    """The stall-report class of a span, or ``None`` for training-loop spans (epoch, batch, stall, tune)."""
    if cat in ("epoch", "batch", "stall", "tune"):
        return None
    if cat == "download":
        return "other" if name == "prefetch" else "download"
    if name in DECODE_SPANS:
        return "sample"
    if cat in ("decompress", "read", "sample"):
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


def analyse(label: str, rl: RankLog) -> StallResult:
    """Split the wait time of one (run, rank) among the activity classes and idle."""
    stalls = _pairs(rl.stalls)
    source = "stall spans"
    if len(stalls) == 0:
        stalls = derive_waits(rl.batches, rl.loops)
        source = "gaps between batch spans" if len(stalls) else "none"
    loop_us = union_measure(np.array([(b, e) for _, b, e in rl.loops], dtype=np.float64).reshape(-1, 2))
    n_act = sum(len(a) // 2 for a in rl.activity.values())
    seen = frozenset(c for c in CLASSES if len(rl.activity[c]))
    if len(stalls) == 0:
        return StallResult(label, source, 0, 0.0, loop_us, {}, n_act, seen)
    first = stalls[int(np.argmin(stalls[:, 0]))]
    first_wait = float(first[1] - first[0])
    base = float(stalls[:, 0].min())
    S = stalls - base
    m_s = union_measure(S)
    parts: dict[str, float] = {}
    acc: list[np.ndarray] = []
    prev = 0.0
    for c in CLASSES:
        a = _pairs(rl.activity[c])
        if len(a):
            acc.append(a - base)
        if not acc:
            parts[c] = 0.0
            continue
        U = np.concatenate(acc)
        inter = m_s + union_measure(U) - union_measure(np.concatenate([S, U]))
        inter = min(max(inter, prev), m_s)
        parts[c] = inter - prev
        prev = inter
    parts["idle"] = m_s - prev
    return StallResult(label, source, len(stalls), m_s, loop_us, parts, n_act, seen, first_wait)


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
