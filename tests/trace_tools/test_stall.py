"""The stall report: exact interval arithmetic checked on logs whose answer is known."""

from __future__ import annotations

import random
from array import array

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.tracing import clean_tracer  # noqa: F401
from tests.trace_tools.helpers import LITDATA_LOG, STREAMSCOPE_LOG, span, write_log
from trace_tools.stall import CLASSES, RankLog, analyse, derive_waits, recommendation, union_measure
from trace_tools.summary import summarize


def test_union_measure():
    assert union_measure(np.array([[0, 10], [5, 15], [20, 25], [25, 30], [2, 3]], dtype=float)) == 25.0
    assert union_measure(np.empty((0, 2))) == 0.0


def test_streamscope_golden_answer():
    # worked out by hand in the log's comments-free design: see tests/trace_tools/data/streamscope_small.log
    (r,) = summarize(STREAMSCOPE_LOG, with_timeline=False).stalls
    assert r.source == "stall spans" and r.waits == 2 and r.wait_us == 13000.0
    assert r.parts == pytest.approx(
        {"download": 6900.0, "decompress": 700.0, "read": 4100.0, "sample": 0.0, "other": 100.0, "idle": 1200.0}
    )
    assert r.loop_us == 17000.0
    assert "downloading chunks for 53%" in recommendation(r)


def test_litdata_golden_answer_from_batch_gaps():
    (r,) = summarize(LITDATA_LOG, with_timeline=False).stalls
    assert r.source == "gaps between batch spans" and r.waits == 3 and r.wait_us == 11500.0
    assert r.parts == pytest.approx(
        {"download": 7200.0, "decompress": 0.0, "read": 1000.0, "sample": 200.0, "other": 100.0, "idle": 3000.0}
    )


def test_derive_waits_per_epoch():
    batches = [("0", 10.0, 20.0), ("0", 30.0, 40.0), ("1", 110.0, 120.0)]
    loops = [("0", 0.0, 50.0), ("1", 100.0, 130.0), ("2", 200.0, 210.0)]
    got = sorted(map(tuple, derive_waits(batches, loops).tolist()))
    assert got == [(0.0, 10.0), (20.0, 30.0), (40.0, 50.0), (100.0, 110.0), (120.0, 130.0), (200.0, 210.0)]


def _brute(stalls, acts):
    """Per-microsecond answer on an integer grid: the reference the exact arithmetic must match."""
    hi = int(max([e for _, e in stalls] + [e for v in acts.values() for _, e in v] + [1]))
    in_stall = np.zeros(hi, dtype=bool)
    for b, e in stalls:
        in_stall[b:e] = True
    owner = np.full(hi, len(CLASSES), dtype=int)  # idle
    for k in reversed(range(len(CLASSES))):
        for b, e in acts[CLASSES[k]]:
            owner[b:e] = k
    out = {c: float(np.sum(in_stall & (owner == k))) for k, c in enumerate(CLASSES)}
    out["idle"] = float(np.sum(in_stall & (owner == len(CLASSES))))
    return out


ivs = st.lists(st.tuples(st.integers(0, 400), st.integers(0, 60)).map(lambda t: (t[0], t[0] + t[1])), max_size=12)


@settings(max_examples=80, deadline=None)
@given(ivs.filter(lambda v: len(v) > 0), st.fixed_dictionaries({c: ivs for c in CLASSES}))
def test_exact_partition_matches_brute_force(stalls, acts):
    rl = RankLog()
    for b, e in stalls:
        rl.stalls.extend((b, e))
    for c in CLASSES:
        rl.activity[c] = array("d", [x for iv in acts[c] for x in iv])
    r = analyse("rank 0", rl)
    want = _brute(stalls, acts)
    assert r.parts == pytest.approx(want, abs=1e-6)
    assert r.wait_us == pytest.approx(sum(want.values()))


def _interleave(lines: list[str], rng: random.Random) -> list[str]:
    """Lines of different threads merged in a random order, each thread's own order kept (as buffered sinks do)."""
    per: dict[str, list[str]] = {}
    for ln in lines:
        key = ln.split("name:")[0].split("ts:")[1].split(";", 1)[1]  # "pid: ..; tid: ..;"
        per.setdefault(key, []).append(ln)
    queues = [q[::-1] for q in per.values()]
    out = []
    while queues:
        q = rng.choice(queues)
        out.append(q.pop())
        if not q:
            queues.remove(q)
    return out


