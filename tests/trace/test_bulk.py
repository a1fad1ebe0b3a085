"""Bulk sample events: one buffer entry per batch, one Litracer ``X`` line per sample."""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamscope import events as ev
from streamscope import recording
from streamscope.events import EventBatch
from streamscope.events.bus import BULK, STATE, Bulk, expand, record_bulk
from streamscope.recording.metrics import Aggregator
from streamscope.trace import files
from streamscope.trace.bulk_render import bulk_lines, bulk_ts, render_bulks
from streamscope.trace.exporters import LitracerFileSink
from streamscope.trace.litracer import encode, encode_pieces
from tests.support.litracer_parser import LitracerParser, check_line, check_log
from tests.support.tracing import clean_tracer  # noqa: F401

pytestmark = pytest.mark.usefixtures("clean_tracer")

ENV = {"dist_world_size": 1, "dist_global_rank": 0, "dist_num_nodes": 1, "worker_world_size": 2, "worker_rank": 1}
OFF = 1_700_000_000_000_000_000


def _batch(events):
    return EventBatch(list(events), OFF, dict(ENV))


def _ns(text, key):
    """Values of ``key`` (µs with 3 decimals) on every line of ``text``, as exact integer nanoseconds."""
    out = []
    for line in text.splitlines():
        value = dict(p.split(":", 1) for p in line.split(";") if ":" in p)[(" " + key) if key != "ts" else key]
        whole, _, frac = value.strip().partition(".")
        out.append(int(whole) * 1000 + int(frac or 0))
    return out


def _norm(e):
    """A parsed event without the padding-sensitive representation (values compared as numbers)."""
    args = {k: (int(v) if v.lstrip("-").isdigit() else v) for k, v in e["args"].items()}
    return (e["name"], e["ph"], round(e["ts"], 3), round(e.get("dur", 0.0), 3), e["pid"], e["tid"], args)


def test_shared_interval_bulk_splits_the_measured_time_evenly():
    ev.ACTIVE.add("sample")
    ci = np.array([3, 3, 4, 4, 4], dtype=np.int64)
    ii = np.array([7, 8, 0, 1, 2], dtype=np.int64)
    t0 = ev.now()
    ev.bulk("sample", "sample", t0, chunk=ci, item=ii, batch=12)
    (entry,) = ev.drain()
    assert entry[0] == BULK and entry[3] == t0 and isinstance(entry[6], Bulk) and entry[6].n == 5
    text = encode(_batch([entry]))
    evs = check_log(text)
    assert [(int(e["args"]["chunk"]), int(e["args"]["item"])) for e in evs] == list(zip(ci.tolist(), ii.tolist()))
    b = entry[6]
    share = (b.t1 - t0) // 5
    assert all(e["ph"] == "X" and e["name"] == "sample" and e["cat"] == "sample" for e in evs)
    assert all(e["args"]["batched"] == "5" and e["args"]["batch"] == "12" for e in evs)
    assert _ns(text, "dur") == [share] * 5
    # back to back inside the measured interval, exactly (integer ns)
    assert _ns(text, "ts") == [OFF + t0 + k * share for k in range(5)]
    assert OFF + t0 + 5 * share <= OFF + b.t1


