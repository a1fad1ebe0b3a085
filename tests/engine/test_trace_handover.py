"""DataLoader workers hand their last trace events to the main process (the loader observer: recording.loader_share)."""

from __future__ import annotations

import multiprocessing
import os
import pickle
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from streamscope import events as ev
from streamscope import recording
from streamscope.api.tracing import enable_tracer, flush_tracer
from streamscope.engine.combined import CombinedStreamingDataset
from streamscope.engine.dataloader import StreamingDataLoader
from streamscope.engine.dataset import StreamingDataset
from streamscope.engine.parallel import ParallelStreamingDataset
from streamscope.events.bus import Bulk
from streamscope.recording.handover import spool_path
from tests.engine._data import image_sample, write_dataset
from tests.support.litracer_parser import check_log, unmatched
from tests.support.tracing import clean_tracer  # noqa: F401

pytestmark = pytest.mark.usefixtures("clean_tracer")


class _CountingSink:
    """Notes the pid of every process that creates it (O_APPEND: one whole line per process)."""

    path = ""

    def __init__(self) -> None:
        with open(self.path, "a") as f:
            f.write(f"{os.getpid()}\n")

    def export(self, batch: Any) -> None:
        pass

    def force_flush(self) -> None:
        pass

    def shutdown(self) -> None:
        pass


def _sink_pids(path: str) -> set[int]:
    return {int(x) for x in Path(path).read_text().split()} if os.path.exists(path) else set()


def _traced_epochs(
    tmp_path: Any, kind: str, epochs: int = 1, **loader_kw: Any
) -> tuple[list[dict[str, Any]], set[int]]:
    """Run ``epochs`` traced epochs of 40 samples in batches of 4 with two workers; the log's events and the
    pids that created a sink."""
    a = write_dataset(str(tmp_path / "a"), 40, image_sample, chunk_size=8)
    if kind == "single":
        ds: Any = StreamingDataset(a)
    else:
        b = write_dataset(str(tmp_path / "b"), 40, image_sample, chunk_size=8)
        cls = CombinedStreamingDataset if kind == "combined" else ParallelStreamingDataset
        ds = cls([StreamingDataset(a), StreamingDataset(b)])
    _CountingSink.path = str(tmp_path / "sinks.txt")
    log = tmp_path / "t.log"
    os.environ["STREAMSCOPE_METRICS_INTERVAL"] = "60"  # no flusher tick in a slow worker (clean_tracer restores)
    enable_tracer("chunk", log_file=str(log), flush_interval=60)
    recording.add_sink(_CountingSink)
    loader = StreamingDataLoader(ds, batch_size=4, num_workers=2, **loader_kw)
    for _ in range(epochs):
        assert sum(1 for _ in loader) == len(loader)
    if loader.persistent_workers:
        loader._iterator._shutdown_workers()  # they exit: the wait below need not run to its end
    flush_tracer(wait_workers=30)
    return check_log(log.read_text()), _sink_pids(_CountingSink.path)


def _in_ts_order_per_thread(evs: list[dict[str, Any]]) -> bool:
    last: dict[tuple[int, int], float] = {}
    for e in evs:
        key = (e["pid"], e["tid"])
        if e["ts"] < last.get(key, 0.0):
            return False
        last[key] = e["ts"]
    return True


@pytest.mark.parametrize("kind", ["single", "combined", "parallel"])
def test_non_persistent_workers_hand_their_events_to_the_main_process(tmp_path, kind):
    evs, sink_pids = _traced_epochs(tmp_path, kind)
    assert sink_pids == {os.getpid()}  # no worker opened the log or built a sink
    reads = [e for e in evs if e["cat"] == "read" and e["pid"] != os.getpid()]
    by_pid: dict[int, set[str]] = {}
    for e in reads:
        by_pid.setdefault(e["pid"], set()).add(e["args"]["worker_rank"])
    assert len(by_pid) == 2 and sorted(r for ranks in by_pid.values() for r in ranks) == ["0", "1"]
    if kind == "single":  # the StreamingDataset path records one decode_batch per batch in its worker
        assert sorted(int(e["args"]["batch"]) for e in reads if e["name"] == "decode_batch") == list(range(10))
    assert not unmatched(evs) and _in_ts_order_per_thread(evs)


