"""A process that handed its events over exits with a span still open: the span's end goes where its begin went.

A DataLoader worker hands its events over as its share ends (:mod:`streamscope.recording.handover`) while its
prefetch threads may still be fetching; a span such a thread began before the hand-over has its ``B`` in the
parcel, which the receiver writes later. Whatever ends that span (the thread, or the ``aborted`` E of the exit
hook) must not be written by the worker itself ahead of that ``B``: it goes to the receiver with the parcel it
leaves at exit, whether or not the receiver took the first one.
"""

from __future__ import annotations

import multiprocessing
import os
import pickle
from pathlib import Path
from typing import Any

import pytest

from streamscope import events as ev
from streamscope import recording
from streamscope.api.tracing import enable_tracer, flush_tracer
from streamscope.recording.handover import spool_path
from tests.support.tracing import clean_tracer  # noqa: F401
from trace_tools.validate import validate

pytestmark = pytest.mark.usefixtures("clean_tracer")

_HELD: list[Any] = []


def _hand_over_with_a_span_open_and_exit(conn: Any) -> None:
    """A worker whose prefetch span is still open when it hands over and when it exits; nobody has answered
    whether its parcel arrived when it exits (so it leaves one in the run directory)."""
    with ev.span("prefetch", "prefetch", chunk=1):
        pass
    sp = ev.span("prefetch", "prefetch", chunk=2)
    sp.__enter__()  # a fetch still under way: its thread never ends it before the exit
    _HELD.append(sp)
    with ev.span("prefetch", "prefetch", chunk=3):  # (on another thread in a worker: after the hand-over)
        pass
    conn.send(recording.hand_over(0, lambda: None))  # the parcel, as it rides to the loop with the last group
    with ev.span("prefetch", "prefetch", chunk=4):  # a fetch begun after the hand-over
        pass


def _run_worker() -> tuple[int, Any]:
    ctx = multiprocessing.get_context("fork")
    recv, send = ctx.Pipe(duplex=False)
    p = ctx.Process(target=_hand_over_with_a_span_open_and_exit, args=(send,))
    p.start()
    parcel = recv.recv()
    p.join(60)
    assert p.exitcode == 0
    assert os.path.exists(spool_path(recording.RECORDER.metrics_dir, p.pid))
    return p.pid, parcel


def _check(log: str) -> None:
    """A well-formed log (each B with its E, time never backwards in a thread) with every prefetch span ended
    once: chunk 2, open at the exit, by the exit's ``aborted`` E."""
    assert not validate(log, frozenset()).failures()
    ends = [line for line in Path(log).read_text().splitlines() if "ph: E" in line and "name: prefetch" in line]
    assert sorted(int(e.split("chunk: ")[1].split(";")[0]) for e in ends) == [1, 2, 3, 4]
    assert [e.split("chunk: ")[1].split(";")[0] for e in ends if "aborted: 1" in e] == ["2"]


def test_a_parcel_the_loop_never_took_is_written_whole_with_what_came_after(tmp_path):
    log = tmp_path / "t.log"
    enable_tracer("chunk", log_file=str(log))
    pid, _ = _run_worker()
    flush_tracer()
    assert log.read_text() == ""  # the worker wrote nothing itself
    assert recording.claim_spool(pid, adopt=True) is not None  # what the loader does for a parcel it never took
    flush_tracer()
    _check(str(log))
    assert recording.metrics_snapshot().span("prefetch").count == 4


def test_a_parcel_the_loop_took_is_followed_by_what_came_after(tmp_path):
    log = tmp_path / "t.log"
    enable_tracer("chunk", log_file=str(log))
    pid, parcel = _run_worker()
    recording.adopt(parcel)  # the loop took the parcel after the worker had left its copy
    flush_tracer()
    recording.drop_spool(pid)  # what the loader does with the copy of a parcel it took
    assert not os.path.exists(spool_path(recording.RECORDER.metrics_dir, pid))
    flush_tracer()
    _check(str(log))
    assert recording.metrics_snapshot().span("prefetch").count == 4


def _taken_hand_over_with_a_span_open_and_exit() -> None:
    """As above, but the receiver answers that it took the parcel (as the loop's acks do) before the exit."""
    with ev.span("prefetch", "prefetch", chunk=1):
        pass
    sp = ev.span("prefetch", "prefetch", chunk=2)
    sp.__enter__()
    _HELD.append(sp)
    with ev.span("prefetch", "prefetch", chunk=3):
        pass
    parcel = recording.hand_over(0, lambda: True)
    with open(os.environ["PARCEL_OUT"], "wb") as f:
        pickle.dump(parcel, f)
    with ev.span("prefetch", "prefetch", chunk=4):
        pass


def test_a_parcel_taken_before_the_exit_is_followed_by_what_came_after(tmp_path, monkeypatch):
    log = tmp_path / "t.log"
    monkeypatch.setenv("PARCEL_OUT", str(tmp_path / "parcel.pkl"))
    enable_tracer("chunk", log_file=str(log))
    p = multiprocessing.get_context("fork").Process(target=_taken_hand_over_with_a_span_open_and_exit)
    p.start()
    p.join(60)
    assert p.exitcode == 0
    with open(tmp_path / "parcel.pkl", "rb") as f:
        recording.adopt(pickle.load(f))  # (taken by the loop before the worker exited)
    flush_tracer()
    assert os.path.exists(spool_path(recording.RECORDER.metrics_dir, p.pid))  # what came after, for the receiver
    recording.drop_spool(p.pid)  # what the loader does once the workers of a complete epoch are gone
    flush_tracer()
    _check(str(log))
    assert recording.metrics_snapshot().span("prefetch").count == 4