def test_each_records_measured_times_and_the_failing_call():
    ev.ACTIVE.add("sample")

    def fn(c, i):
        if i == 3:
            raise KeyError(f"item {i}")
        return c * 100 + i

    assert ev.each("sample", "sample", fn, [1, 1, 2], [0, 1, 2]) == [100, 101, 202]
    with pytest.raises(KeyError):
        ev.each("sample", "sample", fn, [5, 5, 5], [1, 2, 3])
    entries = ev.drain()
    assert [e[0] for e in entries] == [BULK, "X", BULK]  # the failing call, then the two before it
    first, failed, before = entries
    assert first[6].n == 3 and before[6].n == 2 and "batched" not in first[6].fields
    assert failed[6]["exception"] == "KeyError" and (failed[6]["chunk"], failed[6]["item"]) == (5, 3)
    text = encode(_batch(entries))
    evs = check_log(text)
    assert len(evs) == 6 and not any("batched" in e["args"] for e in evs)
    b = first[6]
    # each line carries its own measured begin and duration
    assert _ns(text, "ts")[:3] == [OFF + s for s in b.starts]
    assert _ns(text, "dur")[:3] == [x - s for s, x in zip(b.starts, b.ends)]
    # in ts order: the failing (third) call began after the two recorded before it
    assert [e["args"]["item"] for e in evs] == ["0", "1", "2", "1", "2", "3"]
    assert evs[5]["args"]["exception"] == "KeyError"


def test_bad_bulk_calls_never_raise():
    ev.ACTIVE.add("sample")
    ev.bulk("sample", "sample", ev.now(), chunk=[1, 2, 3], item=[1, 2])  # unequal columns: dropped, counted
    ev.bulk("sample", "sample", ev.now(), chunk=np.int64(3), batch=np.float32(1.5))  # no column: nothing
    assert ev.drain() == [] and ev.dropped() == 3


def test_inactive_category_records_nothing_and_still_maps():
    assert ev.each("sample", "sample", lambda c, i: c + i, np.array([1, 2]), np.array([3, 4])) == [4, 6]
    ev.bulk("sample", "sample", ev.now(), chunk=[1], item=[2])
    assert ev.drain() == []


def test_full_buffer_drops_the_whole_bulk_and_counts_each_event(monkeypatch):
    monkeypatch.setenv("STREAMSCOPE_TRACE_BUFFER_EVENTS", "130")
    monkeypatch.setenv("STREAMSCOPE_TRACE_FLUSH_INTERVAL", "60")
    monkeypatch.setenv("STREAMSCOPE_METRICS_INTERVAL", "60")
    ev.configure(metrics={"sample"})
    for j in range(4):
        ev.bulk("sample", "sample", ev.now(), chunk=[0] * 64, item=list(range(64)), batch=j)
    assert len(ev.BUF) == 2 and ev.dropped() == 2 * 64 == STATE.dropped
    snap = recording.metrics_snapshot()
    assert snap.dropped == 128 and snap.span("sample").count == 128 and snap.events == 128


def test_buffer_bound_counts_the_events_a_bulk_stands_for(monkeypatch):
    monkeypatch.setenv("STREAMSCOPE_TRACE_BUFFER_EVENTS", "100")
    monkeypatch.setenv("STREAMSCOPE_TRACE_FLUSH_INTERVAL", "60")
    monkeypatch.setenv("STREAMSCOPE_METRICS_INTERVAL", "60")
    ev.configure(metrics={"sample", "read"})
    ev.instant("x", "read")
    for j in range(3):  # 1 + 64 fits, the next 64 does not: memory stays bounded by the events
        ev.bulk("sample", "sample", ev.now(), chunk=[0] * 64, item=list(range(64)), batch=j)
    assert len(ev.BUF) == 2 and ev.dropped() == 128
    ev.drain()
    ev.bulk("sample", "sample", ev.now(), chunk=[0] * 64, item=list(range(64)))  # room again after a take
    assert len(ev.BUF) == 1 and ev.dropped() == 128


def test_metrics_count_every_event_of_a_bulk():
    agg = Aggregator()
    record_bulk("sample", "sample", 1_000, 1_000 + 64 * 500, {"chunk": [0] * 64, "item": list(range(64))}, {})
    record_bulk("sample", "sample", 0, 0, {"chunk": [1], "item": [1]}, {}, [10], [2_010])
    agg.add(ev.drain())
    st = agg.spans["sample/sample"]
    assert st.count == 65 and agg.events == 65
    assert st.total_s == pytest.approx((64 * 500 + 2_000) / 1e9)
    assert st.max_s == pytest.approx(2_000 / 1e9)


