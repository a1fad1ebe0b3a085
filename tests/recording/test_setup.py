"""Configuring the event bus: explicit calls, never a side effect of importing it."""

from __future__ import annotations

import json
import os
import subprocess
import sys

_PROBE = r"""
import atexit, json, os, sys, tempfile, threading
reads = []

class Spy(dict):
    def __getitem__(self, k):
        reads.append(k)
        return super().__getitem__(k)

    def get(self, k, default=None):
        reads.append(k)
        return super().get(k, default)

    def __contains__(self, k):
        reads.append(k)
        return super().__contains__(k)

real = os.environ
tmp = set(os.listdir(tempfile.gettempdir()))
threads, exits = threading.active_count(), atexit._ncallbacks()
os.environ = Spy(real)
import streamscope.events as ev
from streamscope import recording
os.environ = real
out = {
    "reads": sorted({k for k in reads if k.startswith(("STREAMSCOPE", "LITDATA"))}),
    "threads": threading.active_count() - threads,
    "atexit": atexit._ncallbacks() - exits,
    "new_tmp": sorted(n for n in set(os.listdir(tempfile.gettempdir())) - tmp if n.startswith("streamscope")),
    "active": sorted(ev.ACTIVE),
    "started": recording.RECORDER.started,
    "metrics_dir_env": "STREAMSCOPE_METRICS_DIR" in real,
}
ev.configure_from_env()  # the explicit call reads them
out["after"] = sorted(ev.ACTIVE)
out["flusher"] = recording.RECORDER.thread is not None and recording.RECORDER.thread.is_alive()
out["metrics_dir"] = recording.RECORDER.metrics_dir
ev.configure()
import shutil
shutil.rmtree(out["metrics_dir"] or "/nonexistent", ignore_errors=True)
print(json.dumps(out))
"""


def test_importing_events_alone_configures_nothing(tmp_path):
    """No environment variable of ours read, no thread, no exit hook, no file: until configure_from_env()."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("STREAMSCOPE_", "LITDATA_"))}
    env.update(STREAMSCOPE_TRACE_LEVEL="off", STREAMSCOPE_METRICS_LEVEL="batch", STREAMSCOPE_METRICS_INTERVAL="60")
    env["TMPDIR"] = str(tmp_path)  # a temp folder of its own: tests running beside it make theirs in the shared one
    r = subprocess.run([sys.executable, "-c", _PROBE], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["reads"] == [] and out["threads"] == 0 and out["atexit"] == 0, out
    assert out["new_tmp"] == [] and out["active"] == [] and not out["started"] and not out["metrics_dir_env"], out
    assert out["after"] == ["batch", "crash", "epoch", "stall", "tune"] and out["flusher"], out
    assert out["metrics_dir"], out


def test_configure_from_env_reads_once_and_leaves_an_explicit_configuration_alone(monkeypatch):
    from streamscope import events as ev
    from streamscope.recording import process_hooks

    monkeypatch.setattr(process_hooks, "_configured", False)
    monkeypatch.setenv("STREAMSCOPE_METRICS_LEVEL", "batch")
    monkeypatch.setenv("STREAMSCOPE_METRICS_INTERVAL", "60")
    try:
        ev.configure()  # explicit: off
        ev.configure_from_env()
        assert not ev.ACTIVE  # the explicit configuration stands
        ev.configure_from_env(force=True)
        assert ev.ACTIVE == {"batch", "crash", "epoch", "stall", "tune"}
        monkeypatch.setenv("STREAMSCOPE_METRICS_LEVEL", "chunk")
        ev.configure_from_env()
        assert "download" not in ev.ACTIVE  # read once
    finally:
        ev.configure()


def test_ensure_metrics_adds_what_is_missing_and_keeps_what_is_recorded(monkeypatch, tmp_path):
    """What the exporters call (the Prometheus endpoint, an OpenTelemetry collection): metrics on at the level's
    categories, no trace log unless one was on, the workers told through the environment; nothing when the
    recording covers the level already."""
    from streamscope import events as ev
    from streamscope import recording
    from streamscope.events import vocab

    monkeypatch.setenv("STREAMSCOPE_METRICS_DIR", str(tmp_path / "m"))
    monkeypatch.delenv("STREAMSCOPE_METRICS_LEVEL", raising=False)
    try:
        ev.configure(trace={"epoch"}, metrics={"batch"})
        ev.ensure_metrics("chunk")
        assert recording.RECORDER.metric_cats == vocab.LEVELS["chunk"] | {"batch"}
        assert recording.RECORDER.trace_cats == {"epoch"}  # the trace level stands
        assert set(os.environ["STREAMSCOPE_METRICS_LEVEL"].split(",")) == set(recording.RECORDER.metric_cats)
        calls: list[tuple] = []
        # a context of its own: monkeypatch.undo() would also undo the interop guard's PYTHONPATH (same monkeypatch)
        with monkeypatch.context() as m:
            m.setattr(ev, "configure", lambda *a, **k: calls.append((a, k)))
            m.setenv("STREAMSCOPE_METRICS_LEVEL", "untouched")
            ev.ensure_metrics("batch")  # covered: no reconfiguration
            ev.ensure_metrics("chunk")
            assert calls == [] and os.environ["STREAMSCOPE_METRICS_LEVEL"] == "untouched"
    finally:
        ev.configure()
