"""The metrics aggregator: counts, bytes, latency histograms per (category, name), and gauges, from events.

The flusher thread feeds every batch it takes from the buffer to an :class:`Aggregator` (never the hot path).
Its :meth:`Aggregator.snapshot` is what a process publishes (:mod:`.snapshots`); the main process merges the
snapshots of its run into one :class:`~streamscope.recording.snapshots.MetricsSnapshot`.

Keys are ``"cat/name"`` (e.g. ``"download/download"``). Span durations come from matching ``B``/``E`` per
thread. ``batch/data_wait`` is derived from the ``batch`` spans of the training loop: the time between the
end of one batch span (the consumer resumed the loader) and the begin of the next (the batch arrived), plus
the wait for the first batch after its loop began, i.e. the time the loop waited for each batch, one value per
batch, zero when the batch was ready (the wait histogram of ``streamscope.loader.wait.duration``). A loop begins
at its first ``stall`` when stalls are recorded (the loader's loop always waits before its first batch; its
``epoch`` span may be compact or off), else at the begin of its ``epoch`` (or LitData's ``dataloader``) span.
``stall/stall``, by contrast, has one value per wait in the loader's ``next()``: a batch that arrived with others
in one group, or was ready out of order, has none; the wait that found an epoch's end has one.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np

from streamscope._core.histogram import FixedBuckets
from streamscope.events import kinds as ek
from streamscope.events.bus import BULK, Bulk, Event, joined
from streamscope.events.registry import BUCKETS_S  # the histograms' bounds (seconds), declared with the metrics

__all__ = ["Aggregator", "SpanStats", "add_seconds"]


_LAYOUT = FixedBuckets(BUCKETS_S)  # the buckets the exporters publish (durations are bucketed in ns: _BOUNDS_NS)
_BOUNDS_NS = tuple(int(b * 1e9) for b in BUCKETS_S)
_BOUNDS = np.array(_BOUNDS_NS, dtype=np.int64)
#: Epoch-category spans around a training loop: LitData's ``dataloader`` and streamscope's ``epoch``.
_LOOP_SPANS = frozenset({"dataloader", ek.EPOCH.name})
#: The loop's kinds, by constant (compared per event: module globals, no attribute look-up).
_BATCH, _BATCH_NAME, _STALL, _STALL_NAME, _EPOCH = (
    ek.BATCH.cat,
    ek.BATCH.name,
    ek.STALL.cat,
    ek.STALL.name,
    ek.EPOCH.cat,
)
#: Bulk entries are folded into the stats in batches (see :meth:`Aggregator.fold`): when this many of their
#: events or this many entries are pending, or when the stats are read.
_FOLD_EVENTS = 200_000
_FOLD_ENTRIES = 256


def add_seconds(a: float, b: float) -> float:
    """``a + b`` on a grid of nanoseconds, for sums of several processes' seconds: each term is rounded to the ns
    and the sum of those integers is exact, so a merged total does not depend on the order or the grouping of its
    terms (a process's numbers joining the retired ones' total). Summed plainly, one grouping and the next can
    differ in the last bit, and a counter that goes down by that bit reads as a restart to Prometheus. Exact while
    a total stays under 2**51 ns (26 days)."""
    return (round(a * 1e9) + round(b * 1e9)) / 1e9


@dataclass
class SpanStats:
    """Aggregate of one kind of span (or of derived waits)."""

    count: int = 0
    total_s: float = 0.0
    max_s: float = 0.0
    bytes: int = 0
    items: int = 0
    aborted: int = 0
    errors: int = 0
    buckets: list[int] = field(default_factory=lambda: [0] * (len(BUCKETS_S) + 1))

    @property
    def mean_s(self) -> float:
        """Mean duration in seconds (0 when empty)."""
        return self.total_s / self.count if self.count else 0.0

    def quantile(self, q: float) -> float:
        """Upper bucket bound (seconds) below which a fraction ``q`` of the durations fall."""
        return _LAYOUT.quantile(self.buckets, self.count, q, self.max_s)

    def observe_ns(self, dur_ns: int) -> None:
        self.count += 1
        s = dur_ns / 1e9
        self.total_s += s
        if s > self.max_s:
            self.max_s = s
        self.buckets[bisect.bisect_left(_BOUNDS_NS, dur_ns)] += 1

    def observe_many_ns(self, durs_ns: np.ndarray) -> None:
        """:meth:`observe_ns` for every element of an int64 array (negative values count as 0)."""
        if not len(durs_ns):
            return
        d = np.maximum(durs_ns, 0)
        self.count += len(d)
        self.total_s += int(d.sum()) / 1e9
        self.max_s = max(self.max_s, int(d.max()) / 1e9)
        counts = np.bincount(np.searchsorted(_BOUNDS, d, side="left"), minlength=len(self.buckets))
        for k, c in enumerate(counts.tolist()):
            if c:
                self.buckets[k] += c

    def merge(self, other: SpanStats) -> None:
        self.count += other.count
        self.total_s = add_seconds(self.total_s, other.total_s)
        self.max_s = max(self.max_s, other.max_s)
        self.bytes += other.bytes
        self.items += other.items
        self.aborted += other.aborted
        self.errors += other.errors
        self.buckets = [a + b for a, b in zip(self.buckets, other.buckets)]


def _observe_all(st: SpanStats, starts: np.ndarray, ends: np.ndarray) -> None:
    """Durations ``ends - starts`` into ``st``: a few in a plain loop, more with one vector operation each."""
    if len(starts) < 16:
        for s, e in zip(starts.tolist(), ends.tolist()):
            st.observe_ns(max(0, e - s))
    else:
        st.observe_many_ns(ends - starts)


def _num(v: Any) -> int:
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, int):
        return v
    if isinstance(v, float):
        return int(v)
    return 0


class Aggregator:
    """Per-process aggregation of events; used from the flusher thread only (or under its lock).

    Plain events are folded in as they are added. Bulk entries (the loops' series, batches of samples) are
    kept until their stats are read (:attr:`spans`, :meth:`snapshot`) or enough of them are pending, and then
    folded together, a few vector operations per kind of span: a flush that runs after every epoch then does
    not pay for them each time.
    """

    def __init__(self) -> None:
        self._spans: dict[str, SpanStats] = {}
        self.instants: dict[str, int] = {}
        self.gauges: dict[str, float] = {}
        self.events = 0
        self._begins: dict[tuple[int, str, str], list[int]] = {}
        self._loop_mark: dict[int, int] = {}
        self._kinds: dict[tuple[str, str], SpanStats] = {}
        self._pending: list[tuple[SpanStats, int, Bulk]] = []  # bulk entries not folded yet
        self._pending_waits: list[list[Any]] = []  # batch series: [previous loop mark or None, entry]
        # per thread: where its loop's last stall or batch ended (a stall that begins elsewhere begins a new loop),
        # and its last batch series entry with that place before it (a timeline hands its batch events to the
        # buffer before its stall events of the same take: the stalls say whether the take began a loop)
        self._loop_edge: dict[int, int] = {}
        self._companion: dict[int, tuple[list[Any], int | None]] = {}
        self._pending_n = 0
        self._seq = 0  # snapshots taken so far (see snapshot)

    @property
    def spans(self) -> dict[str, SpanStats]:
        """``"cat/name"`` -> :class:`SpanStats`, with every pending bulk entry folded in."""
        self.fold()
        return self._spans

    def _stats(self, key: str) -> SpanStats:
        st = self._spans.get(key)
        if st is None:
            st = self._spans[key] = SpanStats()
        return st

    def _kind(self, cat: str, name: str) -> SpanStats:
        st = self._kinds.get((cat, name))
        if st is None:
            st = self._kinds[(cat, name)] = self._stats(f"{cat}/{name}")
        return st

    def add(self, events: list[Event]) -> None:
        """Fold a batch of events (in recording order) into the aggregates."""
        extra = 0
        begins = self._begins
        kinds = self._kinds
        bounds = _BOUNDS_NS
        bl = bisect.bisect_left
        for ph, name, cat, ts, _pid, tid, fields in events:
            if ph == "B":
                key = (tid, cat, name)
                stack = begins.get(key)
                if stack is None:
                    begins[key] = [ts]
                else:
                    stack.append(ts)
                if cat == _BATCH or cat == _EPOCH:
                    self._loop_begin(cat, name, tid, ts)
                elif cat == _STALL and name == _STALL_NAME:
                    self._stall_begin(tid, ts, ts)
            elif ph == "E":
                stack = begins.get((tid, cat, name))
                st = kinds.get((cat, name)) or self._kind(cat, name)
                if stack:
                    d = ts - stack.pop()  # SpanStats.observe_ns, inlined
                    st.count += 1
                    sec = d / 1e9
                    st.total_s += sec
                    if sec > st.max_s:
                        st.max_s = sec
                    st.buckets[bl(bounds, d)] += 1
                else:
                    st.count += 1  # B was dropped or recorded before metrics started
                if fields:
                    b = fields.get("bytes")
                    if b is not None:
                        st.bytes += _num(b)
                    n = fields.get("items", fields.get("size"))
                    if n is not None:
                        st.items += _num(n)
                    if "aborted" in fields:
                        st.aborted += 1
                    if "exception" in fields:
                        st.errors += 1
                if cat == _BATCH and name == _BATCH_NAME:
                    self._loop_mark[tid] = ts
                    self._loop_edge[tid] = ts
                elif cat == _STALL and name == _STALL_NAME:
                    self._loop_edge[tid] = ts
                elif cat == _EPOCH and name in _LOOP_SPANS:
                    self._loop_mark.pop(tid, None)
            elif ph == "X":
                st = self._kind(cat, name)
                d = fields.get("dur", 0)
                dur_ns = int(d * 1000) if type(d) is float or type(d) is int else 0
                st.observe_ns(dur_ns)
                if cat == _BATCH and name == _BATCH_NAME:  # compact batch spans (trace_compact_categories)
                    mark = self._loop_mark.pop(tid, None)
                    if mark is not None:
                        self._stats("batch/data_wait").observe_ns(ts - mark)
                    self._loop_mark[tid] = ts + dur_ns
                elif cat == _EPOCH and name in _LOOP_SPANS:  # a compact loop span ends: its loop ends
                    self._loop_mark.pop(tid, None)
                if "bytes" in fields:
                    st.bytes += _num(fields["bytes"])
                if "items" in fields or "size" in fields:
                    st.items += _num(fields.get("items", fields.get("size", 0)))
                if "exception" in fields:
                    st.errors += 1
            elif ph == BULK:
                bulk = cast(Bulk, fields)  # a BULK entry holds a Bulk where Event types the fields
                self._pending.append((kinds.get((cat, name)) or self._kind(cat, name), ts, bulk))
                if cat == _BATCH and name == _BATCH_NAME:  # the loop's batch series (events.series)
                    self._bulk_loop(tid, bulk)
                elif (
                    cat == _STALL
                    and name == _STALL_NAME
                    and bulk.starts is not None
                    and bulk.ends is not None
                    and bulk.n
                ):
                    self._stall_begin(tid, int(bulk.starts[0]), int(bulk.ends[-1]))
                extra += bulk.n - 1
                self._pending_n += bulk.n
            elif ph == "C":
                v = fields.get("value", 0) if fields else 0
                try:
                    self.gauges[f"{cat}/{name}"] = float(v)
                except (TypeError, ValueError):
                    pass
            else:
                ikey = f"{cat}/{name}"
                self.instants[ikey] = self.instants.get(ikey, 0) + 1
        self.events += len(events) + extra
        if self._pending_n > _FOLD_EVENTS or len(self._pending) > _FOLD_ENTRIES:
            self.fold()

    def _loop_begin(self, cat: str, name: str, tid: int, ts: int) -> None:
        """Data-wait bookkeeping at the begin of a ``batch`` or loop span."""
        if cat == _BATCH and name == _BATCH_NAME:
            mark = self._loop_mark.pop(tid, None)
            if mark is not None:
                self._stats("batch/data_wait").observe_ns(ts - mark)
        elif cat == _EPOCH and name in _LOOP_SPANS:
            self._loop_mark[tid] = ts

    def _stall_begin(self, tid: int, ts: int, end: int) -> None:
        """Stalls of thread ``tid`` begin at ``ts`` (a ``B``, or the first of a bulk entry ending at ``end``).

        The loader's loop records its stalls and batches back to back, each beginning where the one before it
        ended, and always waits before its first batch; a new loop's first stall begins after everything the
        thread's loops recorded before. Such a stall begins a loop: its first wait is measured from there (not
        from the end of the last loop's last batch, nor from its epoch span's begin, a few µs earlier). A stall
        at or before where the thread's events reached continues its loop. When the batch series entry handed
        over just before (the same take of a timeline: batch events first) begins after this stall, the take
        began with it, and what the thread had reached is where it stood before that entry.
        """
        comp = self._companion.pop(tid, None)
        edge = self._loop_edge.get(tid)
        if comp is not None and ts <= int(comp[0][1].starts[0]):
            entry, before = comp
            if before is None or ts > before:
                entry[0] = ts
        elif edge is None or ts > edge:
            self._loop_mark[tid] = ts
        self._loop_edge[tid] = end if edge is None else max(end, edge)

    def _bulk_loop(self, tid: int, b: Bulk) -> None:
        """Data-wait bookkeeping for a bulk entry of ``batch`` spans (measured begin/end each): the waits are
        computed when the entry is folded, the loop mark moves now."""
        if b.starts is None or b.ends is None or not b.n:
            return
        entry = [self._loop_mark.pop(tid, None), b]
        self._pending_waits.append(entry)
        self._companion[tid] = (entry, self._loop_edge.get(tid))
        self._loop_mark[tid] = self._loop_edge[tid] = int(b.ends[-1])

    def fold(self) -> None:
        """Fold the pending bulk entries into the stats: per kind of span, their durations in one array."""
        if not self._pending and not self._pending_waits:
            return
        pending, self._pending = self._pending, []
        waits, self._pending_waits = self._pending_waits, []
        self._companion.clear()  # folded as they are: a stall read later marks nothing of theirs
        self._pending_n = 0
        measured: dict[int, tuple[SpanStats, list[Any], list[Any]]] = {}
        for st, t0, b in pending:
            if b.starts is None or b.ends is None:
                share = max(0, b.t1 - t0) // b.n
                st.count += b.n
                st.total_s += share * b.n / 1e9
                st.max_s = max(st.max_s, share / 1e9)
                st.buckets[bisect.bisect_left(_BOUNDS_NS, share)] += b.n
            else:
                _, starts, ends = measured.setdefault(id(st), (st, [], []))
                starts.append(b.starts)
                ends.append(b.ends)
            items = b.fields.get("items", b.fields.get("size"))
            if items is not None:
                st.items += _num(items) * b.n
            elif "items" in b.cols:  # a series' per-event item counts (decode_batch)
                st.items += int(np.sum(b.cols["items"]))
            if "bytes" in b.fields:
                st.bytes += _num(b.fields["bytes"]) * b.n
        for st, starts, ends in measured.values():
            _observe_all(st, joined(starts, np.int64), joined(ends, np.int64))
        if waits:
            gaps = []
            for mark, b in waits:
                b0, b1 = np.asarray(b.starts, dtype=np.int64), np.asarray(b.ends, dtype=np.int64)
                if mark is not None:
                    gaps.append(b0[:1] - mark)
                gaps.append(b0[1:] - b1[:-1])
            self._stats("batch/data_wait").observe_many_ns(np.concatenate(gaps))

    def snapshot(self, pid: int, **extra: Any) -> dict[str, Any]:
        """JSON-able snapshot of this process (pending bulk entries folded in). ``seq`` numbers the snapshots of
        this aggregator: of two snapshots of one process (a file and a parcel's), the higher is the later one
        even when no event came between them (its counters may have moved)."""
        self._seq += 1
        return {
            "pid": pid,
            "seq": self._seq,
            "events": self.events,
            # a flat copy per span (dataclasses.asdict's deep copy costs ~30 µs a span, at every worker's exit)
            "spans": {k: {**v.__dict__, "buckets": list(v.buckets)} for k, v in self.spans.items()},
            "instants": dict(self.instants),
            "gauges": dict(self.gauges),
            **extra,
        }