@st.composite
def _bulks(draw):
    out = []
    t = 5_000_000_000
    for _ in range(draw(st.integers(1, 4))):
        n = draw(st.integers(1, 40))
        big = draw(st.sampled_from([9, 10**4, 10**9, 2**40]))
        cols = {
            "chunk": np.array(draw(st.lists(st.integers(0, big), min_size=n, max_size=n)), dtype=np.int64),
            "item": draw(st.lists(st.integers(0, big), min_size=n, max_size=n)),
        }
        common = draw(
            st.sampled_from(
                [{}, {"batch": draw(st.integers(0, 10**6))}, {"batch": 3, "tag": "a;b\nc"}, {"neg": -1}, {"f": 1.5}]
            )
        )
        tid = draw(st.sampled_from([7, 8]))
        if draw(st.booleans()):
            span = draw(st.integers(0, 10**7))
            b = Bulk(n, t + span, cols, None, None, {**common, "batched": n})
        else:
            starts = sorted(draw(st.lists(st.integers(t, t + 10**8), min_size=n, max_size=n)))
            ends = [s + draw(st.integers(0, 10**10)) for s in starts]
            b = Bulk(n, ends[-1], cols, starts, ends, dict(common))
        out.append((BULK, "sample", "sample", t, 42, tid, b))
        if draw(st.booleans()):
            out.append(("I", "mark", "read", t + 1, 42, tid, {"file": "x;y"}))
        t += draw(st.integers(0, 10**11))  # crosses the 100 s boundaries of the shared leading digits
    return out


@settings(max_examples=60, deadline=None)
@given(_bulks())
def test_vectorised_lines_equal_the_reference_rendering_and_parse(events):
    got = encode(_batch(events))
    parsed = check_log(got)
    _runs, done, _pids = render_bulks(_batch(events))
    ref_lines: list[tuple[int, str]] = []  # (ts ns, line) in recording order
    for e in events:
        if e[0] == BULK:
            mid = f"pid: {e[4]}; tid: {e[5]}; name: sample; cat: sample; cname: generic_work; "
            lines = bulk_lines(e[3] + OFF, OFF, mid, e[6], ENV).splitlines(keepends=True)
            ref_lines += zip(bulk_ts(e[3] + OFF, OFF, e[6]).tolist(), lines)
        else:
            ref_lines.append((e[3] + OFF, encode(_batch([e]))))
    ref = check_log("".join(line for _, line in ref_lines))
    # a file holds its lines in ts order (events with equal ts in either order)
    assert [e["ts"] for e in parsed] == sorted(e["ts"] for e in parsed)
    assert sorted(map(repr, map(_norm, parsed))) == sorted(map(repr, map(_norm, ref)))
    assert len(parsed) == sum(e[6].n if e[0] == BULK else 1 for e in events)
    # expand() gives sinks the same events as plain tuples
    plain = check_log(encode(_batch(expand(events))))
    assert sorted(map(repr, map(_norm, plain))) == sorted(map(repr, map(_norm, parsed)))
    vectorised = {
        id(e[6]) for e in events if e[0] == BULK and all(type(v) is int and v >= 0 for v in e[6].fields.values())
    }
    assert done == vectorised


