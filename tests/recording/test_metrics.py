from __future__ import annotations

import bisect
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as hst

from streamscope.events.registry import BUCKETS_S
from streamscope.recording.metrics import Aggregator, SpanStats

MS = 1_000_000


def _ev(ph, name, cat, ms, tid=1, **fields):
    return (ph, name, cat, int(ms * MS), 100, tid, fields)


def test_spans_pair_per_thread_and_sum_bytes():
    agg = Aggregator()
    agg.add(
        [
            _ev("B", "download", "download", 0, tid=1, chunk=0),
            _ev("B", "download", "download", 1, tid=2, chunk=1),
            _ev("E", "download", "download", 3, tid=2, chunk=1, bytes=10),
            _ev("E", "download", "download", 10, tid=1, chunk=0, bytes=5, exception="OSError"),
        ]
    )
    st = agg.spans["download/download"]
    assert st.count == 2 and st.bytes == 15 and st.errors == 1
    assert abs(st.total_s - 0.012) < 1e-9 and abs(st.max_s - 0.010) < 1e-9
    assert st.quantile(0.5) == 2.5e-3 and st.quantile(1.0) == 1e-2


def test_data_wait_is_the_gap_between_batches():
    agg = Aggregator()
    agg.add(
        [
            _ev("B", "dataloader", "epoch", 0),
            _ev("B", "batch", "batch", 4),  # waited 4 ms for the first batch
            _ev("E", "batch", "batch", 5),
            _ev("B", "batch", "batch", 7),  # waited 2 ms
            _ev("E", "batch", "batch", 9),
            _ev("E", "dataloader", "epoch", 9),
        ]
    )
    wait = agg.spans["batch/data_wait"]
    assert wait.count == 2 and abs(wait.total_s - 0.006) < 1e-9
    assert agg.spans["batch/batch"].count == 2 and agg.spans["epoch/dataloader"].count == 1


def test_counters_become_gauges_and_instants_count():
    agg = Aggregator()
    agg.add([_ev("C", "bytes_in_flight", "download", 0, value=7), _ev("C", "bytes_in_flight", "download", 1, value=3)])
    agg.add([_ev("I", "retry", "download", 2), _ev("I", "retry", "download", 3)])
    assert agg.gauges == {"download/bytes_in_flight": 3.0} and agg.instants == {"download/retry": 2}


def test_data_wait_from_compact_batch_spans():
    agg = Aggregator()
    agg.add(
        [
            _ev("B", "dataloader", "epoch", 0),
            _ev("X", "batch", "batch", 3, dur=1000.0),  # arrived at 3 ms, consumer took 1 ms
            _ev("X", "batch", "batch", 6, dur=2000.0),  # waited 2 ms
        ]
    )
    wait = agg.spans["batch/data_wait"]
    assert wait.count == 2 and abs(wait.total_s - 0.005) < 1e-9
    assert agg.spans["batch/batch"].count == 2 and abs(agg.spans["batch/batch"].total_s - 0.003) < 1e-9


def _bulk_ev(name, cat, starts_ms, ends_ms, tid=1, **cols):
    from streamscope.events.bus import BULK, Bulk

    starts = [int(x * MS) for x in starts_ms]
    ends = [int(x * MS) for x in ends_ms]
    b = Bulk(len(starts), ends[-1], {k: list(v) for k, v in cols.items()}, starts, ends, {})
    return (BULK, name, cat, starts[0], 100, tid, b)


def _stats(agg):
    return {k: (v.count, v.buckets, round(v.total_s, 12), v.max_s, v.items) for k, v in agg.spans.items()}


def test_bulk_entries_fold_in_batches_like_one_at_a_time(monkeypatch):
    """Bulk entries wait to be folded until the stats are read (or many are pending): the result is the same
    as folding each entry as it comes, including the batch series' data waits across entries and epochs."""
    import streamscope.recording.metrics as m

    def feed(agg):
        t = 0.0
        for _ in range(3):
            agg.add([_ev("B", "epoch", "epoch", t)])
            for part in range(4):
                n = 1 + 7 * part  # entries of 1, 8, 15 and 22 events: both sides of the plain-loop cut
                starts = [t + 1 + 3 * k for k in range(n)]
                ends = [s + 1 + k % 3 for k, s in enumerate(starts)]
                agg.add(
                    [
                        _bulk_ev("batch", "batch", starts, ends, batch=range(n)),
                        _bulk_ev("decode_batch", "read", starts, ends, batch=range(n), items=[64] * n),
                    ]
                )
                t = ends[-1]
            agg.add([_ev("E", "epoch", "epoch", t + 1)])
            t += 2

    lazy = Aggregator()
    feed(lazy)
    assert lazy._pending and lazy.events == 3 * 2 + 3 * 2 * (1 + 8 + 15 + 22)
    eager = Aggregator()
    monkeypatch.setattr(m, "_FOLD_ENTRIES", 0)  # fold after every add
    feed(eager)
    assert not eager._pending
    got, want = _stats(lazy), _stats(eager)
    assert not lazy._pending
    assert got == want
    assert want["batch/data_wait"][0] == 3 * (1 + 8 + 15 + 22)  # one wait per batch, the first after the epoch begin
    assert want["read/decode_batch"][4] == 64 * 3 * (1 + 8 + 15 + 22)
    snap = lazy.snapshot(1)
    assert snap["spans"]["batch/batch"]["count"] == 3 * (1 + 8 + 15 + 22)


