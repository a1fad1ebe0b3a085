"""The pictures of ``summary``: the timeline (trace start, epochs, process roles) and the loop's wait over time."""

from __future__ import annotations

import numpy as np
import pytest

from tests.trace_tools.helpers import T0, line, load_chrome, span, write_log
from trace_tools.cli import main
from trace_tools.stall import CLASSES, activity_class
from trace_tools.summary import summarize

pytest.importorskip("matplotlib")

MS = 1000.0  # the helpers take microseconds

#: stall spans of the loop (pid 5), in ms: the loop runs from 500 to 900 ms
STALLS = [(500, 510), (560, 600), (640, 650), (700, 750), (820, 830)]


def _log(tmp_path) -> str:
    """An optimize job (main pid 5, workers pids 11 and 12) then a loader epoch (main pid 5, workers 21 and 22).

    The optimize workers' lines come first in the file (each process flushes its own buffer), but the main
    process's counter at ts 0 is the trace's first event.
    """
    opt: list[str] = []
    for pid, w, t in ((11, 0, 100), (12, 1, 200)):
        opt.append(line("I", "chunk_write", "write", t * MS, pid=pid, worker=w, file=f"chunk-{w}-0.bin"))
        opt += span("upload", "upload", t * MS + 10, t * MS + 500, pid=pid, worker=w, file=f"chunk-{w}-0.bin")
        opt += span("chunk_write", "write", (t + 50) * MS, (t + 60) * MS, pid=pid, worker=w, final="True")
    main_ = [line("C", "queue_depth", "batch", 0, pid=5, value=0)]
    main_.append(line("B", "optimize", "epoch", 1 * MS, pid=5, inputs=10, workers=2))
    main_ += span("index_merge", "read", 399 * MS, 399.5 * MS, pid=5)
    main_.append(line("E", "optimize", "epoch", 400 * MS, pid=5))
    main_.append(line("B", "epoch", "epoch", 500 * MS, pid=5, epoch=0, workers=2))
    prev = 500
    for i, (b, e) in enumerate(STALLS):
        if b > prev:
            main_ += span("batch", "batch", prev * MS, b * MS, pid=5, batch=i - 1, epoch=0)
        main_ += span("stall", "stall", b * MS, e * MS, pid=5, batch=i)
        prev = e
    main_ += span("batch", "batch", prev * MS, 900 * MS, pid=5, batch=len(STALLS) - 1, epoch=0)
    main_.append(line("E", "epoch", "epoch", 900 * MS, pid=5, epoch=0))
    loader: list[str] = []
    loader += span("download", "download", 502 * MS, 540 * MS, pid=21, worker=0, chunk=0, bytes=100)
    loader += span("mmap", "read", 540 * MS, 541 * MS, pid=21, worker=0, chunk=0)
    loader += span("decode_batch", "read", 570 * MS, 595 * MS, pid=21, worker=0, batch=1)
    loader += span("decode_batch", "read", 700 * MS, 720 * MS, pid=22, worker=1, batch=3)
    return write_log(str(tmp_path / "job.log"), opt + main_ + loader)


