from __future__ import annotations

import gc
import multiprocessing as mp
import os
import signal
import time

import pytest
import torch
from torch.utils.data import DataLoader, IterableDataset

import streamscope.debugger
from streamscope import events as ev
from streamscope import recording
from streamscope._core.errors import TraceConfigError
from streamscope.api.tracing import enable_metrics, enable_tracer, flush_tracer, metrics
from tests.support.litracer_parser import check_log, unmatched
from tests.support.tracing import clean_tracer  # noqa: F401

pytestmark = pytest.mark.usefixtures("clean_tracer")


def _events(path):
    flush_tracer()
    return check_log(path.read_text())


def test_debugger_alias_and_env(tmp_path):
    assert streamscope.debugger.enable_tracer is enable_tracer
    log = tmp_path / "t.log"
    enable_tracer("batch", log_file=str(log), flush_interval=1)
    assert os.environ["STREAMSCOPE_TRACE_LEVEL"] == "batch"
    assert os.environ["STREAMSCOPE_TRACE_CATEGORIES"] == "batch,crash,epoch,stall,tune"
    assert os.environ["STREAMSCOPE_LOG_FILE"] == str(log)
    assert "litracer" in os.environ["STREAMSCOPE_TRACE_SINKS"].split(",")
    assert ev.ACTIVE == {"batch", "crash", "epoch", "stall", "tune"}
    enable_tracer("sample", categories=["read", "sample"], item_loader=False, log_file=str(log))
    assert ev.ACTIVE == {"read"}
    enable_tracer("off", log_file=str(log))
    assert not ev.ACTIVE


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"level": "verbose"}, "unknown trace level 'verbose'; valid levels"),
        ({"categories": ["read", "nope"]}, "unknown trace category 'nope'"),
        ({"flush_interval": 0}, "flush_interval"),
    ],
)
def test_bad_arguments_leave_the_environment_untouched(tmp_path, kwargs, match):
    before = dict(os.environ)
    with pytest.raises(ValueError, match=match):
        enable_tracer(log_file=str(tmp_path / "t.log"), **kwargs)
    assert dict(os.environ) == before and not ev.ACTIVE


def test_unwritable_log_file_is_refused_at_enable_time(tmp_path):
    (tmp_path / "f").write_text("")
    before = dict(os.environ)
    with pytest.raises(TraceConfigError, match="f/t.log"):
        enable_tracer(log_file=str(tmp_path / "f" / "t.log"))
    assert dict(os.environ) == before


def test_enable_tracer_opens_the_log_once_for_the_run(tmp_path):
    log = tmp_path / "t.log"
    enable_tracer("chunk", log_file=str(log))
    ((_, sink),) = recording.RECORDER.sinks
    assert sink.path == str(log) and sink.fd is not None  # opened here, not by the first flush
    with ev.span("download", "download", chunk=1):
        pass
    flush_tracer()
    assert recording.RECORDER.sinks[0][1] is sink and [e["ph"] for e in check_log(log.read_text())] == ["B", "E"]
    enable_tracer("off", log_file=str(log))
    assert recording.RECORDER.sinks is None and sink.fd is None  # switched off: the file is closed


def test_main_process_events_reach_the_log(tmp_path):
    log = tmp_path / "t.log"
    enable_tracer("chunk", log_file=str(log))
    with ev.span("download", "download", chunk=1, url="s3://b/k;x\ny") as f:
        f["bytes"] = 5
    ev.crash(ValueError("bad;\nvalue"))
    ev.instant("sample", "sample")  # not at chunk level
    evs = _events(log)
    assert [(e["name"], e["ph"]) for e in evs] == [("download", "B"), ("download", "E"), ("crash", "I")]
    assert evs[1]["args"]["bytes"] == "5" and evs[1]["args"]["url"] == "s3://b/k,x y"
    assert evs[2]["args"]["error"] == "ValueError: bad, value" and evs[2]["cname"] == "terrible"