def test_snapshot_spans_are_plain_copies_of_the_stats():
    """A snapshot's spans are what ``dataclasses.asdict`` gives, and changing them leaves the aggregator alone."""
    from dataclasses import asdict

    agg = Aggregator()
    agg.add([("X", "read", "read", 0, 1, 1, {"dur": 12.5, "bytes": 100}), ("I", "retry", "download", 5, 1, 1, {})])
    snap = agg.snapshot(1)
    assert snap["spans"] == {k: asdict(v) for k, v in agg.spans.items()} and snap["spans"]
    (key,) = snap["spans"]
    snap["spans"][key]["buckets"][0] += 1
    assert snap["spans"][key]["buckets"] != agg.spans[key].buckets


_DURS_NS = hst.lists(hst.integers(0, 120 * 10**9), max_size=80)


def _span_stats(durs_ns: list[int]) -> SpanStats:
    stats = SpanStats()
    for d in durs_ns:
        stats.observe_ns(d)
    return stats


@settings(max_examples=150, deadline=None)
@given(_DURS_NS, _DURS_NS, hst.floats(0.01, 1.0))
def test_merged_span_stats_are_the_stats_of_both_lists_and_quantiles_name_the_bucket(a, b, q):
    merged, whole = _span_stats(a), _span_stats(a + b)
    merged.merge(_span_stats(b))
    assert (merged.count, merged.buckets, merged.max_s) == (whole.count, whole.buckets, whole.max_s)
    assert merged.total_s == pytest.approx(whole.total_s, abs=1e-9 * (len(a) + len(b) + 1))
    assert merged.quantile(q) == whole.quantile(q)
    if a + b:  # the upper bound of the bucket of the ceil(q*n)-th smallest duration (the max past the bounds)
        want = sorted(a + b)[max(1, math.ceil(q * len(a + b))) - 1]
        i = bisect.bisect_left([round(x * 1e9) for x in BUCKETS_S], want)
        assert whole.quantile(q) == (BUCKETS_S[i] if i < len(BUCKETS_S) else whole.max_s)


def _loop_events(compact: bool, epoch: str | None, t: float = 0.0, tid: int = 1, cuts: tuple[float, ...] = ()):
    """One loop as the loader's timeline records it, with the loop span as ``epoch`` says ("B": begin/end,
    "X": one complete event at its end, None: not recorded): from t, a 2 ms stall, batch 0 held 1 ms, batch 1
    ready (held 1 ms), a 3 ms stall, batch 2 held 1 ms, batch 3 ready (held 0.5 ms), then the 1 ms wait that
    finds the end. Batch waits: 2, 0, 3, 0 ms. ``cuts``: times (from t) where the flusher takes the timeline (the
    events ended by then)."""
    stalls = [(t + 0, t + 2, 0), (t + 4, t + 7, 2), (t + 8.5, t + 9.5, 4)]
    batches = [(t + 2, t + 3, 0), (t + 3, t + 4, 1), (t + 7, t + 8, 2), (t + 8, t + 8.5, 3)]
    out = []
    if epoch == "B":
        out.append(_ev("B", "epoch", "epoch", t - 0.5, tid))
    lo = -1.0
    for hi in [*(t + c for c in cuts), t + 10]:
        take_b = [e for e in batches if lo < e[1] <= hi]
        take_s = [e for e in stalls if lo < e[1] <= hi]
        lo = hi
        if compact:  # the batch kind's entry first, as Timeline.take hands them over
            for name, evs in (("batch", take_b), ("stall", take_s)):
                if evs:
                    cols = {"batch": [e[2] for e in evs]}
                    out.append(_bulk_ev(name, name, [e[0] for e in evs], [e[1] for e in evs], tid, **cols))
        else:
            for t0, t1, j, name in sorted([(*e, "stall") for e in take_s] + [(*e, "batch") for e in take_b]):
                out += [_ev("B", name, name, t0, tid, batch=j), _ev("E", name, name, t1, tid, batch=j)]
    if epoch == "B":
        out.append(_ev("E", "epoch", "epoch", t + 9.5, tid))
    elif epoch == "X":
        out.append(_ev("X", "epoch", "epoch", t - 0.5, tid, dur=10_000.0))
    return out


@pytest.mark.parametrize("cuts", [(), (3.0,), (2.5, 4.0, 7.5), (2.5, 8.2)])
@pytest.mark.parametrize("compact", [False, True])
@pytest.mark.parametrize("epoch", ["B", "X", None])
def test_data_wait_has_one_value_per_batch_whatever_records_the_loop(compact, epoch, cuts):
    """Two loops (epochs) on one thread, 100 ms apart: four batches each, two of them ready (zero wait), taken
    by the flusher whole or in pieces (a take whose first stall comes after its first batch continues its loop). Each loop begins at its first stall (its epoch span, when recorded, began
    just before); the time between the loops is nobody's wait."""
    agg = Aggregator()
    agg.add(_loop_events(compact, epoch, 0.0, cuts=cuts))
    agg.add(_loop_events(compact, epoch, 100.0, cuts=cuts))
    wait = agg.spans["batch/data_wait"]
    assert wait.count == 8  # one per batch, the ready ones included
    assert wait.total_s == pytest.approx(2 * (2 + 0 + 3 + 0) / 1000, abs=1e-12)
    assert wait.buckets[0] == 4  # the ready batches: zero waits
    assert agg.spans["stall/stall"].count == 6  # one per wait in next(), the one that found the end included