@settings(max_examples=40, deadline=None)
@given(_bulks(), _bulks(), st.booleans())
def test_a_mixed_batch_writes_each_process_with_its_own_fields(mine, theirs, odd_env):
    """Events of two processes in one batch (the recorder writes a worker's parcel with its own events): the
    same lines as two batches, each process's with its own rank/worker fields, every thread in ts order."""
    theirs = [(e[0], e[1], e[2], e[3], 43, e[5], e[6]) for e in theirs]  # a second process
    env43 = {"dist_world_size": 1, "dist_global_rank": 0, "dist_num_nodes": 1, "worker_world_size": 2, "worker_rank": 0}
    if odd_env:  # not the standard five: the careful path, per process
        env43 = {**env43, "extra": 5}
    got = check_log(encode(EventBatch(mine + theirs, OFF, dict(ENV), {43: env43})))
    ref = check_log(encode(_batch(mine)) + encode(EventBatch(theirs, OFF, env43)))
    assert sorted(map(repr, map(_norm, got))) == sorted(map(repr, map(_norm, ref)))
    for pid, env in ((42, ENV), (43, env43)):
        lines = [e for e in got if e["pid"] == pid]
        assert lines and all(e["args"][k] == str(v) for e in lines for k, v in env.items())
        for tid in {e["tid"] for e in lines}:
            ts = [e["ts"] for e in lines if e["tid"] == tid]
            assert ts == sorted(ts)


@settings(max_examples=30, deadline=None)
@given(_bulks(), _bulks(), st.sampled_from([(1 << 20, True), (700, True), (1 << 20, False)]))
def test_the_file_sink_writes_exactly_the_encoded_lines(mine, theirs, how):
    """The sink hands the encoder's pieces to one writev (or, over ``_MAX_WRITE`` or without writev, writes
    runs of whole lines): the file holds exactly the encoding, whatever the pieces."""
    import tempfile

    theirs = [(e[0], e[1], e[2], e[3], 43, e[5], e[6]) for e in theirs]
    batch = EventBatch(mine + theirs, OFF, dict(ENV), {43: dict(ENV, worker_rank=0)})
    expected = encode(batch).encode()
    with tempfile.TemporaryDirectory() as d:
        saved = files._MAX_WRITE, files._WRITEV
        files._MAX_WRITE = how[0]
        files._WRITEV = files._WRITEV if how[1] else None
        try:
            sink = LitracerFileSink(os.path.join(d, "t.log"))
            sink.export(batch)
            sink.export(batch)
            sink.shutdown()
        finally:
            files._MAX_WRITE, files._WRITEV = saved
        with open(os.path.join(d, "t.log"), "rb") as f:
            assert f.read() == expected * 2
    assert sink.written_bytes == 2 * len(expected) and sink.dropped_events == 0


def test_a_flush_of_several_runs_comes_out_in_pieces_and_is_written_whole(tmp_path):
    """Interleaved series of two processes come out of the encoder as several pieces (views into the rendered
    rows), and the sink writes them all in order."""
    entries = []
    for pid, t in ((1, 0), (2, 500), (1, 1000), (2, 1500)):
        b = Bulk(4, t + 400, {"chunk": [0, 0, 1, 1], "item": [0, 1, 2, 3]}, None, None, {"batch": t})
        entries.append((BULK, "sample", "sample", t, pid, 7, b))
    entries.append(("X", "read", "read", 100, 1, 7, {"chunk": 3, "dur": 5}))
    batch = EventBatch(entries, OFF, dict(ENV), {2: dict(ENV, worker_rank=0)})
    pieces = encode_pieces(batch)
    assert len(pieces) > 1 and any(type(p) is memoryview for p in pieces)
    sink = LitracerFileSink(str(tmp_path / "t.log"))
    sink.export(batch)
    sink.shutdown()
    text = (tmp_path / "t.log").read_text()
    assert text == encode(batch)
    assert len(check_log(text)) == 17


def test_full_disk_counts_every_event_of_a_bulk(tmp_path):
    sink = LitracerFileSink(str(tmp_path / "ok.log"))
    sink.shutdown()
    sink.fd = os.open("/dev/full", os.O_WRONLY)
    entry = (
        BULK,
        "sample",
        "sample",
        5,
        1,
        2,
        Bulk(64, 5 + 64_000, {"chunk": [0] * 64, "item": list(range(64))}, None, None, {"batched": 64}),
    )
    with pytest.raises(OSError):
        sink.export(_batch([entry, ("I", "x", "crash", 9, 1, 2, {})]))
    assert sink.dropped_events == 65 and sink.written_events == 0
    sink.shutdown()