def _child(n):
    for i in range(n):
        with ev.span("download", "download", chunk=i):
            pass


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_child_processes_trace_from_the_environment(tmp_path, method):
    log = tmp_path / "t.log"
    enable_tracer("chunk", log_file=str(log), flush_interval=30)
    ev.instant("crash", "crash", error="parent, unflushed at fork")
    p = mp.get_context(method).Process(target=_child, args=(3,))
    p.start()
    p.join(60)
    assert p.exitcode == 0
    evs = _events(log)
    child = [e for e in evs if e["pid"] == p.pid]
    assert [e["ph"] for e in child] == ["B", "E"] * 3
    assert [e["pid"] for e in evs if e["name"] == "crash"] == [os.getpid()]  # written once, by the parent
    assert not unmatched(evs)


class _Spans(IterableDataset):
    def __init__(self, n=8, fail_at=None):
        self.n, self.fail_at = n, fail_at

    def __iter__(self):
        info = torch.utils.data.get_worker_info()
        wid, nw = (info.id, info.num_workers) if info else (0, 1)
        for i in range(wid, self.n, nw):
            with ev.span("download", "download", chunk=i) as f:
                f["bytes"] = 100
            with ev.span("sample", "sample", index=i):
                if i == self.fail_at:
                    raise RuntimeError(f"sample {i} is bad")
                yield torch.tensor(i)


def _loader(ds, method):
    return DataLoader(ds, batch_size=None, num_workers=2, multiprocessing_context=method, timeout=60)


@pytest.mark.slow
@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_dataloader_workers_trace_with_worker_fields(tmp_path, method):
    log = tmp_path / "t.log"
    enable_tracer("sample", log_file=str(log))
    got = sorted(int(x) for x in _loader(_Spans(8), method))
    assert got == list(range(8))
    evs = _events(log)
    workers = {(e["args"]["worker_rank"], e["args"]["worker_world_size"]) for e in evs}
    assert workers == {("0", "2"), ("1", "2")}
    assert len({e["pid"] for e in evs}) == 2 and os.getpid() not in {e["pid"] for e in evs}
    samples = [e for e in evs if e["name"] == "sample"]
    assert len(samples) == 8 and {e["ph"] for e in samples} == {"X"}  # compact: one complete event each
    assert all(e["dur"] > 0 for e in samples)
    assert not unmatched(evs)


@pytest.mark.slow
def test_early_break_and_worker_exception_close_every_span(tmp_path, monkeypatch):
    # After a worker error torch cannot stop its workers politely: it SIGTERMs them after
    # MP_STATUS_CHECK_INTERVAL and they _exit(0); shorten the wait. Their open spans are closed by the
    # main process from their last metrics snapshot.
    monkeypatch.setattr(torch.utils.data._utils, "MP_STATUS_CHECK_INTERVAL", 1.0)
    monkeypatch.setenv("STREAMSCOPE_METRICS_INTERVAL", "0.1")
    log = tmp_path / "t.log"
    enable_tracer("sample", log_file=str(log))
    it = iter(_loader(_Spans(40), "fork"))
    for _ in range(3):
        next(it)
    del it  # early break: workers shut down with their generators mid-span
    it = iter(_loader(_Spans(8, fail_at=3), "fork"))
    with pytest.raises(RuntimeError, match="sample 3 is bad"):
        for _ in it:
            pass
    del it  # workers shut down and flush on exit
    gc.collect()
    evs = _events(log)
    assert not unmatched(evs)
    ends = [e for e in evs if e["ph"] == "X" and e["name"] == "sample"]
    assert any(e["args"].get("exception") == "RuntimeError" for e in ends)


def _stuck_child(ready):
    with ev.span("download", "download", chunk=9):
        ev.flush()
        ready.set()
        time.sleep(60)