def test_timeline_starts_at_the_trace_start_and_draws_epochs_and_roles(tmp_path):
    from trace_tools.plots import render_timeline

    log = _log(tmp_path)
    s = summarize(log)
    assert s.timeline is not None
    lay = render_timeline(s.timeline, str(tmp_path / "t.png"), "job.log")
    # x = 0 is the trace's first event (the main process's counter), not the first line nor the first worker span
    assert lay.start_us == pytest.approx(T0)
    assert lay.xlim[0] == 0.0 and lay.xlim[1] == pytest.approx(0.9)
    assert lay.extent[0] <= 0.0 and lay.extent[1] >= 0.9  # the binned image covers the whole trace
    # epochs (and the optimize job) drawn in the main process's epoch row, their edges as lines across the picture
    assert lay.epoch_rows == 1 and lay.labels[0] == "rank 0 · main · epochs"
    bars = {text: (x0, x1) for row, x0, x1, text, _ in lay.bars}
    assert bars["optimize"] == pytest.approx((0.001, 0.4)) and bars["epoch 0"] == pytest.approx((0.5, 0.9))
    assert lay.boundaries == pytest.approx([0.001, 0.4, 0.5, 0.9])
    # processes named by role, main first, then the loader's workers, then optimize's
    rows = lay.labels[lay.epoch_rows :]
    assert rows == [
        "rank 0 · main · stall",
        "rank 0 · main · batch",
        "rank 0 · main · read",
        "rank 0 · loader worker 0 · download",
        "rank 0 · loader worker 0 · read",
        "rank 0 · loader worker 1 · read",
        "rank 0 · optimize worker 0 · upload",
        "rank 0 · optimize worker 0 · write",
        "rank 0 · optimize worker 1 · upload",
        "rank 0 · optimize worker 1 · write",
    ]
    # the per-worker table keeps optimize worker 0 and loader worker 0 apart
    where = {w for _, _, w in s.by_where}
    assert {"rank 0 · optimize worker 0", "rank 0 · loader worker 0", "rank 0 · main"} <= where
    # an upload span sits where it happened: the bin at 100 ms of optimize worker 0's upload row is busy
    tl = s.timeline
    (key,) = lay.row_keys[rows.index("rank 0 · optimize worker 0 · upload")]
    i = int(np.floor((T0 + 100.2 * MS - tl.origin) / tl.width))  # type: ignore[operator]
    assert tl.rows[key].get(i, 0.0) > 0
    assert set(tl.rows[key]) <= {i - 1, i, i + 1}


def test_new_categories_are_valid_and_filter_apart(tmp_path, capsys):
    log = _log(tmp_path)
    assert main(["validate", "-q", log]) == 0, capsys.readouterr().out  # no unknown_category
    out = str(tmp_path / "d.json")
    assert main(["convert", log, "-o", out, "--cat", "download"]) == 0
    names = {(e["name"], e["cat"]) for e in load_chrome(out)["traceEvents"] if e["ph"] in ("X", "B", "I")}
    assert names == {("download", "download")}  # chunk downloads only: no upload
    assert main(["convert", log, "-o", out, "--cat", "upload,write"]) == 0
    names = {(e["name"], e["cat"]) for e in load_chrome(out)["traceEvents"] if e["ph"] in ("X", "B", "I")}
    assert names == {("upload", "upload"), ("chunk_write", "write")}
    assert main(["convert", log, "-o", str(tmp_path / "d.pftrace"), "--cat", "upload"]) == 0


def test_write_path_spans_are_not_loader_activity_in_old_logs_either():
    # logs written before the write path had its categories put upload in download and chunk_write in read
    assert activity_class("download", "upload") is None and activity_class("read", "chunk_write") is None
    assert activity_class("upload", "upload") is None and activity_class("write", "chunk_write") is None
    assert activity_class("download", "download") == "download" and activity_class("read", "mmap") == "read"


def test_old_log_upload_in_download_still_names_an_optimize_worker(tmp_path):
    lines = [
        *span("optimize", "epoch", 0, 1000, pid=5),
        *span("upload", "download", 10, 20, pid=11, worker=0),
        *span("download", "download", 2000, 2100, pid=21, worker=0, chunk=0),
    ]
    s = summarize(write_log(str(tmp_path / "old.log"), lines), with_timeline=False)
    assert {w for _, _, w in s.by_where} == {"rank 0 · main", "rank 0 · optimize worker 0", "rank 0 · loader worker 0"}


def _overlap(iv: list[tuple[float, float]], b0: float, b1: float) -> float:
    return sum(max(0.0, min(e, b1) - max(b, b0)) for b, e in iv)


