"""The tuner section of ``summary``: a simulated tuner's real ``tune`` events, written by streamscope's tracer."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

from tests.trace_tools.helpers import load_chrome
from trace_tools.cli import main
from trace_tools.summary import format_summary, summarize

SCRIPT = textwrap.dedent(
    """
    import sys
    from streamscope.api.tracing import enable_tracer, flush_tracer
    from streamscope.cache.knobs import tune_event
    from streamscope.tune.runner import record
    from tests.tune.sim import world

    enable_tracer(categories=["tune"], log_file=sys.argv[1], flush_interval=0.2)
    record("started", {"ram_budget": 4e9, "ram_from": "test", "cpus": 4, "max_workers": 4, "workers": 2})
    make = world.make

    def traced(w, **kw):  # the simulated loader's board and controller write to the tracer
        target, c, events = make(w, **kw)
        target.board_._listener = tune_event
        c.emit = record
        return target, c, events

    world.make = traced
    world.run_tuned(world.World(w0=0.1, seconds=120.0), 1)
    flush_tracer()
    """
)


def test_summary_has_a_tuner_section_with_every_decision(tmp_path, capsys):
    log = str(tmp_path / "t.log")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([os.path.join(root, "src"), root])}
    r = subprocess.run([sys.executable, "-c", SCRIPT, log], capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0, r.stderr
    s = summarize(log)
    assert len(s.tuners) == 1
    t = s.tuners[0]
    assert t.started["cpus"] == "4" and t.decisions
    text = format_summary(s)
    section = text[text.index("Tuner (tune events") : text.index("Stall report")]
    assert "RAM budget 4.00 GB (test), 4 cores" in section
    assert "download_concurrency 4 -> " in section and "kept" in section and "ms/batch" in section
    assert "A-B-B-A windows +" in section and "model +" in section  # the paired check and the model's prediction
    assert "settled: the loop waits" in section
    assert "knob value changes: download_concurrency" in section and "by the tuner" in section
    first = next(a for _, a in t.decisions)
    assert float(first["wait_before_ms"]) > float(first["wait_after_ms"])
    assert main(["convert", log, "-o", str(tmp_path / "o.json")]) == 0  # Perfetto/Chrome: instants with their fields
    inst = [e for e in load_chrome(str(tmp_path / "o.json"))["traceEvents"] if e.get("name") == "decision"]
    assert inst and inst[0]["args"]["knob"] == first["knob"] and "reason" in inst[0]["args"]
    capsys.readouterr()
