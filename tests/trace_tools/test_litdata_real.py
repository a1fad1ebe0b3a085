"""A log written by the real LitData 0.2.68 tracer (see data/make_litdata_real_log.py): two runs appended."""

from __future__ import annotations

import os
from pathlib import Path

from tests.trace_tools.helpers import DATA, load_chrome, load_perfetto
from trace_tools.cli import main
from trace_tools.summary import summarize
from trace_tools.validate import validate

REAL = os.path.join(DATA, "litdata_real.log")


def _census() -> dict[str, int]:
    """Counted from the raw text, independently of the parser."""
    lines = Path(REAL).read_text(encoding="utf-8").splitlines()
    return {
        "lines": len(lines),
        "B": sum(";ph: B;" in ln for ln in lines),
        "E": sum(";ph: E;" in ln for ln in lines),
        "stray": sum("ph:" not in ln for ln in lines),
    }


def test_validate_finds_stray_lines_and_two_runs():
    c = _census()
    v = validate(REAL)
    assert v.parse.lines == c["lines"] and v.problems.counts["no_ph"] == c["stray"] == 4
    assert v.failures() == {"no_ph": 4, "mixed_runs": 1}
    assert "second training loop" in v.problems.examples["mixed_runs"][0]


def test_convert_round_trip(tmp_path, capsys):
    c = _census()
    assert c["B"] == c["E"]
    for ext in ("json.gz", "pftrace"):
        out = str(tmp_path / f"r.{ext}")
        assert main(["convert", REAL, "-o", out]) == 1  # two runs: written, with a warning
        assert "mixes 2 runs" in capsys.readouterr().err
    doc = load_chrome(str(tmp_path / "r.json.gz"))
    xs = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    assert len(xs) == c["B"]
    names = sorted({e["args"]["name"] for e in doc["traceEvents"] if e.get("name") == "process_name"})
    assert names == ["rank 0 · main", "run 2 · rank 0 · main"]
    v = load_perfetto(str(tmp_path / "r.pftrace"))
    assert len(v.slices) == c["B"] and v.unbalanced == {}
    native = sorted((s["name"], s["dur"]) for s in v.slices)
    chrome = sorted((e["name"], round(e["dur"] * 1000)) for e in xs)
    assert [n for n, _ in native] == [n for n, _ in chrome]
    assert all(abs(a[1] - b[1]) <= 1 for a, b in zip(native, chrome))  # ns rounding of float microseconds
    assert {n for n, _ in native} == {"batch", "dataloader", "download", "lock", "prefetch", "read", "sample"}


def test_summary_per_run():
    s = summarize(REAL, with_timeline=False)
    assert s.runs == 2
    r1, r2 = s.stalls
    assert r1.label == "run 1 · rank 0" and r1.activity_spans > 0 and r1.waits > 0
    assert abs(sum(r1.parts.values()) - r1.wait_us) < 1e-3
    # run 2's workers were forked and their lines lost: the wait is not blamed on idle workers
    assert r2.label == "run 2 · rank 0" and r2.activity_spans == 0
    from trace_tools.stall import recommendation

    assert "cannot be attributed" in recommendation(r2)
