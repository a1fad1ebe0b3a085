"""The batch processor: exporters' results, failures and flushes counted, never raised."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from streamscope.events import ExportResult
from streamscope.recording.processor import BatchProcessor
from streamscope.recording.report import Reporter


class _Failing:
    def export(self, batch):
        return ExportResult.FAILURE

    def force_flush(self, timeout_millis=30_000):
        self.timeout = timeout_millis
        return False

    def shutdown(self):
        pass


class _Legacy:
    """A sink of the first interface: export returns None, force_flush takes no timeout."""

    flushed = 0

    def export(self, batch):
        return None

    def force_flush(self):
        _Legacy.flushed += 1

    def shutdown(self):
        pass


def test_failures_are_counted_and_reported_once_and_old_sinks_still_work(capsys, monkeypatch):
    monkeypatch.delenv("STREAMSCOPE_TRACE_SINKS", raising=False)
    failing = _Failing()
    p = BatchProcessor(Reporter(), [lambda: failing, _Legacy])
    events = [("I", "x", "read", 1, 1, 1, {})]
    p.export(events, 0)
    p.export(events, 0)
    assert p.errors == 2
    assert capsys.readouterr().err.count("failed to export a batch") == 1
    assert p.force_flush(250) is False and failing.timeout == 250 and _Legacy.flushed == 1
    assert p.errors == 3  # the failing flush; the legacy sink's None counts as done
    p.shutdown_sinks()
    assert p.sinks is None


_NAMED = """
import sys
import streamscope.events as ev  # only the event bus: the package root is imported first, and provides the sink
from streamscope import recording
ev.configure_from_env()
ev.instant("probe", "batch", n=1)
ev.flush()
print([spec for spec, _ in recording.RECORDER.sinks], type(recording.RECORDER.sinks[0][1]).__name__)
"""


@pytest.mark.parametrize(
    ("sinks", "built"),
    [
        ("litracer", ["litracer"]),  # what enable_tracer gives a spawned worker
        ("streamscope.trace.litracer:LitracerFileSink", ["streamscope.trace.litracer:LitracerFileSink"]),  # old value
        ("litracer,streamscope.trace.litracer:LitracerFileSink", ["litracer"]),  # one file, written once
        ("", ["litracer"]),  # tracing on by the environment alone: the default sink
    ],
)
def test_a_fresh_process_builds_the_litracer_sink_by_its_names(tmp_path, sinks, built):
    """A process configured from the environment alone (a spawned worker) builds the Litracer sink from the name
    the environment gives, through the hook the package root provides (``events`` does not name ``trace``)."""
    log = tmp_path / "t.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("STREAMSCOPE_", "LITDATA_"))}
    env.update(STREAMSCOPE_TRACE_LEVEL="batch", STREAMSCOPE_LOG_FILE=str(log), STREAMSCOPE_TRACE_SINKS=sinks)
    env["STREAMSCOPE_METRICS_DIR"] = str(tmp_path / "m")
    r = subprocess.run([sys.executable, "-c", _NAMED], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "could not be created" not in r.stderr, r.stderr
    assert r.stdout.strip().splitlines()[-1] == f"{built} LitracerFileSink"
    assert sum("name: probe;" in line for line in log.read_text().splitlines()) == 1
