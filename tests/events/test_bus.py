from __future__ import annotations

import os
import subprocess
import sys
import time
import weakref

import pytest

from streamscope import events as ev
from streamscope import recording
from streamscope._core.errors import TraceConfigError
from streamscope.events import context, vocab
from streamscope.events.bus import OPEN, STATE, close_open_spans
from tests.support.tracing import clean_tracer, forked_result  # noqa: F401

pytestmark = pytest.mark.usefixtures("clean_tracer")


def test_disabled_category_records_nothing():
    assert not ev.enabled("download")
    with ev.span("download", "download", chunk=1) as f:
        f["bytes"] = 3
    ev.instant("crash", "crash", error="x")
    ev.counter("q", "cache", 1)
    ev.emit("X", "a", "read", dur=1)
    assert ev.drain() == []


def test_span_records_begin_and_end_with_updated_fields():
    ev.ACTIVE.add("download")
    with ev.span("download", "download", chunk=1) as f:
        f["bytes"] = 3
    b, e = ev.drain()
    assert (b[0], b[1], b[2], b[6]) == ("B", "download", "download", {"chunk": 1})
    assert (e[0], e[6]) == ("E", {"chunk": 1, "bytes": 3})
    assert b[4] == e[4] == os.getpid() and b[5] == e[5] and e[3] >= b[3]


def test_span_end_on_exception_and_generator_close():
    ev.COMPACT.clear()  # B/E pairs everywhere (trace_compact_categories="")
    ev.ACTIVE.update({"read", "download"})
    with pytest.raises(KeyError), ev.span("read", "read", chunk=0):
        raise KeyError("k")

    def gen():
        for i in range(10):
            with ev.span("download", "download", index=i):
                yield i

    for i in gen():
        if i == 2:
            break
    events = ev.drain()
    assert events[1][:3] == ("E", "read", "read") and events[1][6]["exception"] == "KeyError"
    samples = [e for e in events if e[2] == "download"]
    assert [e[0] for e in samples] == ["B", "E"] * 3
    assert "exception" not in samples[-1][6]  # GeneratorExit is a normal close
    assert not OPEN


def test_open_spans_get_an_aborted_end():
    ev.ACTIVE.add("download")
    sp = ev.span("download", "download", chunk=5)
    sp.__enter__()
    assert close_open_spans() == 1
    sp.__exit__(None, None, None)  # a late exit writes nothing more
    events = ev.drain()
    assert [e[0] for e in events] == ["B", "E"] and events[1][6] == {"chunk": 5, "aborted": 1}


@pytest.mark.interop
def test_levels_keep_litdata_sets():
    ld = pytest.importorskip("litdata.debugger")
    for level, cats in ld.LEVEL_CATEGORIES.items():
        assert vocab.LEVELS[level] & set(ld.ALL_CATEGORIES) == cats, level
    assert vocab.LEVELS["debug"] == set(vocab.CATEGORIES)
    assert {"prefetch", "cache"} <= vocab.LEVELS["chunk"] and "stall" in vocab.LEVELS["batch"]


def test_unknown_level_or_category_lists_valid_ones():
    with pytest.raises(ValueError, match="valid levels: off, batch, chunk, sample, debug"):
        vocab.categories_for_level("verbose")
    with pytest.raises(TraceConfigError, match="'bogus'.*valid categories: epoch"):
        vocab.parse_categories("download, bogus")
    assert vocab.resolve("chunk", "read,Download") == {"read", "download"}
    assert vocab.resolve("batch", None) == vocab.LEVELS["batch"]


def test_full_buffer_drops_and_counts(monkeypatch):
    monkeypatch.setenv("STREAMSCOPE_TRACE_BUFFER_EVENTS", "10")
    monkeypatch.setenv("STREAMSCOPE_TRACE_FLUSH_INTERVAL", "60")
    monkeypatch.setenv("STREAMSCOPE_METRICS_INTERVAL", "60")
    ev.configure(metrics={"read"})
    for i in range(25):
        ev.instant("read", "read", i=i)
    assert len(ev.BUF) == 10 and ev.dropped() == 15
    snap = recording.metrics_snapshot()
    assert snap.dropped == 15 and snap.instants["read/read"] == 10


