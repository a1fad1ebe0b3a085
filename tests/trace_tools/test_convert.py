"""convert: golden logs (streamscope and LitData layouts) to Chrome JSON and Perfetto, every output parsed back."""

from __future__ import annotations

import os
from decimal import Decimal

import pytest

from tests.trace_tools.helpers import (
    LITDATA_LOG,
    STREAMSCOPE_LOG,
    T0,
    load_chrome,
    load_perfetto,
    span,
    write_log,
)
from trace_tools.cli import main

LT0 = 1_715_000_000_000_000


def _x(doc: dict) -> list[dict]:
    return [e for e in doc["traceEvents"] if e["ph"] == "X"]


def _names(doc: dict, kind: str) -> dict[tuple[int, int], str]:
    return {(e["pid"], e["tid"]): e["args"]["name"] for e in doc["traceEvents"] if e["ph"] == "M" and e["name"] == kind}


@pytest.mark.parametrize("ext", ["json", "json.gz"])
def test_litdata_golden_to_chrome(tmp_path, ext, capsys):
    out = str(tmp_path / f"t.{ext}")
    assert main(["convert", LITDATA_LOG, "-o", out]) == 0
    assert "3 non-event lines skipped" in capsys.readouterr().out
    doc = load_chrome(out)
    xs = _x(doc)
    got = sorted((e["name"], e["pid"], e["ts"] - LT0, e["dur"]) for e in xs)
    assert got == sorted(
        [
            ("dataloader", 4242, 0.0, 13500.0),
            ("batch", 4242, 7000.0, 1000.0),
            ("batch", 4242, 12000.0, 1000.0),
            ("prefetch", 4300, 1000.0, 4300.0),
            ("download", 4300, 1000.0, 4200.0),
            ("lock", 4300, 5000.0, 100.0),
            ("sample", 4300, 5400.0, 200.0),
            ("read", 4300, 5500.0, 500.0),
            ("sample", 4300, 5600.0, 500.0),
            ("delete", 4300, 9000.0, 200.0),
            ("download", 4301, 6000.0, 4000.0),
            ("sample", 4301, 10400.0, 600.0),
            ("read", 4301, 10500.0, 500.0),
        ]
    )
    procs = {pid: n for (pid, _), n in _names(doc, "process_name").items()}
    assert procs == {4242: "rank 0 · main", 4300: "rank 0 · loader worker 0", 4301: "rank 0 · loader worker 1"}
    # the rank/worker context of every line is shown once per process, not repeated on every event
    labels = {e["pid"]: e["args"]["labels"] for e in doc["traceEvents"] if e.get("name") == "process_labels"}
    assert labels[4301] == "dist_world_size=1,dist_global_rank=0,dist_num_nodes=1,worker_world_size=2,worker_rank=1"
    assert all("worker_rank" not in e["args"] for e in xs)
    # read and sample cross each other in LitData (read B inside one sample, E inside the next): separate tracks
    threads = _names(doc, "thread_name")
    read_tid = next(e["tid"] for e in xs if e["name"] == "read" and e["pid"] == 4300)
    sample_tid = next(e["tid"] for e in xs if e["name"] == "sample" and e["pid"] == 4300)
    assert read_tid != sample_tid
    assert threads[(4300, read_tid)] == "tid 140000000000100 · read"
    # flows: a chunk's download to its read, bound by id
    dl = {e["args"]["chunk"]: e for e in xs if e["name"] == "download"}
    rd = {e["args"]["chunk"]: e for e in xs if e["name"] == "read"}
    for c in (0, 1):
        assert dl[c]["flow_out"] is True and rd[c]["flow_in"] is True
        assert dl[c]["bind_id"] == rd[c]["bind_id"]
    assert dl[0]["bind_id"] != dl[1]["bind_id"]
    crash = [e for e in doc["traceEvents"] if e["ph"] == "i"]
    assert (
        len(crash) == 1 and crash[0]["args"]["exception"] == "OSError" and "No space left" in crash[0]["args"]["error"]
    )
    assert doc["otherData"]["non_event_lines"] == 3


