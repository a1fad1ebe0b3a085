from __future__ import annotations

import json
import os

from streamscope.events.metrics import BUCKETS_S, Aggregator, merge, read_snapshots, write_snapshot

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


def test_merge_sums_processes_and_drops_gauges_of_finished_ones(tmp_path):
    a, b = Aggregator(), Aggregator()
    for agg in (a, b):
        agg.add([_ev("B", "read", "read", 0), _ev("E", "read", "read", 1, size=4), _ev("C", "q", "cache", 1, value=5)])
    write_snapshot(str(tmp_path), a.snapshot(os.getpid(), dropped=1, sink_errors=0, final=False))
    write_snapshot(str(tmp_path), b.snapshot(999_999_999, dropped=2, sink_errors=1, final=True))
    (tmp_path / "garbage.json").write_text("{")
    (tmp_path / "7.json").write_text("{not json")
    snaps = read_snapshots(str(tmp_path))
    assert set(snaps) == {os.getpid(), 999_999_999}
    m = merge(snaps)
    assert m.span("read").count == 2 and m.span("read").items == 8
    assert m.dropped == 3 and m.sink_errors == 1
    assert m.gauges == {"cache/q": 5.0}  # the finished process's gauge no longer counts
    assert m.processes[999_999_999]["final"] and m.processes[os.getpid()]["alive"]
    d = m.to_dict()
    json.dumps(d)
    assert d["spans"]["read/read"]["mean_s"] == m.span("read").mean_s
    assert len(d["spans"]["read/read"]["buckets"]) == len(BUCKETS_S) + 1
