"""The API installs its runtime once, through the package root's hook: importing the API loads no runtime, the
first entry point that needs one installs streamscope.recording, and a staged span is the runtime's."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from streamscope import events as ev
from streamscope import recording
from streamscope.events import runtime, stages


def _run(code: str, **env: str) -> dict[str, object]:
    full = {k: v for k, v in os.environ.items() if not k.startswith(("STREAMSCOPE_", "LITDATA_"))}
    full.update(env)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=full, timeout=120)
    assert out.returncode == 0, out.stderr
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def test_importing_the_api_loads_no_runtime_and_the_first_entry_point_installs_it(tmp_path):
    got = _run(
        "import json, sys\n"
        "from streamscope import events as ev\n"
        "before = 'streamscope.recording' in sys.modules, ev.runtime.installed() is None\n"
        "ev.configure_from_env()  # what streamscope's entry points do\n"
        "import streamscope.recording as r\n"
        "after = ev.runtime.installed() is r._RUNTIME, ev.staged_span is r.Runtime.staged_span\n"
        "print(json.dumps({'before': before, 'after': after, 'active': sorted(ev.ACTIVE)}))\n",
        STREAMSCOPE_TRACE_LEVEL="chunk",
        STREAMSCOPE_LOG_FILE=str(tmp_path / "t.log"),
        STREAMSCOPE_METRICS_DIR=str(tmp_path / "m"),
    )
    assert got["before"] == [False, True]  # the API alone: no runtime module, nothing installed
    assert got["after"] == [True, True]  # installed through the root's hook, staged spans are the runtime's
    assert "download" in got["active"]  # the environment's level, applied by the runtime


def test_a_staged_category_gets_the_runtimes_span_that_moves_the_stage_clock():
    recording.install()
    assert runtime.installed() is not None
    from streamscope.recording import attribution

    ev.ACTIVE.add("download")
    stages.STAGED.add("download")
    try:
        sp = ev.span("download", "download", chunk=1)
        assert isinstance(sp, attribution.StagedSpan | attribution.StagedCompleteSpan)
        with ev.stage(stages.DOWNLOAD):
            assert attribution.CLOCK.active[stages.DOWNLOAD] == 1
        assert attribution.CLOCK.active[stages.DOWNLOAD] == 0
    finally:
        stages.STAGED.discard("download")
        ev.ACTIVE.discard("download")
        ev.drain()
    assert not isinstance(ev.span("download", "download"), attribution.StagedSpan)  # not staged: inactive


def test_an_api_entry_point_without_a_runtime_hook_says_so(monkeypatch):
    from streamscope._core import errors, hooks

    monkeypatch.setattr(runtime, "_installed", None)
    monkeypatch.setitem(hooks._provided, hooks.RUNTIME, lambda: None)  # a hook that installs nothing
    with pytest.raises(errors.TraceConfigError, match="installed no runtime"):
        ev.flush()
