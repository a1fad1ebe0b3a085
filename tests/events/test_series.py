"""Series: per-iteration spans recorded as columns, the recorder's hold-back, and the file's ts order."""

from __future__ import annotations

import sys
import threading
import time

import numpy as np
import pytest

from streamscope import events as ev
from streamscope import recording
from streamscope.api.tracing import enable_tracer, flush_tracer
from streamscope.events import bus
from streamscope.events.bus import BULK
from streamscope.events.series import SERIES, open_horizons
from streamscope.recording.metrics import Aggregator
from tests.support.litracer_parser import check_log
from tests.support.tracing import clean_tracer  # noqa: F401

pytestmark = pytest.mark.usefixtures("clean_tracer")


def _compact(*cats: str) -> None:
    ev.COMPACT.clear()
    ev.COMPACT.update(cats)


def test_inactive_category_gives_a_series_that_records_nothing():
    s = ev.series("batch", "batch", ("batch",), epoch=1)
    t0 = s.begin()
    s.end(0)
    s.mark(ev.now())
    s.put(1)
    s.finish()
    assert t0 == 0 and ev.drain() == [] and not open_horizons()


def test_compact_series_is_one_bulk_entry_with_measured_times():
    _compact("batch")
    ev.ACTIVE.add("batch")
    s = ev.series("batch", "batch", ("batch",), epoch=3, rank=0)
    spans = []
    for j in range(5):
        if j % 2:
            spans.append(s.begin())
            s.end(j)
        else:  # the hot loops' form: no method call
            t0 = ev.now()
            spans.append(t0)
            s.mark(t0)
            s.mark(ev.now())
            s.put(j)
    assert ev.drain() == []  # pending in the series, not one tuple per event
    s.finish()
    (entry,) = ev.drain()
    assert entry[0] == BULK and entry[1:3] == ("batch", "batch") and entry[3] == spans[0]
    b = entry[6]
    assert b.n == 5 and list(b.cols) == ["batch"] and b.fields == {"epoch": 3, "rank": 0}
    assert b.cols["batch"].tolist() == [0, 1, 2, 3, 4]
    assert b.starts.tolist() == spans and (b.ends >= b.starts).all()
    plain = ev.expand([entry])
    assert [(e[0], e[6]["batch"], e[6]["epoch"]) for e in plain] == [("X", j, 3) for j in range(5)]


def test_a_take_hands_over_only_complete_events():
    _compact("stall")
    ev.ACTIVE.add("stall")
    s = ev.series("stall", "stall", ("batch",))
    s.begin()
    s.end(0)
    s.begin()
    s.mark(ev.now())  # ended, its value not yet put
    s.take()
    assert [e[6].cols["batch"].tolist() for e in ev.drain()] == [[0]]
    assert s.horizon() >= 0  # the ended event without its value still holds its thread back
    s.put(1)
    s.begin()  # open
    s.take()
    assert [e[6].cols["batch"].tolist() for e in ev.drain()] == [[1]]
    s.finish()  # drops the open one
    assert ev.drain() == [] and s.horizon() == -1


def test_takes_from_other_threads_lose_and_repeat_nothing():
    """The owner appends while two other threads take (as the flusher and a flush_tracer call do): every event
    reaches the buffer once, and the buffer's order is each event's order."""
    _compact("stall")
    ev.ACTIVE.add("stall")
    s = ev.series("stall", "stall", ("batch", "items"))
    n = 20_000
    stop = threading.Event()

    def owner() -> None:
        mark, put, now = s.mark, s.put, ev.now
        for j in range(n):
            mark(now())
            mark(now())
            put(j)
            put(j % 7)
            if j % 500 == 0:
                time.sleep(0)  # let the takers run in between
        stop.set()

    def taker() -> None:
        while not stop.is_set():
            s.take()
            time.sleep(0)

    threads = [threading.Thread(target=owner), threading.Thread(target=taker)]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as possible: the takers' cuts must still not collide
    try:
        for t in threads:
            t.start()
        taker()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(interval)
    s.finish()
    entries = ev.drain()
    assert len(entries) > 1  # the takes really interleaved with the appends
    got = sorted(j for e in entries for j in e[6].cols["batch"].tolist())
    assert got == list(range(n))  # once each (two takers append to the buffer in either order)
    for e in entries:
        b = e[6]
        assert (b.cols["items"] == b.cols["batch"] % 7).all() and (b.ends >= b.starts).all()
        assert (b.cols["batch"] == np.arange(b.cols["batch"][0], b.cols["batch"][0] + b.n)).all()


