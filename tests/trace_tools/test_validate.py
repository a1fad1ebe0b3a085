"""validate catches each problem kind and exits 1; a clean log exits 0."""

from __future__ import annotations

import pytest

from tests.trace_tools.helpers import LITDATA_LOG, STREAMSCOPE_LOG, line, span, write_log
from trace_tools.cli import main


def test_clean_streamscope_log(capsys):
    assert main(["validate", STREAMSCOPE_LOG]) == 0
    assert "OK: no problems found" in capsys.readouterr().out


def test_litdata_stray_lines_fail_unless_allowed(capsys):
    assert main(["validate", LITDATA_LOG]) == 1
    out = capsys.readouterr().out
    assert "PROBLEM: 3 x no_ph" in out and "_apply_delete(0, skip_lock=False) called" in out
    assert main(["validate", "--allow-non-events", LITDATA_LOG]) == 0
    assert "ignored: 3 x no_ph" in capsys.readouterr().out


CASES = {
    "unmatched_B": [span("read", "read", 0, 5)[0]],
    "unmatched_E": [span("read", "read", 0, 5)[1]],
    "no_ph": ["ts: 1; pid: 1; tid: 1; just a log message\n"],
    "ts_backwards": [line("I", "a", "read", 100), line("I", "b", "read", 50)],
    "unknown_category": [line("I", "a", "gpu", 100)],
    "unknown_ph": [line("Q", "a", "read", 100)],
    "bad_field": ["ts: yesterday; pid: 1; tid: 1; name: a; cat: read; ph: I;\n"],
    "bad_counter": [line("C", "queue_depth", "prefetch", 100, value="lots")],
    "mixed_runs": [*span("dataloader", "epoch", 0, 5, pid=1), *span("dataloader", "epoch", 10, 15, pid=2)],
    "unreadable": [b"\xff\xfe\x00\x01garbage\n"],
    "truncated_last": ["ts: 3; pid: 1; tid: 1; name: a; cat: re"],
}


@pytest.mark.parametrize("kind", sorted(CASES))
def test_each_problem_kind(tmp_path, capsys, kind):
    good = [line("I", "ok", "read", 0, pid=9)]
    lines = CASES[kind]
    path = tmp_path / "p.log"
    if isinstance(lines[0], bytes):
        path.write_bytes(good[0].encode() + b"".join(lines))
    else:
        write_log(str(path), good + lines)
    assert main(["validate", str(path)]) == 1
    out = capsys.readouterr().out
    assert f"PROBLEM: 1 x {kind}" in out
    assert out.strip().endswith("FAIL: 1 problem(s)")
    # the one-line form
    assert main(["validate", "-q", str(path)]) == 1
    q = capsys.readouterr().out.strip().splitlines()
    assert len(q) == 1 and q[0].startswith("FAIL ") and f"{kind}=1" in q[0]
    assert main(["validate", "--ignore", kind, str(path)]) == 0


def test_quiet_ok(capsys):
    assert main(["validate", "--quiet", STREAMSCOPE_LOG]) == 0
    assert capsys.readouterr().out.strip() == f"OK {STREAMSCOPE_LOG}: 39 events in 39 lines"