def test_a_grouping_workers_parcel_rides_with_its_last_group(tmp_path, monkeypatch):
    """With batches sent in groups (the default), no parcel is a queue message of its own."""
    from streamscope.engine import batching

    riding: list[int] = []
    add = batching.Reorder.add

    def counting_add(self: Any, item: Any) -> Any:
        parcel = add(self, item)
        if parcel is not None:
            riding.append(parcel.pid)
        return parcel

    monkeypatch.setattr(batching.Reorder, "add", counting_add)
    evs, _ = _traced_epochs(tmp_path, "single")
    workers = {e["pid"] for e in evs if e["name"] == "decode_batch"}
    assert len(workers) == 2 and sorted(riding) == sorted(workers)
    assert sorted(int(e["args"]["batch"]) for e in evs if e["name"] == "decode_batch") == list(range(10))


def test_persistent_workers_write_their_own_events(tmp_path):
    evs, sink_pids = _traced_epochs(tmp_path, "single", epochs=2, persistent_workers=True)
    assert len(sink_pids - {os.getpid()}) == 2  # each worker writes its own
    decodes = [e for e in evs if e["name"] == "decode_batch"]
    assert len(decodes) == 20 and len({e["pid"] for e in decodes}) == 2
    assert _in_ts_order_per_thread(evs)


def test_a_share_over_the_handover_bound_is_written_by_its_worker(tmp_path, monkeypatch):
    monkeypatch.setenv("STREAMSCOPE_TRACE_HANDOVER_MAX_EVENTS", "3")
    evs, sink_pids = _traced_epochs(tmp_path, "single")
    assert len(sink_pids - {os.getpid()}) == 2
    assert len([e for e in evs if e["name"] == "decode_batch"]) == 10


def test_parcels_do_not_split_the_loops_waits(tmp_path):
    """A parcel arriving while the loop waits for a batch is not a boundary: one stall per batch waited for."""
    evs, _ = _traced_epochs(tmp_path, "single")
    stalls = [int(e["args"]["batch"]) for e in evs if e["name"] == "stall"]
    assert len(stalls) == len(set(stalls)) and set(stalls) <= set(range(10))
    assert len([e for e in evs if e["name"] == "batch"]) == 10


def test_an_abandoned_share_is_written_by_its_worker(tmp_path):
    d = write_dataset(str(tmp_path / "a"), 400, image_sample, chunk_size=8)
    _CountingSink.path = str(tmp_path / "sinks.txt")
    log = tmp_path / "t.log"
    enable_tracer("chunk", log_file=str(log))
    recording.add_sink(_CountingSink)
    for k, _ in enumerate(StreamingDataLoader(StreamingDataset(d), batch_size=4, num_workers=2)):
        if k == 3:
            break
    flush_tracer(wait_workers=30)
    evs = check_log(log.read_text())
    workers = {e["pid"] for e in evs if e["name"] == "decode_batch"}
    assert len(workers) == 2 and workers <= _sink_pids(_CountingSink.path)
    assert not unmatched(evs)


def test_hand_over_takes_aggregates_and_adopt_writes_with_the_senders_fields(tmp_path):
    log = tmp_path / "t.log"
    enable_tracer("chunk", log_file=str(log))
    with ev.span("download", "download", chunk=3) as f:
        f["bytes"] = 10
    s = ev.series("decode_batch", "read", ("batch", "items"))
    for j in range(3):
        s.begin()
        s.end(j, 4)
    s.finish()
    parcel = recording.hand_over()
    assert not ev.take() and parcel.pid == os.getpid()
    assert [(e[0], e[1]) for e in parcel.events] == [("B", "download"), ("E", "download"), ("X+", "decode_batch")]
    assert recording.metrics_snapshot().span("download").bytes == 10  # counted where it was recorded
    flush_tracer()
    assert log.read_text() == ""  # handed over: not written here
    got = pickle.loads(pickle.dumps(parcel))  # what the DataLoader's queue does
    sender = dict(got.env, worker_rank=7, worker_world_size=8)
    recording.adopt(recording.Parcel(got.pid, got.events, sender))
    flush_tracer()
    evs = check_log(log.read_text())
    assert [e["name"] for e in evs] == ["download"] * 2 + ["decode_batch"] * 3
    assert {e["args"]["worker_rank"] for e in evs} == {"7"} and not unmatched(evs)
    assert recording.metrics_snapshot().span("download").count == 1  # adopting does not count them again