def test_non_compact_series_records_begin_end_pairs():
    _compact()
    ev.ACTIVE.add("batch")
    s = ev.series("batch", "batch", ("batch", "items"), epoch=1)
    s.begin()
    s.end(7, 64)
    s.take()
    b, e = ev.drain()
    assert (b[0], e[0]) == ("B", "E") and b[6] == e[6] == {"epoch": 1, "batch": 7, "items": 64} and e[3] >= b[3]


BATCH = ("batch", "batch", "batch", {"epoch": 2, "rank": 0})
STALL = ("stall", "stall", "batch", {"epoch": 2})


def _loop(tl, n: int) -> list[int]:
    """A loop's boundaries: stall for batch j, then batch j, for j < n; the times marked."""
    times = [ev.now()]
    tl.mark(times[-1])
    for j in range(n):
        for code in (~j, j):
            times.append(ev.now())
            tl.mark(times[-1])
            tl.put(code)
    return times


def test_timeline_is_one_bulk_entry_per_kind_back_to_back():
    _compact("batch", "stall")
    ev.ACTIVE.update({"batch", "stall"})
    tl = ev.timeline(BATCH, STALL)
    times = _loop(tl, 4)
    assert ev.drain() == []
    tl.finish()
    entries = {e[1]: e for e in ev.drain()}
    assert set(entries) == {"batch", "stall"} and all(e[0] == BULK for e in entries.values())
    b, st = entries["batch"][6], entries["stall"][6]
    assert b.cols["batch"].tolist() == [0, 1, 2, 3] and st.cols["batch"].tolist() == [0, 1, 2, 3]
    assert b.fields == {"epoch": 2, "rank": 0} and st.fields == {"epoch": 2}
    assert st.starts.tolist() == times[0:-1:2] and st.ends.tolist() == times[1::2]  # each ends where the next begins
    assert b.starts.tolist() == times[1::2] and b.ends.tolist() == times[2::2]
    assert entries["stall"][3] == times[0] and entries["batch"][3] == times[1]
    plain = ev.expand(list(entries.values()))
    assert [(e[1], e[6]["batch"]) for e in sorted(plain, key=lambda e: e[3])] == [
        (name, j) for j in range(4) for name in ("stall", "batch")
    ]


def test_timeline_take_keeps_the_open_event_and_its_horizon():
    _compact("batch", "stall")
    ev.ACTIVE.update({"batch", "stall"})
    tl = ev.timeline(BATCH, STALL)
    times = _loop(tl, 2)
    tl.take()
    assert sum(e[6].n for e in ev.drain()) == 4
    assert tl.horizon() == times[-1]  # the event after the last batch has begun: it holds its thread back
    tl.mark(ev.now())  # a stall ended, its value not yet put: not taken
    tl.take()
    assert ev.drain() == [] and tl.horizon() == times[-1]
    tl.put(~2)
    tl.take()
    ((_, name, *_rest, b),) = ev.drain()
    assert name == "stall" and b.cols["batch"].tolist() == [2] and b.starts.tolist() == [times[-1]]
    tl.finish()  # drops the open batch
    assert ev.drain() == [] and tl.horizon() == -1 and not open_horizons()


def test_timeline_writes_only_its_active_kinds_and_pairs_when_not_compact():
    _compact("batch")
    ev.ACTIVE.add("stall")  # batch inactive: only the stalls are written, as B/E pairs
    tl = ev.timeline(BATCH, STALL)
    times = _loop(tl, 3)
    tl.finish()
    evs = ev.drain()
    assert [(e[0], e[1], e[6]["batch"]) for e in evs] == [(ph, "stall", j) for j in range(3) for ph in "BE"]
    assert [e[3] for e in evs] == [t for k in range(3) for t in times[2 * k : 2 * k + 2]]
    ev.ACTIVE.clear()
    assert ev.timeline(BATCH, STALL) is ev.NULL_SERIES  # neither active: nothing recorded, no series


def test_timeline_non_int_value_is_dropped_and_counted():
    _compact("batch", "stall")
    ev.ACTIVE.update({"batch", "stall"})
    tl = ev.timeline(BATCH, STALL)
    tl.mark(ev.now())
    tl.mark(ev.now())
    tl.put("x")  # type: ignore[arg-type]
    before = bus.STATE.dropped
    tl.finish()
    assert ev.drain() == [] and bus.STATE.dropped == before + 1


