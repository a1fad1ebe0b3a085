"""The span spool: a worker that writes its own events hands its spans' events to the main process through a file."""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import pytest

from streamscope.events import instruments
from streamscope.events.exporters import EventBatch, ExportResult
from streamscope.events.registry import M
from streamscope.telemetry import spool
from streamscope.telemetry.spool import SpoolReader, SpoolSink, spool_path

ENV = {"dist_world_size": 1, "dist_global_rank": 0, "dist_num_nodes": 1, "worker_world_size": 2, "worker_rank": 1}


def _events(n: int, pid: int) -> list:
    out = []
    for i in range(n):
        out.append(("B", "download", "download", 10 * i, pid, 1, {"chunk": i}))
        out.append(("E", "download", "download", 10 * i + 5, pid, 1, {"chunk": i}))
        out.append(("X", "sample", "sample", 10 * i + 6, pid, 1, {"dur": 1.0}))  # never a span: not spooled
    return out


def _child_spool(directory: str, n: int) -> int:
    """A real other process appends ``n`` chunks' events and exits; its pid."""
    code = (
        "import os, sys; sys.path[:0] = sys.argv[3:]\n"
        "from streamscope.telemetry.spool import SpoolSink\n"
        "from streamscope.events.exporters import EventBatch\n"
        "from tests.telemetry.test_spool import _events, ENV\n"
        "s = SpoolSink(sys.argv[1])\n"
        "s.export(EventBatch(_events(int(sys.argv[2]), os.getpid()), 7, ENV))\n"
        "s.shutdown(); print(os.getpid())\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, directory, str(n), *sys.path[:2]], capture_output=True, text=True, check=True
    )
    return int(out.stdout.strip())


def test_spooled_events_reach_the_reader_once_and_the_file_goes_with_its_process(tmp_path):
    d = str(tmp_path)
    pid = _child_spool(d, 3)
    reader = SpoolReader()
    (batch,) = reader.collect(d)
    assert batch.epoch_offset_ns == 7 and batch.env == ENV
    assert [(e[0], e[6]["chunk"]) for e in batch.events] == [("B", 0), ("E", 0), ("B", 1), ("E", 1), ("B", 2), ("E", 2)]
    assert not os.path.exists(spool_path(d, pid))  # its process is gone and it was read to the end
    assert reader.collect(d) == []


def test_a_record_being_written_waits_for_its_end(tmp_path):
    d = str(tmp_path)
    sink = SpoolSink(d)
    sink.export(EventBatch(_events(1, os.getpid()), 0, ENV))
    sink.shutdown()
    path = spool_path(d, os.getpid())
    with open(path, "rb") as f:
        data = f.read()
    os.remove(path)
    other = spool_path(d, os.getppid())  # as the spool of a process that is still writing it
    with open(other, "wb") as f:
        f.write(data[:-3])
    reader = SpoolReader()
    assert reader.collect(d) == [] and os.path.exists(other)
    with open(other, "ab") as f:
        f.write(data[-3:])
    (batch,) = reader.collect(d)
    assert [e[0] for e in batch.events] == ["B", "E"]
    assert reader.collect(d) == []  # read once


def test_a_full_disk_leaves_no_cut_record_and_counts_the_drop(tmp_path, monkeypatch):
    d = str(tmp_path)
    # the registry's counter is the process's, which another test's exporter may still add to from its own thread:
    # what this sink adds is what this thread adds
    mine: list[float] = []
    real_add_key = instruments.add_key

    def spy(k: str, value: float) -> None:
        if k == M.EXPORT_DROPPED.name and threading.get_ident() == me:
            mine.append(value)
        real_add_key(k, value)

    me = threading.get_ident()
    monkeypatch.setattr(instruments, "add_key", spy)
    before = instruments.counts().get(M.EXPORT_DROPPED.name, 0)
    sink = SpoolSink(d)
    assert sink.export(EventBatch(_events(1, os.getpid()), 0, ENV)) is ExportResult.SUCCESS
    size = os.path.getsize(spool_path(d, os.getpid()))
    real = os.write
    monkeypatch.setattr(spool.os, "write", lambda fd, b: real(fd, b[: len(b) // 2]))
    assert sink.export(EventBatch(_events(2, os.getpid()), 0, ENV)) is ExportResult.FAILURE
    assert os.path.getsize(spool_path(d, os.getpid())) == size
    assert sink.dropped == 4
    sink.shutdown()
    assert sum(mine) == 4
    assert instruments.counts().get(M.EXPORT_DROPPED.name, 0) - before >= 4  # and they reached the registry


def test_the_spool_is_bounded(tmp_path, monkeypatch):
    monkeypatch.setattr(spool, "MAX_BYTES", 600)
    sink = SpoolSink(str(tmp_path))
    for _ in range(10):
        sink.export(EventBatch(_events(2, os.getpid()), 0, ENV))
    sink.shutdown()
    assert os.path.getsize(spool_path(str(tmp_path), os.getpid())) <= 600 and sink.dropped > 0


@pytest.mark.parametrize("directory", [None])
def test_without_a_run_directory_nothing_is_written(directory):
    sink = SpoolSink(directory)
    assert sink.export(EventBatch(_events(1, os.getpid()), 0, ENV)) is ExportResult.SUCCESS
    assert sink.dropped == 2