def _hand_over_unanswered_and_exit() -> None:
    """A worker whose parcel nobody has taken (nor abandoned) yet when it exits."""
    with ev.span("download", "download", chunk=5):
        pass
    recording.hand_over(0, lambda: None)


def test_a_worker_exiting_before_its_parcel_is_taken_leaves_it_and_does_not_wait(tmp_path, monkeypatch):
    """It leaves the parcel in the run directory and exits at once (a wait would last trace_handover_wait); the
    receiver claims it once: here as a loop that never took the parcel does, writing its events."""
    monkeypatch.setenv("STREAMSCOPE_TRACE_HANDOVER_WAIT", "600")
    log = tmp_path / "t.log"
    enable_tracer("chunk", log_file=str(log))
    ctx = multiprocessing.get_context("fork")
    p = ctx.Process(target=_hand_over_unanswered_and_exit)
    p.start()
    p.join(60)
    assert p.exitcode == 0  # exited, well within the 600 s it would have waited
    assert os.path.exists(spool_path(recording.RECORDER.metrics_dir, p.pid))
    parcel = recording.claim_spool(p.pid)
    assert parcel is not None and parcel.pid == p.pid and [e[0] for e in parcel.events] == ["B", "E"]
    assert recording.claim_spool(p.pid) is None and not os.path.exists(
        spool_path(recording.RECORDER.metrics_dir, p.pid)
    )
    recording.adopt(parcel)
    flush_tracer()
    evs = check_log(log.read_text())
    assert [(e["name"], e["pid"]) for e in evs] == [("download", p.pid)] * 2  # the worker wrote none itself


def test_a_damaged_parcel_file_is_reported_and_removed(tmp_path, capsys):
    enable_tracer("chunk", log_file=str(tmp_path / "t.log"))
    path = spool_path(recording.RECORDER.metrics_dir, 4242)
    with open(path, "wb") as f:
        f.write(b"not a pickle")
    assert recording.claim_spool(4242) is None and not os.path.exists(path)
    assert "trace parcel of pid 4242 unreadable" in capsys.readouterr().err


def test_a_complete_epoch_leaves_no_parcel_behind(tmp_path):
    evs, _ = _traced_epochs(tmp_path, "single", epochs=2)
    assert not [n for n in os.listdir(recording.RECORDER.metrics_dir) if n.startswith("parcel-")]
    assert sorted(int(e["args"]["batch"]) for e in evs if e["name"] == "decode_batch") == sorted(list(range(10)) * 2)


def test_parcel_pickles_with_bulk_entries():
    b = Bulk(2, 50, {"batch": np.array([4, 5])}, [10, 30], [20, 40], {"epoch": 1})
    p = pickle.loads(
        pickle.dumps(recording.Parcel(12, [("X+", "decode_batch", "read", 10, 12, 99, b)], {"worker_rank": 1}))
    )
    (e,) = p.events
    assert (p.pid, p.env, e[:6]) == (12, {"worker_rank": 1}, ("X+", "decode_batch", "read", 10, 12, 99))
    assert e[6].cols["batch"].tolist() == [4, 5] and (e[6].starts, e[6].ends, e[6].fields) == (
        [10, 30],
        [20, 40],
        {"epoch": 1},
    )


def test_over_the_bound_hand_over_writes_here_and_returns_an_empty_parcel(tmp_path, monkeypatch):
    monkeypatch.setenv("STREAMSCOPE_TRACE_HANDOVER_MAX_EVENTS", "1")
    log = tmp_path / "t.log"
    enable_tracer("chunk", log_file=str(log))
    with ev.span("download", "download", chunk=3):
        pass
    parcel = recording.hand_over()
    assert parcel.events == [] and [e["ph"] for e in check_log(log.read_text())] == ["B", "E"]