def test_killed_worker_gets_an_aborted_end(tmp_path):
    log = tmp_path / "t.log"
    enable_tracer("chunk", log_file=str(log))
    ctx = mp.get_context("fork")
    ready = ctx.Event()
    p = ctx.Process(target=_stuck_child, args=(ready,))
    p.start()
    assert ready.wait(30)
    time.sleep(0.2)
    os.kill(p.pid, signal.SIGKILL)
    p.join(30)
    evs = _events(log)  # flush_tracer closes the spans dead workers left open
    mine = [e for e in evs if e["pid"] == p.pid]
    assert [e["ph"] for e in mine] == ["B", "E"] and mine[1]["args"]["aborted"] == "1"
    assert mine[1]["args"]["worker_rank"] == "0" and mine[1]["args"]["chunk"] == "9"
    assert not unmatched(evs)


@pytest.mark.slow
def test_metrics_aggregate_two_workers_without_a_log(tmp_path):
    enable_metrics("chunk")
    assert list(_loader(_Spans(10), "fork"))
    with ev.span("batch", "batch"):
        pass
    snap = metrics()
    dl = snap.span("download")
    assert dl.count == 10 and dl.bytes == 1000 and dl.total_s > 0
    assert snap.span("batch").count == 1
    assert "sample/sample" not in snap.spans  # not in the chunk level
    assert len([p for p, s in snap.processes.items() if p != os.getpid() and s["final"]]) == 2
    assert not (tmp_path / "litdata_debug.log").exists()


@pytest.mark.slow
def test_done_workers_are_retired_from_the_run_directory(tmp_path):
    """Three epochs of two non-persistent workers: six done processes, counted once each, and no file left for
    any of them (each flush then reads only the files of processes still running)."""
    enable_metrics("chunk")
    for _ in range(3):
        assert sorted(int(x) for x in _loader(_Spans(10), "fork")) == list(range(10))
    flush_tracer(wait_workers=30)
    files = [f for f in os.listdir(recording.RECORDER.metrics_dir) if f.endswith(".json")]
    assert files == []  # the main process writes its own snapshot only at exit
    snap = metrics()
    done = [p for p, s in snap.processes.items() if p != os.getpid()]
    assert len(done) == 6 and all(snap.processes[p]["final"] and not snap.processes[p]["alive"] for p in done)
    dl = snap.span("download")
    assert dl.count == 30 and dl.bytes == 3000
    assert metrics().span("download").count == 30  # reading again does not add the retired numbers twice


def test_killed_worker_is_retired_with_its_aborted_span(tmp_path):
    enable_tracer("chunk", log_file=str(tmp_path / "t.log"))
    ctx = mp.get_context("fork")
    ready = ctx.Event()
    p = ctx.Process(target=_stuck_child, args=(ready,))
    p.start()
    assert ready.wait(30)
    time.sleep(0.2)  # its snapshot (with the open span) is published
    os.kill(p.pid, signal.SIGKILL)
    p.join(30)
    flush_tracer()
    assert not os.path.exists(os.path.join(recording.RECORDER.metrics_dir, f"{p.pid}.json"))
    snap = metrics()
    assert snap.processes[p.pid]["final"] and snap.span("download").aborted == 1


def test_litdata_environment_alone_switches_tracing_on(tmp_path):
    import subprocess
    import sys

    log = tmp_path / "ld.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("STREAMSCOPE_", "LITDATA_"))}
    env.update(LITDATA_TRACE_LEVEL="chunk", LITDATA_LOG_FILE=str(log))
    code = (
        "from streamscope import events as ev\n"
        "ev.configure_from_env()  # what streamscope's entry points do (importing events configures nothing)\n"
        "with ev.span('download', 'download', chunk=1): pass\n"
        "with ev.span('sample', 'sample', index=1): pass\n"
    )
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    evs = check_log(log.read_text())
    assert [(e["name"], e["ph"]) for e in evs] == [("download", "B"), ("download", "E")]