def test_streamscope_golden_to_chrome_counters_and_instants(tmp_path):
    out = str(tmp_path / "t.json")
    assert main(["convert", STREAMSCOPE_LOG, "-o", out]) == 0
    doc = load_chrome(out)
    counters: dict[str, list[float]] = {}
    for e in doc["traceEvents"]:
        if e["ph"] == "C":
            counters.setdefault(e["name"], []).append(e["args"][e["name"]])
    assert counters == {
        "chunks_queued": [0.0],
        "bytes_in_flight": [4096.0, 0.0],
        "cache_bytes": [4096.0],
        "queue_depth": [2.0],
        "prefetch_depth": [4.0],
    }
    inst = sorted((e["name"], e["cat"]) for e in doc["traceEvents"] if e["ph"] == "i")
    assert inst == [("crash", "crash"), ("retry", "download"), ("set_knob", "tune")]
    dl = [e for e in _x(doc) if e["name"] == "download" and e["args"]["chunk"] == 0][0]
    assert dl["dur"] == 5900.0 and dl["args"]["bytes"] == 4096 and dl["args"]["url"] == "s3://bucket/data/chunk-0-0.bin"


@pytest.mark.parametrize("log", [LITDATA_LOG, STREAMSCOPE_LOG])
def test_perfetto_matches_chrome(tmp_path, log):
    pj, pp = str(tmp_path / "t.json"), str(tmp_path / "t.pftrace")
    assert main(["convert", log, "-o", pj]) == 0
    assert main(["convert", log, "-o", pp]) == 0
    doc = load_chrome(pj)
    v = load_perfetto(pp)
    assert v.unbalanced == {}
    chrome = sorted(
        (
            e["name"],
            round(Decimal(e["ts"]) * 1000),
            round(Decimal(e["ts"] + e["dur"]) * 1000) - round(Decimal(e["ts"]) * 1000),
        )
        for e in _x(doc)
    )
    native = sorted((s["name"], s["ts"], s["dur"]) for s in v.slices)
    assert native == chrome
    # every slice sits on a lane track under a thread track under a process track named by rank/worker
    labels = {v.process_of(s["track"]) for s in v.slices}
    assert (
        labels <= {"rank 0 · main", "rank 0 · loader worker 0", "rank 0 · loader worker 1"}
        and "rank 0 · main" in labels
    )
    assert len(v.instants) == sum(1 for e in doc["traceEvents"] if e["ph"] == "i")
    # flows: a download carries an id that the read of the same chunk carries too
    for s in v.slices:
        if s["name"] == "download":
            chunk = s["args"]["chunk"]
            reads = [r for r in v.slices if r["name"] == "read" and r["args"]["chunk"] == chunk]
            assert reads and all(r["flows"] == s["flows"] for r in reads) and len(s["flows"]) == 1


def test_perfetto_counters_and_big_tids(tmp_path):
    pp = str(tmp_path / "t.pftrace")
    assert main(["convert", STREAMSCOPE_LOG, "-o", pp]) == 0
    v = load_perfetto(pp)
    assert v.counter_values["bytes_in_flight"] == [4096, 0]
    assert v.counter_values["prefetch_depth"] == [4]
    # end-only args (bytes, status) reach the slice
    dl = [s for s in v.slices if s["name"] == "download" and s["args"]["chunk"] == 0][0]
    assert dl["args"]["bytes"] == 4096 and dl["args"]["status"] == "ok"
    # LitData's thread idents do not fit Perfetto's int32 tid: still one thread track per thread, named by ident
    pl = str(tmp_path / "l.pftrace")
    assert main(["convert", LITDATA_LOG, "-o", pl]) == 0
    vl = load_perfetto(pl)
    assert all(0 < tid < 2**31 for _, tid in vl.threads.values())
    assert all("worker_rank" not in s["args"] for s in vl.slices)
    assert sorted(lb[-1] for lb in vl.labels.values()) == ["worker_rank=0", "worker_rank=0", "worker_rank=1"]
    assert len(vl.threads) == 5  # main, w0 main + prefetch, w1 two threads


def test_cat_filter(tmp_path, capsys):
    out = str(tmp_path / "t.json")
    assert main(["convert", STREAMSCOPE_LOG, "-o", out, "--cat", "download,read"]) == 0
    cats = {e["cat"] for e in load_chrome(out)["traceEvents"] if e["ph"] != "M"}
    assert cats == {"download", "read"}
    assert main(["convert", STREAMSCOPE_LOG, "-o", out, "--cat", "downloads"]) == 2
    assert "unknown category downloads" in capsys.readouterr().err


def test_unmatched_b_is_written_open_and_unmatched_e_dropped(tmp_path, capsys):
    log = write_log(
        str(tmp_path / "a.log"),
        [*span("sample", "sample", 0, 10), span("read", "read", 20, 30)[1], span("download", "download", 40, 50)[0]],
    )
    out = str(tmp_path / "a.json")
    assert main(["convert", log, "-o", out]) == 0
    err = capsys.readouterr().err
    assert "1 x unmatched_B" in err and "1 x unmatched_E" in err
    ev = [e for e in load_chrome(out)["traceEvents"] if e["ph"] != "M"]
    assert [(e["ph"], e["name"]) for e in ev] == [("X", "sample"), ("B", "download")]
    assert ev[1]["args"]["unfinished"] is True
    pp = str(tmp_path / "a.pftrace")
    assert main(["convert", log, "-o", pp]) == 0
    v = load_perfetto(pp)
    assert [s["name"] for s in v.slices] == ["sample"] and list(v.unbalanced.values()) == [1]