def test_wrong_number_of_values_is_dropped_and_counted():
    _compact("batch")
    ev.ACTIVE.add("batch")
    s = ev.series("batch", "batch", ("batch", "items"))
    before = ev.dropped()
    s.begin()
    s.end(1)  # one value for two columns: a call-site bug
    s.finish()
    assert ev.drain() == [] and ev.dropped() == before + 1


def test_a_value_that_is_not_an_int_is_dropped_and_counted_at_the_take():
    """The loop appends without checks; the take refuses what is not an int, counts it, and keeps going."""
    _compact("batch")
    ev.ACTIVE.add("batch")
    s = ev.series("batch", "batch", ("batch",))
    before = ev.dropped()
    s.mark(ev.now())
    s.mark(ev.now())
    s.put("seven")  # a call-site bug
    s.take()
    assert ev.drain() == [] and ev.dropped() == before + 1
    s.begin()
    s.end(8)  # the series still works
    s.finish()
    assert [e[6].cols["batch"].tolist() for e in ev.drain()] == [[8]]


def test_a_flush_from_another_thread_takes_the_pending_series_events(tmp_path):
    """A flush on any thread (the flusher's) takes another thread's complete series events, in ts order."""
    log = tmp_path / "t.log"
    enable_tracer("chunk", log_file=str(log), flush_interval=3600)
    step = [threading.Event() for _ in range(3)]

    def owner() -> None:
        s = ev.series("decode_batch", "read", ("batch",))
        s.begin()
        s.end(0)  # pending in the series
        with ev.span("download", "download", chunk=0):
            pass
        step[0].set()
        step[1].wait(10)
        s.finish()
        step[2].set()

    t = threading.Thread(target=owner)
    t.start()
    assert step[0].wait(10)
    ev.flush()  # from this thread
    evs = check_log(log.read_text())
    step[1].set()
    assert step[2].wait(10)
    t.join()
    ev.flush()
    assert check_log(log.read_text()) == evs  # nothing was left behind
    assert [(e["name"], e["ph"]) for e in evs] == [("decode_batch", "X"), ("download", "B"), ("download", "E")]


def test_open_series_holds_back_its_threads_later_events(tmp_path):
    """An event that begins inside an open series event is written after it, never before: ts order per thread."""
    log = tmp_path / "t.log"
    enable_tracer("chunk", log_file=str(log), flush_interval=3600)
    s = ev.series("decode_batch", "read", ("batch",))
    t0 = s.begin()
    with ev.span("download", "download", chunk=1):
        pass
    assert open_horizons() == {threading.get_ident(): t0}
    ev.flush()  # the download began after the open decode_batch: held back
    assert not log.exists() or log.read_text() == ""
    s.end(0)
    s.finish()
    evs = check_log(log.read_text()) if log.exists() else []
    assert evs == []  # nothing flushed since
    flush_tracer()
    evs = check_log(log.read_text())
    assert [(e["name"], e["ph"]) for e in evs] == [("decode_batch", "X"), ("download", "B"), ("download", "E")]
    assert [e["ts"] for e in evs] == sorted(e["ts"] for e in evs)


def test_a_horizon_older_than_the_hold_limit_holds_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("STREAMSCOPE_TRACE_HOLD_MAX", "0")
    log = tmp_path / "t.log"
    enable_tracer("chunk", log_file=str(log), flush_interval=3600)
    s = ev.series("decode_batch", "read", ("batch",))
    s.begin()  # abandoned: never ended
    with ev.span("download", "download", chunk=1):
        pass
    flush_tracer()
    assert [e["name"] for e in check_log(log.read_text())] == ["download", "download"]
    s.finish()
    assert not open_horizons()


def test_open_complete_span_holds_back_nested_events(tmp_path):
    log = tmp_path / "t.log"
    enable_tracer("chunk", log_file=str(log), flush_interval=3600)
    with ev.span("mmap", "read", chunk=0):  # "read" is compact by default: one X at exit
        with ev.span("download", "download", chunk=0):
            pass
        flush_tracer()
        assert log.read_text() == ""
    flush_tracer()
    evs = check_log(log.read_text())
    assert [(e["name"], e["ph"]) for e in evs] == [("mmap", "X"), ("download", "B"), ("download", "E")]