def test_workers_hand_over_their_metrics_and_write_no_snapshot(tmp_path, monkeypatch):
    from streamscope.api.tracing import enable_metrics, metrics
    from streamscope.engine.dataloader import join_worker_shutdowns

    monkeypatch.setenv("STREAMSCOPE_METRICS_INTERVAL", "60")  # no periodic snapshot while the epoch runs
    d = write_dataset(str(tmp_path / "a"), 40, image_sample, chunk_size=8)
    enable_metrics("chunk")  # metrics without a log: the parcels carry no events, only the snapshots
    assert sum(1 for _ in StreamingDataLoader(StreamingDataset(d), batch_size=4, num_workers=2)) == 10
    assert join_worker_shutdowns(30)
    assert os.listdir(recording.RECORDER.metrics_dir) == []  # the workers exited without writing a file
    snap = metrics()
    workers = [p for p in snap.processes if p != os.getpid()]
    assert len(workers) == 2 and all(not snap.processes[p]["alive"] for p in workers)
    assert snap.span("decode_batch", "read").count == 10 and snap.span("decode_batch", "read").items == 40
    flush_tracer()  # retires them
    again = metrics()
    assert again.span("decode_batch", "read").count == 10 and all(again.processes[p]["final"] for p in workers)


def test_a_newer_file_supersedes_the_handed_snapshot_and_a_reused_pid_is_a_new_process(tmp_path):
    """The recorder keeps one snapshot per process: the newest of its file and the one its parcel brought; a
    file of another process with the same pid (a later start) does not replace the older one's numbers."""
    from streamscope.recording.snapshots import write_snapshot

    enable_tracer("chunk", log_file=str(tmp_path / "t.log"))
    d = recording.RECORDER.metrics_dir
    dead = 2**22 + 12345  # no such process
    spans = {"read/read": {"count": 1}}
    recording.adopt(
        recording.Parcel(dead, [], {}, {"pid": dead, "events": 2, "token": 5, "spans": spans, "final": False})
    )
    write_snapshot(d, {"pid": dead, "events": 3, "token": 5, "spans": {"read/read": {"count": 2}}, "final": True})
    assert recording.metrics_snapshot().span("read").count == 2  # the file is newer: it stands for the process
    flush_tracer()
    assert recording.metrics_snapshot().span("read").count == 2 and not recording.RECORDER.parcel_snaps  # retired once
    other = dead + 1
    recording.adopt(
        recording.Parcel(other, [], {}, {"pid": other, "events": 9, "token": 5, "spans": spans, "final": False})
    )
    write_snapshot(d, {"pid": other, "events": 1, "token": 6, "spans": spans, "final": True})
    flush_tracer()  # both done: the first process and the later one with its pid
    assert recording.metrics_snapshot().span("read").count == 4
    assert os.listdir(d) == [] and not recording.RECORDER.parcel_snaps


@pytest.mark.parametrize("stop_at", [8, 9])
def test_parcels_lost_in_flight_are_written_by_their_workers(tmp_path, stop_at):
    """A loop that leaves at its last batches abandons the parcels still in the queue: each worker whose parcel
    was not received writes its events and metrics itself, so every event is in the log exactly once."""
    d = write_dataset(str(tmp_path / "a"), 40, image_sample, chunk_size=8)
    log = tmp_path / "t.log"
    enable_tracer("chunk", log_file=str(log))
    for k, _ in enumerate(StreamingDataLoader(StreamingDataset(d), batch_size=4, num_workers=2)):
        if k == stop_at:
            break
    flush_tracer(wait_workers=30)
    evs = check_log(log.read_text())
    decoded = sorted(int(e["args"]["batch"]) for e in evs if e["name"] == "decode_batch")
    assert decoded == sorted(set(decoded)) and set(range(stop_at + 1)) <= set(decoded) <= set(range(10))
    assert recording.metrics_snapshot().span("decode_batch", "read").count == len(decoded)
    assert not unmatched(evs)


@pytest.mark.slow
def test_spawned_workers_hand_over_too(tmp_path):
    """Under spawn the dataset (with its parcel flags) is pickled into each worker: every worker event reaches
    the log once, through the main process."""
    d = write_dataset(str(tmp_path / "a"), 40, image_sample, chunk_size=8)
    log = tmp_path / "t.log"
    enable_tracer("chunk", log_file=str(log))
    loader = StreamingDataLoader(StreamingDataset(d), batch_size=4, num_workers=2, multiprocessing_context="spawn")
    assert sum(1 for _ in loader) == 10
    flush_tracer(wait_workers=60)
    evs = check_log(log.read_text())
    decoded = [e for e in evs if e["name"] == "decode_batch"]
    assert sorted(int(e["args"]["batch"]) for e in decoded) == list(range(10))
    assert len({e["pid"] for e in decoded}) == 2 and os.getpid() not in {e["pid"] for e in decoded}
    assert recording.metrics_snapshot().span("decode_batch", "read").count == 10 and not unmatched(evs)