def test_wait_shares_per_bin_add_up_to_the_wait_share_of_the_bin(tmp_path):
    from trace_tools.plots import render_waits

    s = summarize(_log(tmp_path))
    (r,) = s.stalls
    ov = r.over_time
    assert ov is not None and len(ov.edges) == len(STALLS) + 1  # fewer bins than waits would be noise
    stalls = [(T0 + b * MS, T0 + e * MS) for b, e in STALLS]
    loop = [(T0 + 500 * MS, T0 + 900 * MS)]
    bars = render_waits(s.stalls, str(tmp_path / "w.png"), "job.log", T0)
    assert len(bars) == 1
    (drawn,) = bars
    heights = np.zeros(len(ov.edges) - 1)
    for c in (*CLASSES, "idle"):
        bottom, height = drawn[c]
        assert bottom == pytest.approx(heights)  # stacked: each cause starts where the ones below it end
        heights += height
    for i in range(len(ov.edges) - 1):
        b0, b1 = float(ov.edges[i]), float(ov.edges[i + 1])
        want = _overlap(stalls, b0, b1) / _overlap(loop, b0, b1)
        assert heights[i] == pytest.approx(want, abs=1e-9), i
    assert heights.max() > 0.3 and heights.min() < heights.max()  # the bins differ: a picture over time
    # the bins together are the stall report's split of the whole wait
    for c in (*CLASSES, "idle"):
        assert float(ov.parts[c].sum()) == pytest.approx(r.parts[c], abs=1e-3), c
    assert r.parts["download"] > 0 and r.parts["sample"] > 0 and r.parts["idle"] > 0


def test_a_bin_the_loop_ran_part_of_shares_its_wait_over_the_loop_time_only():
    from array import array

    from trace_tools.stall import RankLog, analyse

    rl = RankLog()
    rl.loops = [("1", 0.0, 100.0), ("2", 150.0, 300.0)]  # the loop does not run between 100 and 150
    rl.stalls = array("d", [0, 10, 50, 60, 160, 180, 250, 300])
    rl.activity["download"] = array("d", [0, 5])
    rl.activity["sample"] = array("d", [160, 170, 250, 275])
    r = analyse("rank 0", rl, bins=3)
    ov = r.over_time
    assert ov is not None and list(ov.edges) == [0.0, 100.0, 200.0, 300.0]
    assert list(ov.loop_us) == [100.0, 50.0, 100.0]
    assert list(ov.wait_share()) == pytest.approx([0.2, 0.4, 0.5])  # 20 of 100, 20 of the loop's 50, 50 of 100
    total = sum(ov.share(c) for c in (*CLASSES, "idle"))
    assert list(total) == pytest.approx([0.2, 0.4, 0.5])
    assert list(ov.share("sample")) == pytest.approx([0.0, 0.2, 0.25])
    assert list(ov.share("download")) == pytest.approx([0.05, 0.0, 0.0])


def test_loader_workers_of_many_epochs_keep_one_row_per_worker(tmp_path):
    # 40 epochs of 2 workers each, new processes every epoch: 80 processes, more than MAX_ROWS
    from trace_tools.plots import MAX_ROWS, timeline_layout

    lines: list[str] = []
    for ep in range(40):
        t = ep * 100 * MS
        lines.append(line("B", "epoch", "epoch", t, pid=5, epoch=ep))
        for w in (0, 1):
            lines += span("decode_batch", "read", t + 10 * MS, t + 50 * MS, pid=100 + 2 * ep + w, worker=w)
        lines += span("stall", "stall", t + 1 * MS, t + 60 * MS, pid=5, batch=0)
        lines.append(line("E", "epoch", "epoch", t + 90 * MS, pid=5, epoch=ep))
    s = summarize(write_log(str(tmp_path / "e.log"), lines))
    tl = s.timeline
    assert tl is not None and 80 > MAX_ROWS and tl.dropped_rows == 0
    lay = timeline_layout(tl)
    assert lay.labels[lay.epoch_rows :] == [
        "rank 0 · main · stall",
        "rank 0 · loader worker 0 · read",
        "rank 0 · loader worker 1 · read",
    ]
    busy = sum(v for key in lay.row_keys[1] for v in tl.rows[key].values())
    assert busy == pytest.approx(40 * 40 * MS)  # every epoch's decode of worker 0, none dropped
    assert len([b for b in lay.bars if b[3].startswith("epoch")]) == 40
