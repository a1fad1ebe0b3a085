"""Per-process snapshots: written and read as files, merged into one MetricsSnapshot."""

from __future__ import annotations

import copy
import json
import os

from streamscope.events.metrics import BUCKETS_S, Aggregator, SpanStats
from streamscope.events.snapshots import MetricsSnapshot, merge, read_snapshots, write_snapshot

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