class _StartLog:
    """Notes the pid of every worker process that starts a flusher thread (O_APPEND: one line per start)."""

    path = ""
    main = 0


def _slow(sample: Any) -> Any:
    import time

    time.sleep(0.02)
    return sample


@pytest.mark.parametrize(("case", "starts"), [("short", 0), ("persistent", 1), ("long", 1)])
def test_one_epoch_workers_start_a_flusher_only_when_their_epoch_runs_past_a_tick(tmp_path, monkeypatch, case, starts):
    """A worker that lives one short epoch hands its events over without ever starting a flusher thread."""
    from streamscope.recording.recorder import Recorder

    start = Recorder._start_thread
    _StartLog.path, _StartLog.main = str(tmp_path / "starts.txt"), os.getpid()

    def logged(self: Any, *a: Any, **k: Any) -> None:
        if os.getpid() != _StartLog.main:
            with open(_StartLog.path, "a") as f:
                f.write(f"{os.getpid()}\n")
        start(self, *a, **k)

    monkeypatch.setattr(Recorder, "_start_thread", logged)
    monkeypatch.setenv("STREAMSCOPE_METRICS_INTERVAL", "0.05" if case == "long" else "60")
    log = tmp_path / "t.log"
    enable_tracer("chunk", log_file=str(log), flush_interval=60)
    ds = StreamingDataset(write_dataset(str(tmp_path / "a"), 40, image_sample, chunk_size=8))
    if case == "long":
        ds.transform = _slow  # 0.2 s a worker: past four ticks
    loader = StreamingDataLoader(ds, batch_size=4, num_workers=2, persistent_workers=case == "persistent")
    assert sum(1 for _ in loader) == 10
    if loader.persistent_workers:
        loader._iterator._shutdown_workers()
    flush_tracer(wait_workers=30)
    evs = check_log(log.read_text())
    decodes = [e for e in evs if e["name"] == "decode_batch"]
    assert sorted(int(e["args"]["batch"]) for e in decodes) == list(range(10))  # each once, none lost
    workers = {e["pid"] for e in decodes}
    started = [int(x) for x in Path(_StartLog.path).read_text().split()] if os.path.exists(_StartLog.path) else []
    assert len(workers) == 2 and sorted(started) == sorted(workers) * starts


def _item(i: int) -> dict[str, Any]:
    return {"index": i, "payload": np.full(64, i % 251, dtype=np.uint8)}


def test_workers_streaming_from_object_storage_hand_their_downloads_over(tmp_path, s3_server):
    """A worker's download or prefetch span starts its deferred flusher; the flusher waits for its tick, so the
    worker still hands everything over and opens no log of its own."""
    from streamscope.processing.functions import optimize

    url = s3_server.url("ds")
    optimize(fn=_item, inputs=list(range(40)), output_dir=url, chunk_size=8, num_workers=1,
             storage_options=s3_server.storage_options())  # fmt: skip
    _CountingSink.path = str(tmp_path / "sinks.txt")
    log = tmp_path / "t.log"
    os.environ["STREAMSCOPE_METRICS_INTERVAL"] = "60"  # no tick while the epoch runs (clean_tracer restores)
    enable_tracer("chunk", log_file=str(log), flush_interval=60)
    recording.add_sink(_CountingSink)
    ds = StreamingDataset(url, storage_options=s3_server.storage_options(), cache_dir=str(tmp_path / "cache"))
    assert sum(1 for _ in StreamingDataLoader(ds, batch_size=4, num_workers=2)) == 10
    flush_tracer(wait_workers=30)
    evs = check_log(log.read_text())
    workers = {e["pid"] for e in evs if e["pid"] != os.getpid() and e["ph"] == "B"}  # download, prefetch spans
    assert len(workers) == 2 and any(e["name"] == "download" and e["pid"] in workers for e in evs)
    assert _sink_pids(_CountingSink.path) == {os.getpid()}  # and neither wrote anything itself
    assert not unmatched(evs)