def test_synthetic_log_with_known_answer(tmp_path):
    """A generated log: 50 batches; each wait is split into known download / sample / idle pieces."""
    rng = random.Random(7)
    lines = [*span("dataloader", "epoch", 0, 10**7, pid=1, epoch=0)[:1]]
    t = 0
    expect = {"download": 0, "sample": 0, "idle": 0}
    for i in range(50):
        d, s, idle = rng.randint(0, 500), rng.randint(0, 500), rng.randint(0, 500)
        w = rng.randint(0, 3)
        # wait = [t, t+d+s+idle): the worker downloads, then decodes, then nothing happens
        lines += span("stall", "stall", t, t + d + s + idle, pid=1, batch=i)
        lines += span("download", "download", t - 50, t + d, pid=100 + w, tid=2, worker=w, chunk=i)
        lines += span("sample", "sample", t + d, t + d + s, pid=100 + w, tid=1, worker=w, chunk=i, index=i)
        expect["download"] += d
        expect["sample"] += s
        expect["idle"] += idle
        t += d + s + idle
        lines += span("batch", "batch", t, t + 300, pid=1, batch=i, epoch=0)
        t += 300
    lines.append(span("dataloader", "epoch", 0, t, pid=1, epoch=0)[1])
    log = write_log(str(tmp_path / "syn.log"), _interleave(lines, rng))
    (r,) = summarize(log, with_timeline=False).stalls
    assert r.source == "stall spans"
    assert r.parts["download"] == expect["download"]
    assert r.parts["sample"] == expect["sample"]
    assert r.parts["idle"] == expect["idle"]
    assert r.parts["read"] == r.parts["decompress"] == r.parts["other"] == 0
    assert r.loop_us == t


def test_idle_recommendation(tmp_path):
    lines = [*span("stall", "stall", 0, 1000, pid=1), *span("sample", "sample", 0, 100, pid=2, worker=0)]
    (r,) = summarize(write_log(str(tmp_path / "i.log"), lines), with_timeline=False).stalls
    assert r.percent("idle") == 90.0
    assert "idle for 90%" in recommendation(r) and "num_workers" in recommendation(r)


def test_ranks_are_analysed_separately(tmp_path):
    lines = [
        *span("stall", "stall", 0, 100, pid=1, rank=0),
        *span("stall", "stall", 0, 100, pid=2, rank=1),
        *span("download", "download", 0, 100, pid=3, worker=0, rank=1),
    ]
    st_ = summarize(write_log(str(tmp_path / "r.log"), lines), with_timeline=False).stalls
    assert [(r.label, r.parts["download"], r.parts["idle"]) for r in st_] == [
        ("rank 0", 0.0, 100.0),
        ("rank 1", 100.0, 0.0),
    ]


def test_untraced_decoding_is_not_called_idle(tmp_path):
    from trace_tools.summary import format_summary

    # level "chunk": downloads traced, sample decoding not; most of each wait has no traced activity
    lines = [
        *span("stall", "stall", 0, 1000, pid=1, batch=0),
        *span("stall", "stall", 2000, 2400, pid=1, batch=1),
        *span("download", "download", 0, 100, pid=2, worker=0, chunk=0),
    ]
    s = summarize(write_log(str(tmp_path / "u.log"), lines), with_timeline=False)
    (r,) = s.stalls
    assert r.parts["idle"] == 1300.0 and r.first_wait_us == 1000.0 and "sample" not in r.seen
    rec = recommendation(r)
    assert "no sample spans" in rec and "level 'sample'" in rec
    text = format_summary(s)
    assert "no traced activity (decoding is not traced here, or idle)" in text
    assert "first wait 1.00ms (worker start-up, first chunks); the other 1 waits 400.0us" in text


def test_decode_batch_spans_count_as_decoding():
    from trace_tools.stall import activity_class

    assert activity_class("read", "decode_batch") == "sample"
    assert activity_class("read", "mmap") == "read"
    assert activity_class("stall", "stall") is None


def test_waits_of_a_loop_without_workers_are_its_own_decoding(tmp_path):
    """num_workers=0: the epoch span says ``workers: 0``; its waits count as decoding, except where a download
    (from the loop's prefetch threads) overlaps them, which ranks first."""
    lines = [
        *span("epoch", "epoch", 0, 5000, pid=1, epoch=1, workers=0),
        *span("stall", "stall", 0, 1000, pid=1, batch=0),
        *span("stall", "stall", 2000, 2400, pid=1, batch=1),
        *span("download", "download", 0, 300, pid=1, tid=2, chunk=0),
        *span("epoch", "epoch", 6000, 9000, pid=1, epoch=2, workers=2),  # workers: its waits are not decoding
        *span("stall", "stall", 6000, 6500, pid=1, batch=0),
    ]
    (r,) = summarize(write_log(str(tmp_path / "w0.log"), lines), with_timeline=False).stalls
    assert r.parts["download"] == 300.0 and r.parts["sample"] == 1100.0 and r.parts["idle"] == 500.0
    assert "sample" in r.seen


@pytest.mark.usefixtures("clean_tracer")
def test_a_real_num_workers_0_log_attributes_its_waits_to_decoding(tmp_path):
    from streamscope.api.tracing import enable_tracer, flush_tracer
    from streamscope.engine.dataloader import StreamingDataLoader
    from streamscope.engine.dataset import StreamingDataset
    from tests.engine._data import image_sample, write_dataset

    d = write_dataset(str(tmp_path / "img"), 40, image_sample, chunk_size=8)
    log = str(tmp_path / "t.log")
    enable_tracer("chunk", log_file=log)
    for _ in StreamingDataLoader(StreamingDataset(d), batch_size=4):
        pass
    flush_tracer()
    (r,) = summarize(log, with_timeline=False).stalls
    assert r.waits == 11 and r.wait_us > 0
    assert r.percent("sample") + r.percent("read") > 95.0  # the loop decoded (and opened chunks) while it waited
