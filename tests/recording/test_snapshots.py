"""Per-process snapshots: written and read as files, merged into one MetricsSnapshot."""

from __future__ import annotations

import copy
import json
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamscope.events.registry import M
from streamscope.recording.metrics import BUCKETS_S, Aggregator, SpanStats
from streamscope.recording.snapshots import MetricsSnapshot, add_snapshot, merge, read_snapshots, write_snapshot

MS = 1_000_000


def _ev(ph, name, cat, ms, tid=1, **fields):
    return (ph, name, cat, int(ms * MS), 100, tid, fields)


def test_merge_sums_processes_and_drops_gauges_of_finished_ones(tmp_path):
    a, b = Aggregator(), Aggregator()
    for agg in (a, b):
        agg.add([_ev("B", "read", "read", 0), _ev("E", "read", "read", 1, size=4), _ev("C", "q", "cache", 1, value=5)])
    write_snapshot(str(tmp_path), a.snapshot(os.getpid(), dropped=1, sink_errors=0, final=False))
    write_snapshot(str(tmp_path), b.snapshot(999_999_999, dropped=2, sink_errors=1, final=True))
    (tmp_path / "garbage.json").write_text("{")
    (tmp_path / "7.json").write_text("{not json")
    (tmp_path / "8.json").write_text("[1, 2]")
    (tmp_path / "9.json").write_text('{"spans": {"read/read": {"bogus": 1}}}')
    snaps = read_snapshots(str(tmp_path))
    assert set(snaps) == {os.getpid(), 999_999_999, 9}
    m = merge(snaps)
    assert m.span("read").count == 2 and m.span("read").items == 8
    assert m.dropped == 3 and m.sink_errors == 1
    assert m.gauges == {"cache/q": 5.0}  # the finished process's gauge no longer counts
    assert m.processes[999_999_999]["final"] and m.processes[os.getpid()]["alive"]
    assert 9 not in m.processes  # the damaged snapshot is skipped
    d = m.to_dict()
    json.dumps(d)
    assert d["spans"]["read/read"]["mean_s"] == m.span("read").mean_s
    assert len(d["spans"]["read/read"]["buckets"]) == len(BUCKETS_S) + 1


def test_a_snapshot_copy_equals_a_deep_copy_and_shares_nothing_mutable():
    base = MetricsSnapshot(events=3, dropped=1, sink_errors=2)
    base.spans["read/read"] = SpanStats(count=2, total_s=0.5, buckets=[1] * len(SpanStats().buckets))
    base.instants["crash/crash"] = 1
    base.gauges["cache/bytes"] = 7.0
    base.processes[11] = {"events": 3, "dropped": 1, "sink_errors": 0, "alive": False, "final": True}
    dup = base.copy()
    assert dup == copy.deepcopy(base)
    dup.spans["read/read"].buckets[0] += 5
    dup.spans["read/read"].count += 1
    dup.processes[11]["events"] = 99
    dup.instants["crash/crash"] = 4
    dup.gauges["cache/bytes"] = 0.0
    assert base == MetricsSnapshot(
        spans={"read/read": SpanStats(count=2, total_s=0.5, buckets=[1] * len(SpanStats().buckets))},
        instants={"crash/crash": 1},
        gauges={"cache/bytes": 7.0},
        events=3,
        dropped=1,
        sink_errors=2,
        processes={11: {"events": 3, "dropped": 1, "sink_errors": 0, "alive": False, "final": True}},
    )


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.floats(0, 1e5, allow_nan=False, allow_infinity=False), min_size=2, max_size=6),
    st.randoms(use_true_random=False),
)
def test_a_merged_counter_of_seconds_is_the_same_whichever_way_its_processes_are_grouped(seconds, rnd):
    """A process that retires moves from the live terms of the merge into the retired total: the merged counter
    (a span's total and a value in seconds) must come out the same, else Prometheus can see it go down a bit."""
    key = f"{M.LOADER_WAIT_STAGE.name}|stage=read"

    def snap(s: float) -> dict:
        return {"spans": {"stall/stall": {"count": 1, "total_s": s}}, "values": {key: s}, "final": True}

    def grouped(order: list[int], retired_n: int) -> tuple[float, float]:
        retired = MetricsSnapshot()
        for i in order[:retired_n]:
            add_snapshot(retired, i + 1, snap(seconds[i]))
        m = merge({i + 1: snap(seconds[i]) for i in order[retired_n:]}, base=retired)
        return m.span("stall").total_s, m.values[key]

    want = grouped(list(range(len(seconds))), 0)
    for _ in range(5):
        order = list(range(len(seconds)))
        rnd.shuffle(order)
        assert grouped(order, rnd.randint(0, len(seconds))) == want
    assert want[0] == want[1] == pytest.approx(sum(seconds), abs=1e-9 * len(seconds))
