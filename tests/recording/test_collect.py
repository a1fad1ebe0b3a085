"""The run's processes as its owner sees them: a dead worker is retired once, never before its parcel came."""

from __future__ import annotations

import os
import subprocess

from streamscope.events.registry import M
from streamscope.recording.collect import RunCollector
from streamscope.recording.snapshots import write_snapshot

KEY = f"{M.LOADER_WAIT_STAGE.name}|stage=decode"


def _dead_pid() -> int:
    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid


def _snap(pid: int, seq: int, value: float, token: int = 77) -> dict:
    return {"pid": pid, "seq": seq, "token": token, "events": seq, "values": {KEY: value}, "final": False}


def _value(c: RunCollector, d: str) -> float:
    return c.merged(os.getpid(), {"values": {}}, d).values.get(KEY, 0.0)


def test_a_dead_worker_whose_parcel_may_come_is_retired_once_with_the_parcels_numbers(tmp_path):
    d, pid, exported = str(tmp_path), _dead_pid(), []
    c = RunCollector()
    write_snapshot(d, _snap(pid, 5, 1.0))  # its last periodic snapshot; its parcel (seq 6) is still on its way
    c.repair(d, os.getpid(), 0, exported.extend, parcel_may_come=lambda p: p == pid)
    assert os.path.exists(os.path.join(d, f"{pid}.json")) and _value(c, d) == 1.0  # counted, not retired
    c.note(pid, _snap(pid, 6, 1.5))
    c.repair(d, os.getpid(), 0, exported.extend, parcel_may_come=lambda p: False)
    assert not os.path.exists(os.path.join(d, f"{pid}.json")) and c.parcel_snaps == {}
    assert _value(c, d) == 1.5  # the parcel's numbers, once
    c.note(pid, _snap(pid, 7, 2.0))  # a snapshot of a process already retired: not counted again
    write_snapshot(d, _snap(pid, 8, 3.0))
    c.repair(d, os.getpid(), 0, exported.extend)
    assert _value(c, d) == 1.5 and not os.path.exists(os.path.join(d, f"{pid}.json"))
    write_snapshot(d, _snap(pid, 1, 0.25, token=78))  # a new process with the pid: its own numbers count
    c.repair(d, os.getpid(), 0, exported.extend)
    assert _value(c, d) == 1.75


def test_without_a_parcel_to_wait_for_a_dead_worker_is_retired_on_its_file(tmp_path):
    d, pid = str(tmp_path), _dead_pid()
    c = RunCollector()
    write_snapshot(d, _snap(pid, 5, 1.0))
    c.repair(d, os.getpid(), 0, lambda evs: None, parcel_may_come=lambda p: False)
    assert not os.path.exists(os.path.join(d, f"{pid}.json")) and _value(c, d) == 1.0