_FSIZE_CHILD = textwrap.dedent(
    """
    import resource, signal, sys
    import numpy as np
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (20000, 20000))
    from streamscope import events as ev
    from streamscope import recording
    from streamscope.api.tracing import enable_tracer, flush_tracer
    from streamscope.trace.exporters import LitracerFileSink
    enable_tracer("sample", log_file=sys.argv[1], flush_interval=60)
    for j in range(4):
        ev.bulk("sample", "sample", ev.now(), chunk=np.zeros(64, np.int64), item=np.arange(64), batch=j)
    flush_tracer()
    ((_, sink),) = recording.RECORDER.sinks
    print(sink.written_events, sink.dropped_events)
    """
)


@pytest.mark.skipif(not hasattr(resource, "RLIMIT_FSIZE") or not hasattr(signal, "SIGXFSZ"), reason="posix")
def test_disk_filling_mid_bulk_leaves_whole_lines_and_counts_the_rest(tmp_path):
    log = tmp_path / "t.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("STREAMSCOPE_", "LITDATA_"))}
    r = subprocess.run(
        [sys.executable, "-c", _FSIZE_CHILD, str(log)], env=env, capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 0, r.stderr
    written, dropped = map(int, r.stdout.split())
    assert written + dropped == 256 and dropped > 0
    parser = LitracerParser()
    complete = [line for line in log.read_text().split("\n") if parser.parse_line(line) is not None]
    for line in complete:
        check_line(line)  # the line the disk filled in was removed: every line Litracer reads is whole
    assert len(complete) == written


def test_short_write_at_any_byte_counts_exactly_the_lines_parsers_read(tmp_path):
    b = Bulk(3, 5 + 3_000, {"chunk": [0, 0, 1], "item": [7, 8, 0]}, None, None, {"batched": 3})
    data = encode(_batch([(BULK, "sample", "sample", 5, 1, 2, b)])).encode()
    for pos in range(len(data) + 1):
        sink = LitracerFileSink(str(tmp_path / "x.log"))
        sink.file._lost(data, pos, 3)  # the transport counts what a cut left readable
        # where the cut line cannot be removed (another writer appended since), one cut after its ph
        # value reads as a whole event and counts as written; one cut inside "ph: " counts as lost
        lines = [LitracerParser().parse_line(ln) for ln in data[:pos].decode().split("\n")]
        readable = [e for e in lines if e is not None and e["ph"]]
        assert sink.written_events == len(readable) and sink.dropped_events == 3 - len(readable), pos
        sink.shutdown()


def test_each_prepare_runs_outside_the_timed_calls():
    import time

    ev.ACTIVE.add("sample")
    opened = []

    def prepare(c):
        opened.append(c)
        time.sleep(0.005)  # e.g. a chunk download: not part of any sample's duration
        return {"chunk": c}

    got = ev.each("sample", "sample", lambda oc, i: (oc["chunk"], i), [4, 4], [0, 1], prepare=prepare)
    assert got == [(4, 0), (4, 1)] and opened == [4, 4]
    (entry,) = ev.drain()
    b = entry[6]
    assert all(e - s < 5_000_000 for s, e in zip(b.starts, b.ends))
    assert b.starts[1] - b.ends[0] >= 5_000_000  # the second prepare ran between the two timed calls
    with pytest.raises(OSError):
        ev.each("sample", "sample", lambda oc, i: i, [1], [0], prepare=lambda c: (_ for _ in ()).throw(OSError(c)))
    assert ev.drain() == []  # a failing prepare is not a sample event
    assert ev.each("read", "read", lambda oc, i: oc + i, [1, 2], [10, 20], prepare=lambda c: c * 100) == [110, 220]
