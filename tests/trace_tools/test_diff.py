"""diff: per category, what got faster or slower between two synthetic runs."""

from __future__ import annotations

from tests.trace_tools.helpers import span, write_log
from trace_tools.cli import main
from trace_tools.diff import diff_rows
from trace_tools.summary import summarize


def _run(path: str, download_us: int, sample_us: int, with_delete: bool) -> str:
    lines: list[str] = []
    t = 0
    for i in range(20):
        lines += span("stall", "stall", t, t + download_us, pid=1, batch=i)
        lines += span("download", "download", t, t + download_us, pid=2, tid=2, worker=0, chunk=i)
        lines += span("read", "read", t + download_us, t + download_us + 100, pid=2, tid=1, worker=0, chunk=i)
        lines += span("sample", "sample", t + download_us, t + download_us + sample_us, pid=2, tid=3, worker=0, index=i)
        if with_delete:
            lines += span("delete", "delete", t, t + 10, pid=2, tid=2, worker=0, chunk=i)
        t += download_us + sample_us + 1000
    return write_log(path, lines)


def test_diff_verdicts(tmp_path, capsys):
    a = _run(str(tmp_path / "a.log"), download_us=1000, sample_us=100, with_delete=True)
    b = _run(str(tmp_path / "b.log"), download_us=400, sample_us=300, with_delete=False)
    rows = {label: verdict for label, verdict, _, _ in diff_rows(summarize(a, False), summarize(b, False), 0.1)}
    assert rows == {"download": "faster", "read": "same", "sample": "slower", "stall": "faster", "delete": "gone"}
    assert main(["diff", a, b]) == 0
    out = capsys.readouterr().out
    assert "Faster in B: download, stall; slower in B: sample" in out
    dl = next(ln for ln in out.splitlines() if ln.strip().startswith("download"))
    assert "-60.0%" in dl  # p50 1000us -> 400us
    assert "Training loop waited 20.00ms (A) vs 8.00ms (B): -60.0%, B waits less" in out


def test_diff_threshold(tmp_path, capsys):
    a = _run(str(tmp_path / "a.log"), download_us=1000, sample_us=100, with_delete=False)
    b = _run(str(tmp_path / "b.log"), download_us=1080, sample_us=100, with_delete=False)
    assert main(["diff", a, b]) == 0
    assert "slower in B: nothing" in capsys.readouterr().out
    assert main(["diff", "--threshold", "5", a, b]) == 0
    assert "slower in B: download, stall" in capsys.readouterr().out


def test_diff_bad_input(tmp_path, capsys):
    a = _run(str(tmp_path / "a.log"), 10, 10, False)
    (tmp_path / "e.log").write_bytes(b"")
    assert main(["diff", a, str(tmp_path / "e.log")]) == 2
    assert "empty" in capsys.readouterr().err