def test_concurrent_same_name_spans_get_their_own_lane(tmp_path):
    # two downloads overlapping on one thread (async client): matched by chunk, drawn on two lanes
    lines = [
        *span("download", "download", 0, 100, chunk=1)[:1],
        *span("download", "download", 10, 50, chunk=2)[:1],
        span("download", "download", 0, 100, chunk=1)[1],
        span("download", "download", 10, 50, chunk=2)[1],
    ]
    log = write_log(str(tmp_path / "c.log"), lines)
    out = str(tmp_path / "c.json")
    assert main(["convert", log, "-o", out]) == 0
    xs = sorted((e["args"]["chunk"], e["ts"] - T0, e["dur"], e["tid"]) for e in _x(load_chrome(out)))
    assert [(c, ts, d) for c, ts, d, _ in xs] == [(1, 0.0, 100.0), (2, 10.0, 40.0)]
    assert xs[0][3] != xs[1][3]
    pp = str(tmp_path / "c.pftrace")
    assert main(["convert", log, "-o", pp]) == 0
    v = load_perfetto(pp)
    assert v.unbalanced == {} and sorted(s["dur"] for s in v.slices) == [40_000, 100_000]


def test_mixed_runs_are_separated(tmp_path, capsys):
    # two runs appended to one file (LitData appends): rank 0's loop starts again in another pid
    run1 = [*span("dataloader", "epoch", 0, 100, pid=10, epoch=0), *span("sample", "sample", 10, 20, pid=11, worker=0)]
    run2 = [
        *span("dataloader", "epoch", 5000, 5100, pid=20, epoch=0),
        *span("sample", "sample", 5010, 5030, pid=11, worker=0),
    ]
    log = write_log(str(tmp_path / "m.log"), run1 + run2)
    out = str(tmp_path / "m.json")
    assert main(["convert", log, "-o", out]) == 1
    assert "mixes 2 runs" in capsys.readouterr().err
    names = sorted(e["args"]["name"] for e in load_chrome(out)["traceEvents"] if e.get("name") == "process_name")
    assert names == ["rank 0 · loader worker 0", "rank 0 · main", "run 2 · rank 0 · main"]


def test_output_is_atomic_when_input_has_no_events(tmp_path, capsys):
    log = write_log(str(tmp_path / "x.log"), ["hello world\n", "no events here\n"])
    out = tmp_path / "x.json"
    assert main(["convert", log, "-o", str(out)]) == 2
    assert "no trace events found" in capsys.readouterr().err
    assert not out.exists() and os.listdir(tmp_path) == ["x.log"]


def test_pid_reuse_with_time_jumping_back_is_a_new_run(tmp_path, capsys):
    from tests.trace_tools.helpers import line

    lines = [
        *span("sample", "sample", 60_000_000, 60_000_100, pid=7, worker=0),
        *span("sample", "sample", 5, 50, pid=7, worker=0),
    ]
    log = write_log(str(tmp_path / "p.log"), lines)
    out = str(tmp_path / "p.json")
    assert main(["convert", log, "-o", out]) == 1
    assert "mixes 2 runs" in capsys.readouterr().err
    doc = load_chrome(out)
    procs = {e["pid"]: e["args"]["name"] for e in doc["traceEvents"] if e.get("name") == "process_name"}
    assert sorted(procs.values()) == ["rank 0 · loader worker 0", "run 2 · rank 0 · loader worker 0"]
    assert len(procs) == 2  # the reused pid is offset in the second run
    xs = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    assert len(xs) == 2 and len({e["pid"] for e in xs}) == 2
    # a small step back within a thread is a problem to report, not a new run
    log2 = write_log(str(tmp_path / "q.log"), [line("I", "a", "read", 100, pid=7), line("I", "b", "read", 90, pid=7)])
    assert main(["convert", log2, "-o", out]) == 0


