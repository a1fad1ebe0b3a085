"""Bad input never produces a traceback: a clear message on stderr and a non-zero exit code."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.trace_tools.helpers import LITDATA_LOG, STREAMSCOPE_LOG, load_chrome, span, write_log
from trace_tools.cli import main

GOOD = STREAMSCOPE_LOG


def _run(argv: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "trace_tools", *argv], capture_output=True, text=True, timeout=60)


def test_module_entry_point_and_no_traceback(tmp_path):
    empty = tmp_path / "empty.log"
    empty.write_bytes(b"")
    r = _run(["summary", str(empty)])
    assert r.returncode == 2
    assert "Traceback" not in r.stderr and "empty" in r.stderr
    r = _run(["convert", GOOD, "-o", str(tmp_path / "ok.json")])
    assert r.returncode == 0 and "wrote" in r.stdout


@pytest.mark.parametrize("cmd", ["convert", "validate", "summary"])
def test_empty_file(tmp_path, capsys, cmd):
    p = tmp_path / "e.log"
    p.write_bytes(b"")
    extra = ["-o", str(tmp_path / "o.json")] if cmd == "convert" else []
    assert main([cmd, str(p), *extra]) == 2
    err = capsys.readouterr().err
    assert "e.log: the log is empty" in err and "Traceback" not in err


def test_missing_file(capsys):
    assert main(["summary", "/nonexistent/trace.log"]) == 2
    assert "no such file" in capsys.readouterr().err


def test_binary_garbage_only(tmp_path, capsys):
    p = tmp_path / "g.log"
    p.write_bytes(os.urandom(5000).replace(b"\n", b"") + b"\n" + bytes(range(256)) * 4)
    for argv in (["convert", str(p), "-o", str(tmp_path / "g.json")], ["summary", str(p), "--no-plots"]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert "no trace events found" in err and "unreadable" in err
    assert not (tmp_path / "g.json").exists()
    assert main(["validate", str(p)]) == 1
    assert "unreadable" in capsys.readouterr().out


def test_garbage_among_events_is_skipped_with_warning(tmp_path, capsys):
    p = tmp_path / "m.log"
    p.write_bytes(Path(GOOD).read_bytes() + b"\x00\x9f\x92\x96 binary\n")
    out = tmp_path / "m.json"
    assert main(["convert", str(p), "-o", str(out)]) == 1
    err = capsys.readouterr().err
    assert "1 unreadable line(s)" in err
    assert len([e for e in load_chrome(str(out))["traceEvents"] if e["ph"] == "X"]) == 15


def test_truncated_last_line(tmp_path, capsys):
    text = Path(GOOD).read_text()
    p = tmp_path / "t.log"
    p.write_text(text + text.splitlines()[0][:40])
    out = tmp_path / "t.pftrace"
    assert main(["convert", str(p), "-o", str(out)]) == 1
    err = capsys.readouterr().err
    assert "last line is truncated" in err and "line 40" in err
    assert out.exists()
    assert main(["summary", str(p), "--no-plots"]) == 1
    assert "last line is truncated" in capsys.readouterr().err


def test_mixed_runs_warns(tmp_path, capsys):
    lines = [*span("dataloader", "epoch", 0, 50, pid=1), *span("dataloader", "epoch", 100, 150, pid=2)]
    p = write_log(str(tmp_path / "r.log"), lines)
    assert main(["summary", p, "--no-plots"]) == 1
    cap = capsys.readouterr()
    assert "mixes 2 runs" in cap.err and "WARNING: the log mixes 2 runs" in cap.out


@pytest.mark.parametrize(
    "target,msg",
    [
        ("missing_dir/out.json", "does not exist"),
        ("d.json", "is a directory"),
        ("afile/out.json", "does not exist"),
        ("out.txt", "unknown output type"),
    ],
)
def test_unwritable_output(tmp_path, capsys, target, msg):
    (tmp_path / "afile").write_text("x")
    (tmp_path / "d.json").mkdir()
    out = str(tmp_path / target)
    assert main(["convert", GOOD, "-o", out]) == 2
    err = capsys.readouterr().err
    assert msg in err and "Traceback" not in err


def test_output_in_proc_cannot_be_created(capsys):
    assert main(["convert", GOOD, "-o", "/proc/streamscope-trace-test.json"]) == 2
    assert "cannot write" in capsys.readouterr().err


def test_summary_plot_dir_is_a_file(tmp_path, capsys):
    f = tmp_path / "f"
    f.write_text("")
    assert main(["summary", GOOD, "-o", str(f)]) == 2
    assert "is not a directory" in capsys.readouterr().err


def test_usage_errors(capsys):
    assert main([]) == 2
    assert "required" in capsys.readouterr().err
    assert main(["convert", GOOD]) == 2
    assert "-o/--output" in capsys.readouterr().err
    assert main(["frobnicate"]) == 2
    assert main(["--help"]) == 0


def test_summary_writes_pngs(tmp_path, capsys):
    assert main(["summary", LITDATA_LOG, "-o", str(tmp_path / "plots")]) == 0
    out = capsys.readouterr().out
    tl = tmp_path / "plots" / "litdata_small.log.timeline.png"
    hist = tmp_path / "plots" / "litdata_small.log.latency.png"
    waits = tmp_path / "plots" / "litdata_small.log.waits.png"
    assert f"timeline:   {tl}" in out and f"histograms: {hist}" in out and f"waits:      {waits}" in out
    from PIL import Image

    for p in (tl, hist, waits):
        with Image.open(p) as im:
            assert im.format == "PNG" and im.size[0] > 400 and im.size[1] > 100
    assert "Stall report" in out and "from gaps between batch spans" in out
    assert "download/download @ rank 0 · loader worker 1" in out  # a worker that downloads is a loader's


def test_summary_of_a_log_without_spans(tmp_path, capsys):
    p = write_log(str(tmp_path / "i.log"), ["ts: 1; pid: 1; tid: 1; name: crash; cat: crash; error: E: x; ph: I;\n"])
    assert main(["summary", p]) == 0
    out = capsys.readouterr().out
    assert "crash/crash: 1" in out and "cannot tell how long the loop waited" in out
    assert (tmp_path / "i.log.timeline.png").stat().st_size > 0


def test_output_same_as_input(tmp_path, capsys):
    p = tmp_path / "x.json"
    p.write_text(Path(GOOD).read_text())
    before = p.read_bytes()
    assert main(["convert", str(p), "-o", str(p)]) == 2
    assert "is the input log itself" in capsys.readouterr().err
    assert p.read_bytes() == before


def test_disk_full_is_a_clear_error(tmp_path, capsys, monkeypatch):
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full")
    # writing into /dev/full fails with ENOSPC: the message names the output, the temp file is gone
    from trace_tools import outputs

    real = outputs.AtomicOutput.__init__

    def to_dev_full(self, path, binary):
        real(self, path, binary)
        self._raw.close()
        os.unlink(self.tmp)
        self._raw = open("/dev/full", "wb", buffering=0)  # noqa: SIM115
        self.binary = self._raw
        import io

        self.text = None if binary else io.TextIOWrapper(self._raw, encoding="utf-8", newline="", write_through=True)
        self.tmp = str(tmp_path / "never-created")

    monkeypatch.setattr(outputs.AtomicOutput, "__init__", to_dev_full)
    assert main(["convert", GOOD, "-o", str(tmp_path / "o.pftrace")]) == 2
    err = capsys.readouterr().err
    assert "o.pftrace: cannot write (No space left on device)" in err and "Traceback" not in err
    assert not (tmp_path / "o.pftrace").exists()


def test_console_script(tmp_path):
    script = os.path.join(os.path.dirname(sys.executable), "streamscope-trace")
    if not os.path.exists(script):
        pytest.skip("streamscope-trace is not installed in this environment")
    r = subprocess.run([script, "validate", "-q", GOOD], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.startswith("OK ")


@pytest.mark.parametrize(
    "hidden, argv, hint",
    [
        ("matplotlib", ["summary", GOOD, "-o", "{tmp}/png"], 'pip install "streamscope[trace]"'),
        ("perfetto", ["convert", GOOD, "-o", "{tmp}/t.pftrace"], "pip install perfetto"),
    ],
)
def test_a_missing_optional_package_is_one_line_and_exit_2(tmp_path, capsys, monkeypatch, hidden, argv, hint):
    for name in [m for m in sys.modules if m == hidden or m.startswith(hidden + ".")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, hidden, None)  # import -> ModuleNotFoundError
    assert main([a.format(tmp=tmp_path) for a in argv]) == 2
    out = capsys.readouterr()
    assert out.err.count("\n") == 1 and out.err.startswith("error: ") and hint in out.err, out.err
    assert "Traceback" not in out.err
    assert "stall" not in out.out  # refused before the work (summary prints no report first)
    assert not (tmp_path / "t.pftrace").exists() and not (tmp_path / "png").exists()  # nothing half-written