def test_bad_environment_does_not_break_import(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("STREAMSCOPE_", "LITDATA_"))}
    env["STREAMSCOPE_TRACE_LEVEL"] = "loud"
    r = subprocess.run(
        [
            sys.executable,
            "-c",
            "from streamscope import events as ev; ev.configure_from_env(); print(sorted(ev.ACTIVE))",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0 and r.stdout.strip() == "[]"
    assert "unknown trace level 'loud'" in r.stderr


def _child_buffer():
    return (
        len(ev.BUF),
        STATE.pid == os.getpid(),
        recording.RECORDER.thread is not None and recording.RECORDER.thread.is_alive(),
    )


def test_fork_child_starts_with_a_fresh_buffer(monkeypatch):
    monkeypatch.setenv("STREAMSCOPE_TRACE_FLUSH_INTERVAL", "60")
    monkeypatch.setenv("STREAMSCOPE_METRICS_INTERVAL", "60")
    ev.configure(metrics={"read"})
    for _ in range(5):
        ev.instant("read", "read")
    assert forked_result(_child_buffer) == (0, True, True)
    assert len(ev.BUF) == 5


class _ListSink:
    batches: list = []

    def export(self, batch):
        _ListSink.batches.append(batch)

    def force_flush(self):
        pass

    def shutdown(self):
        pass


class _BadSink(_ListSink):
    def export(self, batch):
        raise RuntimeError("sink is broken")


class _MixedSink(_ListSink):
    mixed_batches = True
    batches: list = []

    def export(self, batch):
        _MixedSink.batches.append(batch)


def test_adopted_events_reach_a_mixed_sink_in_one_batch_and_any_other_per_process(monkeypatch):
    monkeypatch.setenv("STREAMSCOPE_TRACE_FLUSH_INTERVAL", "60")
    monkeypatch.setenv("STREAMSCOPE_TRACE_SINKS", "tests.events.test_bus:_ListSink")
    _ListSink.batches, _MixedSink.batches = [], []
    recording.add_sink(_MixedSink)
    ev.configure(trace={"download"})
    with ev.span("download", "download", chunk=1):
        pass
    other = 2**22 + 17  # a pid of another process of the run
    own_env = context.env_fields()
    theirs_env = {**own_env, "worker_world_size": 2, "worker_rank": 1}
    t = ev.now()
    theirs = [
        ("B", "download", "download", t, other, 5, {"chunk": 2}),
        ("E", "download", "download", t + 9, other, 5, {}),
    ]
    recording.adopt(recording.Parcel(other, theirs, theirs_env, None, 1))
    ev.flush()
    (mixed,) = _MixedSink.batches
    assert [e[4] for e in mixed.events] == [os.getpid()] * 2 + [other] * 2
    assert mixed.env_of(other) == theirs_env and mixed.env_of(os.getpid()) == own_env
    own, handed = _ListSink.batches  # a sink without mixed_batches: one batch per process, each with its fields
    assert {e[4] for e in own.events} == {os.getpid()} and own.envs == {}
    assert handed.events == theirs and handed.env == theirs_env


def test_sink_plugins_and_errors_never_reach_the_data_path(capsys, monkeypatch):
    monkeypatch.setenv("STREAMSCOPE_TRACE_FLUSH_INTERVAL", "60")
    monkeypatch.setenv("STREAMSCOPE_TRACE_SINKS", "tests.events.test_bus:_ListSink, nowhere.module:Nope")
    _ListSink.batches = []
    recording.add_sink(_BadSink)
    ev.configure(trace={"download"})
    for _ in range(3):
        with ev.span("download", "download", chunk=1):
            pass
    ev.flush()
    ev.flush()
    assert sum(len(b.events) for b in _ListSink.batches) == 6
    assert _ListSink.batches[0].env["worker_rank"] == 0
    err = capsys.readouterr().err
    assert err.count("sink is broken") == 1 and "nowhere.module:Nope could not be created" in err
    assert recording.metrics_snapshot().sink_errors >= 2


def test_compact_spans_are_one_complete_event():
    ev.ACTIVE.update({"sample", "read"})
    ev.COMPACT.clear()
    ev.COMPACT.add("sample")
    try:
        with ev.span("sample", "sample", chunk=1, index=7) as f:
            f["bytes"] = 9
        with pytest.raises(ValueError), ev.span("sample", "sample", index=8):
            raise ValueError
        with ev.span("read", "read", chunk=1):
            pass
    finally:
        ev.COMPACT.discard("sample")
    x, bad, b, e = ev.drain()
    assert x[0] == "X" and list(x[6]) == ["chunk", "index", "bytes", "dur"] and x[6]["dur"] >= 0
    assert bad[0] == "X" and bad[6]["exception"] == "ValueError"
    assert (b[0], e[0]) == ("B", "E") and not OPEN


class _Marker:
    pass


def _child_after_fork(ref):
    from streamscope.events.bus import LEFT_BEHIND

    rec = recording.RECORDER
    return (
        ref() is not None,
        rec.parcel_snaps == {},
        rec.pid == os.getpid(),
        any(type(d) is dict and -7 in d.get("parcel_snaps", {}) for d in LEFT_BEHIND),  # the parent's state
    )


def test_a_fork_child_leaves_the_parents_recorder_state_unreleased(monkeypatch):
    """Releasing the parent's state object by object would write to pages shared with the parent."""
    monkeypatch.setenv("STREAMSCOPE_METRICS_INTERVAL", "60")
    ev.configure(metrics={"read"})
    marker = _Marker()
    recording.RECORDER.parcel_snaps[-7] = {"marker": marker}  # held by nothing but the recorder's state
    ref = weakref.ref(marker)
    del marker
    try:
        assert forked_result(_child_after_fork, ref) == (True, True, True, True)
    finally:
        recording.RECORDER.parcel_snaps.pop(-7)


def test_a_child_of_a_process_that_never_traced_can_trace(tmp_path):
    """The fork hook of a recorder that never started only takes the child's pid; the child traces as usual."""
    log = tmp_path / "child.log"
    code = (
        "import os, shutil, sys\n"
        "from streamscope import events as ev, recording\n"
        "from streamscope.api.tracing import enable_tracer, flush_tracer\n"
        "assert not recording.RECORDER.started\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    enable_tracer('chunk', log_file=sys.argv[1])\n"
        "    ev.instant('read', 'read', chunk=3)\n"
        "    flush_tracer()\n"
        "    ok = recording.RECORDER.pid == os.getpid()\n"
        "    shutil.rmtree(recording.RECORDER.metrics_dir)  # the child's run directory (os._exit runs no exit handler)\n"
        "    os._exit(0 if ok else 3)\n"
        "_, status = os.waitpid(pid, 0)\n"
        "print(pid, os.waitstatus_to_exitcode(status))\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("STREAMSCOPE_", "LITDATA_"))}
    r = subprocess.run([sys.executable, "-c", code, str(log)], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    pid, code_ = map(int, r.stdout.split())
    assert code_ == 0
    (line,) = [x for x in log.read_text().splitlines() if "name: read" in x]
    assert f"pid: {pid};" in line and "chunk: 3;" in line


def _flusher_alive() -> bool:
    t = recording.RECORDER.thread
    return t is not None and t.is_alive()


def _deferred_child(until: str) -> tuple[bool, bool]:
    """(flusher running right after the fork, running after ``until`` happened in the child)."""
    first = _flusher_alive()
    if until == "poll early":
        ev.poll()
    elif until == "poll due":
        time.sleep(0.6)
        ev.poll()
    elif until == "event due":
        time.sleep(0.6)
        ev.instant("read", "read")
    elif until == "span":
        with ev.span("download", "download", chunk=1):
            started = _flusher_alive()
            time.sleep(0.05)
            held = len(ev.BUF)  # started before its tick: it waits for the tick (nothing written meanwhile)
            return first, started and held == 1
    elif until == "exit due":
        recording.shutdown()  # what process exit does
        time.sleep(0.6)
        ev.instant("read", "read")  # e.g. another exit handler's event, after the tick
        return first, recording.RECORDER.thread is not None
    return first, _flusher_alive()


@pytest.mark.parametrize(
    ("until", "started", "tick"),
    [
        # "before the tick" is made a fact by a tick no busy machine reaches; "after" by sleeping past a short one
        ("poll early", False, "60"),
        ("poll due", True, "0.5"),
        ("event due", True, "0.5"),
        ("span", True, "60"),
        ("exit due", False, "0.5"),
    ],
)
def test_a_child_forked_in_the_deferral_block_starts_its_flusher_when_needed(monkeypatch, until, started, tick):
    """No thread at the fork; one tick later a poll or an event starts it, a B/E span at once; exit never."""
    monkeypatch.setenv("STREAMSCOPE_METRICS_INTERVAL", tick)  # the tick
    ev.configure(trace={"download", "read"}, metrics={"read"})
    with recording.deferred_flusher_in_children():
        got = forked_result(_deferred_child, until)
    assert got == (False, started)
    assert recording.RECORDER.defer_in_children is False
    assert forked_result(_flusher_alive) is True  # forked outside the block: started at once


def _drained_soon_after_a_late_start() -> tuple[bool, int]:
    ev.instant("read", "read")
    time.sleep(3.05)  # past the tick
    ev.poll()
    deadline = time.monotonic() + 2.5  # well before one more tick (3 s): "at once", with room for a busy machine
    while ev.BUF and time.monotonic() < deadline:
        time.sleep(0.005)
    return _flusher_alive(), len(ev.BUF)


def test_a_deferred_flusher_flushes_as_it_starts(monkeypatch):
    """It starts a tick late, so it writes what waited at once rather than one more tick later."""
    monkeypatch.setenv("STREAMSCOPE_METRICS_INTERVAL", "3")
    ev.configure(metrics={"read"})
    with recording.deferred_flusher_in_children():
        assert forked_result(_drained_soon_after_a_late_start) == (True, 0)