def test_timestamps_are_monotonic_per_thread(tmp_path):
    import threading

    log = tmp_path / "t.log"
    enable_tracer("chunk", log_file=str(log))

    together = threading.Barrier(3)

    def work():
        together.wait()
        for i in range(200):
            with ev.span("download", "download", chunk=i):
                pass
        together.wait()  # all alive at once: distinct thread idents

    threads = [threading.Thread(target=work) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    evs = _events(log)
    assert len(evs) == 1200 and len({e["tid"] for e in evs}) == 3
    last: dict[int, float] = {}
    for e in evs:
        assert e["ts"] >= last.get(e["tid"], 0.0)
        last[e["tid"]] = e["ts"]
    assert abs(evs[0]["ts"] / 1e6 - time.time()) < 60  # microseconds since the Unix epoch


_EXIT_WITH_LIVE_WORKERS = """
import sys, time
import streamscope
from tests.api.test_tracing import _Spans, _loader
streamscope.enable_tracer("sample", log_file=sys.argv[1])
it = iter(_loader(_Spans(400), "fork"))
for _ in range(3):
    next(it)
time.sleep(1.5)  # workers publish their snapshots (metrics_interval 0.2 s) with spans open
print("exiting with live workers")
"""


@pytest.mark.slow
def test_exit_with_live_workers_leaves_no_unmatched_begin(tmp_path):
    import subprocess
    import sys

    log = tmp_path / "t.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("STREAMSCOPE_", "LITDATA_"))}
    env["STREAMSCOPE_METRICS_INTERVAL"] = "0.2"
    r = subprocess.run(
        [sys.executable, "-c", _EXIT_WITH_LIVE_WORKERS, str(log)], env=env, capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 0, r.stderr
    evs = check_log(log.read_text())
    assert len({e["pid"] for e in evs}) == 2  # both workers wrote
    assert not unmatched(evs)


@pytest.mark.slow
@pytest.mark.parametrize("workers", [0, 2])
def test_streaming_dataloader_trace_and_metrics(tmp_path, workers):
    import streamscope
    from tests.engine._data import image_sample, write_dataset

    data = write_dataset(str(tmp_path / "ds"), 60, image_sample, chunk_size=10)
    log = tmp_path / "t.log"
    enable_tracer("sample", log_file=str(log))
    loader = streamscope.StreamingDataLoader(streamscope.StreamingDataset(data), batch_size=8, num_workers=workers)
    labels = sorted(int(x) for b in loader for x in b["label"])
    assert labels == list(range(60))
    flush_tracer(wait_workers=30)  # the loader lets its workers exit in the background after the epoch
    evs = _events(log)
    assert not unmatched(evs)
    samples = [e for e in evs if e["name"] == "sample"]
    assert len(samples) == 60 and {e["ph"] for e in samples} == {"X"}
    assert {e["args"]["worker_world_size"] for e in samples} == {str(max(1, workers))}
    snap = metrics()
    assert snap.span("sample").count == 60
    assert snap.span("batch").count == 8


def _square(i):
    return {"i": i, "sq": i * i}


@pytest.mark.slow
@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_optimize_workers_are_traced(tmp_path, method):
    import streamscope

    log = tmp_path / "t.log"
    enable_tracer("sample", log_file=str(log))
    streamscope.optimize(
        fn=_square,
        inputs=list(range(20)),
        output_dir=str(tmp_path / "out"),
        chunk_size=5,
        num_workers=2,
        start_method=method,
        verbose=False,
    )
    evs = _events(log)
    assert not unmatched(evs)
    worker_pids = {e["pid"] for e in evs} - {os.getpid()}
    assert len(worker_pids) == 2, {(e["pid"], e["name"]) for e in evs}
    assert sum(1 for e in evs if e["pid"] in worker_pids and e["cat"] == "sample") >= 20


def test_flush_tracer_without_other_processes_writes_once(tmp_path, monkeypatch):
    """With no worker and no other process's snapshot (num_workers=0) the wait finds nothing to repair."""
    log = tmp_path / "t.log"
    enable_tracer("chunk", log_file=str(log), flush_interval=60)
    calls = []
    flush = ev.flush
    monkeypatch.setattr(ev, "flush", lambda *a, **k: (calls.append(1), flush(*a, **k))[1])
    ev.instant("read", "read", chunk=1)
    flush_tracer(wait_workers=5)
    assert len(calls) == 1 and "chunk: 1;" in log.read_text()
