"""A real traced run, as a user makes one: optimize a small dataset with the tracer on, stream it with two
DataLoader workers (level chunk, the data copied into a cache so chunks are downloaded), then the documented
commands `python -m trace_tools validate | convert | summary` on its log."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.trace_tools.helpers import load_chrome

pytest.importorskip("matplotlib")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

SCRIPT = textwrap.dedent(
    """
    import sys
    import streamscope as ss
    from tests.integration._fns import sample

    out, log = sys.argv[1], sys.argv[2]
    ss.enable_tracer(level="chunk", log_file=log)
    ss.optimize(fn=sample, inputs=list(range(2000)), output_dir=out + "/data", chunk_size=250, num_workers=2)
    ds = ss.StreamingDataset("local:" + out + "/data", cache_dir=out + "/cache", shuffle=True)
    loader = ss.StreamingDataLoader(ds, batch_size=50, num_workers=2)
    seen = sum(len(b["index"]) for _ in range(2) for b in loader)
    assert seen == 4000, seen
    ss.flush_tracer()
    """
)


@pytest.fixture(scope="module")
def traced(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("run")
    log = str(tmp / "trace.log")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("STREAMSCOPE_", "LITDATA_TRACE", "OTEL_"))}
    env["PYTHONPATH"] = os.pathsep.join([os.path.join(ROOT, "src"), ROOT])
    r = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp), log], capture_output=True, text=True, timeout=300, env=env, cwd=ROOT
    )
    assert r.returncode == 0, r.stderr[-3000:]
    return tmp, log, env


def _cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "trace_tools", *args], capture_output=True, text=True, timeout=300, env=env, cwd=ROOT
    )


def test_the_write_path_has_its_own_categories_and_validates(traced):
    tmp, log, env = traced
    events = [dict(p.split(": ", 1) for p in ln.split("; ") if ": " in p) for ln in Path(log).read_text().splitlines()]
    cats = {(e["name"], e["cat"]) for e in events}
    assert ("upload", "upload") in cats and ("chunk_write", "write") in cats
    assert ("download", "download") in cats  # the loader's chunk downloads into its cache
    assert {c for n, c in cats if n in ("upload", "chunk_write")} == {"upload", "write"}
    v = _cli(env, "validate", "-q", log)
    assert v.returncode == 0 and "unknown_category" not in v.stdout, v.stdout + v.stderr


def test_convert_cat_download_keeps_chunk_downloads_only(traced):
    tmp, log, env = traced
    got = {}
    for cat in ("download", "upload"):
        out = str(tmp / f"{cat}.json")
        c = _cli(env, "convert", log, "-o", out, "--cat", cat)
        assert c.returncode == 0, c.stderr
        got[cat] = {(e["name"], e["cat"]) for e in load_chrome(out)["traceEvents"] if e["ph"] in ("X", "B", "I")}
    # the read path's download spans (the chunk's download and its store calls), no upload
    assert ("download", "download") in got["download"] and {c for _, c in got["download"]} == {"download"}
    assert not {n for n, _ in got["download"]} & {"upload", "chunk_write"}, got["download"]
    assert got["upload"] == {("upload", "upload")}
    c = _cli(env, "convert", log, "-o", str(tmp / "all.pftrace"))
    assert c.returncode == 0, c.stderr


def test_summary_names_roles_and_writes_the_three_pictures(traced):
    tmp, log, env = traced
    plots = tmp / "plots"
    s = _cli(env, "summary", log, "-o", str(plots))
    assert s.returncode == 0, s.stderr
    out = s.stdout
    assert (
        "upload/upload @ rank 0 · optimize worker 0" in out and "write/chunk_write @ rank 0 · optimize worker 1" in out
    )
    assert "download/download @ rank 0 · loader worker" in out and "stall/stall @ rank 0 · main" in out
    assert "Stall report" in out and "=> " in out
    from PIL import Image

    for kind in ("waits", "timeline", "latency"):
        path = plots / f"trace.log.{kind}.png"
        assert f"{path}" in out
        with Image.open(path) as im:
            assert im.format == "PNG" and im.size[0] > 800 and im.size[1] > 150


def test_the_timeline_of_the_run_starts_at_its_first_event(traced):
    from trace_tools.plots import render_timeline
    from trace_tools.summary import summarize

    tmp, log, _ = traced
    first = min(
        float(ln.split(";", 1)[0].split(":", 1)[1]) for ln in Path(log).read_text().splitlines() if ln.startswith("ts:")
    )
    s = summarize(log)
    assert s.timeline is not None
    lay = render_timeline(s.timeline, str(tmp / "t.png"), "trace.log")
    assert lay.start_us == pytest.approx(first, abs=1e-3) and lay.xlim[0] == 0.0
    texts = [t for _, _, _, t, _ in lay.bars]
    assert "optimize" in texts and len([t for t in texts if t.startswith("epoch")]) == 2
    labels = " | ".join(lay.labels)
    for role in ("rank 0 · main", "loader worker 0", "loader worker 1", "optimize worker 0", "optimize worker 1"):
        assert role in labels, role