def test_loader_log_is_in_ts_order_per_thread(tmp_path):
    """A real epoch: the loop's batch and stall events interleave in the file by ts."""
    from streamscope.engine.dataloader import StreamingDataLoader
    from streamscope.engine.dataset import StreamingDataset
    from tests.engine._data import image_sample, write_dataset

    d = write_dataset(str(tmp_path / "img"), 40, image_sample, chunk_size=8)
    log = tmp_path / "t.log"
    enable_tracer("chunk", log_file=str(log))
    n = sum(len(b["label"]) for b in StreamingDataLoader(StreamingDataset(d), batch_size=4))
    flush_tracer()
    evs = check_log(log.read_text())
    assert n == 40
    last: dict[int, float] = {}
    for e in evs:
        assert e["ts"] >= last.get(e["tid"], 0.0), e
        last[e["tid"]] = e["ts"]
    names = [e["name"] for e in evs if e["name"] in ("stall", "decode_batch", "batch")]
    assert names[:4] == ["stall", "batch"] * 2  # the loop's order, not one kind after the other
    # num_workers=0 at level "chunk": the stall is the decoding, no decode_batch of its own (see the next test)
    assert names.count("batch") == 10 and names.count("decode_batch") == 0 and names.count("stall") == 11
    (epoch,) = [e for e in evs if e["name"] == "epoch" and e["ph"] == "B"]
    assert epoch["args"]["workers"] == "0"
    assert not SERIES or all(s.horizon() < 0 for s in SERIES)


@pytest.mark.parametrize(("level", "workers", "decodes"), [("chunk", 2, 10), ("sample", 0, 10), ("batch", 2, 0)])
def test_decode_batch_is_recorded_where_the_loop_does_not_decode(tmp_path, level, workers, decodes):
    """A worker's decode_batch tells decoding from idle workers at level "chunk"; with num_workers=0 the loop's
    stall is the decoding, so decode_batch is there only at level "sample" (around the batch's sample events)."""
    from streamscope.engine.dataloader import StreamingDataLoader
    from streamscope.engine.dataset import StreamingDataset
    from tests.engine._data import image_sample, write_dataset

    d = write_dataset(str(tmp_path / "img"), 40, image_sample, chunk_size=8)
    log = tmp_path / "t.log"
    enable_tracer(level, log_file=str(log))
    n = sum(len(b["label"]) for b in StreamingDataLoader(StreamingDataset(d), batch_size=4, num_workers=workers))
    flush_tracer(wait_workers=30)
    evs = check_log(log.read_text())
    got = [e for e in evs if e["name"] == "decode_batch"]
    assert n == 40 and len(got) == decodes
    assert sorted(int(e["args"]["batch"]) for e in got) == (list(range(10)) if decodes else [])
    loop_pid = {e["pid"] for e in evs if e["name"] == "batch"}
    assert all((e["pid"] in loop_pid) == (workers == 0) for e in got)


def test_batch_series_data_wait_equals_the_begin_end_form():
    """batch/data_wait from a bulk series is the same as from B/E pairs of the same times."""
    starts = [100, 300, 700, 1000]
    ends = [200, 450, 800, 1300]
    tid = 5
    be = Aggregator()
    evs: list = [("B", "epoch", "epoch", 0, 1, tid, {})]
    for s, e in zip(starts, ends):
        evs += [("B", "batch", "batch", s, 1, tid, {}), ("E", "batch", "batch", e, 1, tid, {})]
    be.add(evs)
    bulk = Aggregator()
    bulk.add(
        [
            ("B", "epoch", "epoch", 0, 1, tid, {}),
            (BULK, "batch", "batch", 100, 1, tid, bus.Bulk(2, 450, {"batch": [0, 1]}, starts[:2], ends[:2], {})),
            (BULK, "batch", "batch", 700, 1, tid, bus.Bulk(2, 1300, {"batch": [2, 3]}, starts[2:], ends[2:], {})),
        ]
    )
    for key in ("batch/batch", "batch/data_wait"):
        a, b = be.spans.get(key), bulk.spans.get(key)
        assert a is not None and b is not None, key
        assert (a.count, a.buckets, round(a.total_s, 12), a.max_s) == (
            b.count,
            b.buckets,
            round(b.total_s, 12),
            b.max_s,
        )


def test_bad_tracer_knob_values_fall_back_to_their_defaults(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("STREAMSCOPE_TRACE_BUFFER_EVENTS", "many")
    monkeypatch.setenv("STREAMSCOPE_TRACE_HOLD_MAX", "0.5")
    enable_tracer("chunk", log_file=str(tmp_path / "t.log"))
    assert bus.STATE.cap == 200_000 and recording.RECORDER.hold_max_ns == 500_000_000
    assert "STREAMSCOPE_TRACE_BUFFER_EVENTS='many'" in capsys.readouterr().err