def test_main_process_recognised_by_loop_events(tmp_path):
    from tests.trace_tools.helpers import line

    # the main process writes worker_world_size 1 / worker_rank 0; its first event here is a counter
    lines = [
        line("C", "queue_depth", "batch", 0, pid=5, value=1),
        *span("batch", "batch", 10, 20, pid=5, batch=0, epoch=0),
        *span("sample", "sample", 0, 5, pid=6, worker=0),
    ]
    log = write_log(str(tmp_path / "m.log"), lines)
    out = str(tmp_path / "m.json")
    assert main(["convert", log, "-o", out]) == 0
    names: dict[int, str] = {}
    for e in load_chrome(out)["traceEvents"]:
        if e.get("name") == "process_name":
            names[e["pid"]] = e["args"]["name"]  # the last declaration wins
    assert names == {5: "rank 0 · main", 6: "rank 0 · loader worker 0"}
    pp = str(tmp_path / "m.pftrace")
    assert main(["convert", log, "-o", pp]) == 0
    from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

    t = pb.Trace()
    with open(pp, "rb") as f:  # closed here, not at a later collection (a ResourceWarning, an error in the suite)
        t.ParseFromString(f.read())
    last = {}
    for p in t.packet:
        if p.HasField("track_descriptor") and p.track_descriptor.HasField("process"):
            last[p.track_descriptor.process.pid] = p.track_descriptor.process.process_name
    assert last == {5: "rank 0 · main", 6: "rank 0 · loader worker 0"}


def test_non_finite_counter_values_are_rejected(tmp_path, capsys):
    from tests.trace_tools.helpers import line

    lines = [line("C", "bytes_in_flight", "download", 0, value=v) for v in ("1", "inf", "-inf", "nan", "2")]
    log = write_log(str(tmp_path / "c.log"), lines)
    for ext in ("json", "pftrace"):
        assert main(["convert", log, "-o", str(tmp_path / f"c.{ext}")]) == 0
    doc = load_chrome(str(tmp_path / "c.json"))  # strict JSON: no Infinity/NaN tokens
    assert [e["args"]["bytes_in_flight"] for e in doc["traceEvents"] if e["ph"] == "C"] == [1.0, 2.0]
    assert load_perfetto(str(tmp_path / "c.pftrace")).counter_values == {"bytes_in_flight": [1, 2]}
    assert main(["validate", "-q", log]) == 1
    assert "bad_counter=3" in capsys.readouterr().out


def test_single_worker_loader_names_settle_when_the_loop_shows_up(tmp_path):
    from tests.trace_tools.helpers import line
    from trace_tools.summary import summarize

    # num_workers=1: the worker (pid 6) also writes worker_world_size 1 / worker_rank 0, and its lines come first
    lines = [
        *span("sample", "sample", 0, 5, pid=6),
        line("C", "queue_depth", "batch", 1, pid=5, value=1),
        *span("stall", "stall", 2, 8, pid=5, batch=0),
        *span("sample", "sample", 6, 9, pid=6),
        *span("epoch", "epoch", 0, 30, pid=5, epoch=0),
    ]
    log = write_log(str(tmp_path / "w.log"), lines)
    out = str(tmp_path / "w.json")
    assert main(["convert", log, "-o", out]) == 0
    names: dict[int, str] = {}
    for e in load_chrome(out)["traceEvents"]:
        if e.get("name") == "process_name":
            names[e["pid"]] = e["args"]["name"]  # the last declaration wins
    assert names == {5: "rank 0 · main", 6: "rank 0 · loader worker 0"}
    s = summarize(log, with_timeline=False)
    assert set(s.by_where) == {
        ("sample", "sample", "rank 0 · loader worker 0"),
        ("stall", "stall", "rank 0 · main"),
        ("epoch", "epoch", "rank 0 · main"),
    }
    (r,) = s.stalls
    assert r.loop_us == 30.0  # streamscope names its epoch span "epoch" (LitData: "dataloader")


def test_complete_x_events_in_the_input(tmp_path):
    from tests.trace_tools.helpers import T0

    x = f"ts: {T0 + 100}.000; pid: 3; tid: 4; name: decode; cat: sample; cname: generic_work; dur: 12.5; s: t; index: 1; ph: X;\n"
    log = write_log(str(tmp_path / "x.log"), [x])
    assert main(["convert", log, "-o", str(tmp_path / "x.json")]) == 0
    (ev,) = [e for e in load_chrome(str(tmp_path / "x.json"))["traceEvents"] if e["ph"] == "X"]
    assert (ev["name"], ev["ts"] - T0, ev["dur"], ev["args"]) == ("decode", 100.0, 12.5, {"index": 1})
    assert main(["convert", log, "-o", str(tmp_path / "x.pftrace")]) == 0
    (sl,) = load_perfetto(str(tmp_path / "x.pftrace")).slices
    assert (sl["name"], sl["dur"], sl["args"]) == ("decode", 12_500, {"index": 1})
