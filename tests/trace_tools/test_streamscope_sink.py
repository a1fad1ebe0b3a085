"""End to end with streamscope's own tracer: events recorded through ``streamscope.events`` in a real process,
written by the Litracer file sink, then validated, converted and summarised by trace_tools."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from tests.trace_tools.helpers import load_chrome, load_perfetto
from trace_tools.cli import main
from trace_tools.summary import summarize

SCRIPT = textwrap.dedent(
    """
    import sys, threading, time
    from streamscope.api.tracing import enable_tracer, flush_tracer
    from streamscope import events as ev

    enable_tracer(level="debug", log_file=sys.argv[1], flush_interval=0.2)

    def prefetch():
        for c in range(3):
            with ev.span("download", "download", chunk=c) as f:
                time.sleep(0.004)
                f["bytes"] = 1000 + c
            ev.counter("bytes_in_flight", "download", 0)

    t = threading.Thread(target=prefetch)
    with ev.span("dataloader", "epoch", epoch=0):
        t.start()
        with ev.span("stall", "stall", batch=0):
            t.join()
            for c in range(3):
                with ev.span("read", "read", chunk=c):
                    with ev.span("sample", "sample", chunk=c, index=c):
                        time.sleep(0.001)
        with ev.span("batch", "batch", batch=0, epoch=0):
            time.sleep(0.002)
        ev.instant("retry", "download", chunk=9, attempt=1, url="s3://bucket/x; y")
    flush_tracer()
    """
)


def test_streamscope_sink_log(tmp_path, capsys):
    log = str(tmp_path / "ss.log")
    r = subprocess.run([sys.executable, "-c", SCRIPT, log], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert main(["validate", log]) == 0, capsys.readouterr().out
    capsys.readouterr()
    for ext in ("json", "pftrace"):
        assert main(["convert", log, "-o", str(tmp_path / f"o.{ext}")]) == 0
    xs = [e for e in load_chrome(str(tmp_path / "o.json"))["traceEvents"] if e["ph"] == "X"]
    assert sorted(e["name"] for e in xs) == sorted(
        ["dataloader", "stall", "batch"] + ["download", "read", "sample"] * 3
    )
    dl = sorted((e["args"]["chunk"], e["args"]["bytes"]) for e in xs if e["name"] == "download")
    assert dl == [(0, 1000), (1, 1001), (2, 1002)]
    reads = {e["args"]["chunk"]: e for e in xs if e["name"] == "read"}
    for e in xs:
        if e["name"] == "download":
            assert e["bind_id"] == reads[e["args"]["chunk"]]["bind_id"]
    v = load_perfetto(str(tmp_path / "o.pftrace"))
    assert v.unbalanced == {} and len(v.slices) == len(xs)
    assert v.counter_values["bytes_in_flight"] == [0, 0, 0]
    (st,) = summarize(log, with_timeline=False).stalls
    assert st.source == "stall spans" and st.waits == 1
    # the stall covers the join on the prefetch thread (downloading) and the reads: little idle time
    assert st.parts["download"] > 0 and st.parts["read"] > 0
    assert abs(sum(st.parts.values()) - st.wait_us) < 1e-3
