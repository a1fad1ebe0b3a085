"""benchmarks/report.py: the README's tables are rendered from the current results, never edited by hand."""

from __future__ import annotations

import json
import os

from benchmarks import report


def test_table_aligns_numbers_and_keeps_columns_in_first_seen_order():
    out = report.table([{"case": "a", "rate": 1234567.8, "ratio": 1.01234}, {"case": "b|c", "ratio": None, "n": 3}])
    assert out.splitlines() == [
        "| case | rate | ratio | n |",
        "|---|---:|---:|---:|",
        "| a | 1,234,568 | 1.0123 |  |",
        "| b\\|c |  |  | 3 |",
    ]


def test_provenance_names_tree_machine_load_versions_and_command():
    meta = {
        "commit": "0123456789abcdef" * 2 + "01234567",
        "dirty": True,
        "written_at": "2026-12-02T10:00:00Z",
        "machine": {"cpu_count": 2, "cpu_model": "CPU X", "ram_bytes": 8 * 2**30, "load_avg_start": [1.5, 1, 1]},
        "versions": {"python": "3.11.7", "litdata": None},
        "argv": ["bench.py", "--rounds", "2"],
    }
    line = report.provenance(meta)
    for part in ("`012345678` (dirty)", "2026-12-02", "2 CPUs (CPU X), 8 GiB RAM", "load 1.5", "python 3.11.7"):
        assert part in line
    assert "litdata" not in line and "`bench.py --rounds 2`" in line


def test_render_replaces_only_the_named_blocks(tmp_path):
    doc = {"benchmark": "bench_a", "meta": {"commit": "f" * 40, "dirty": False}, "summary": [{"x": 1}], "result": {}}
    (tmp_path / "bench_a.json").write_text(json.dumps(doc))
    text = "intro\n<!-- results:bench_a -->\nstale\n<!-- /results:bench_a -->\n<!-- results:bench_b -->\n<!-- /results:bench_b -->\n"
    out = report.render(text, str(tmp_path))
    assert "stale" not in out and "| x |" in out and "| 1 |" in out and out.startswith("intro\n")
    assert "No current result (`results/bench_b.json`" in out
    assert report.render(out, str(tmp_path)) == out


def test_the_readme_matches_the_results_and_every_result_has_a_block():
    assert report.main(["--check"]) == 0


def test_one_current_file_per_benchmark_script():
    here = os.path.dirname(report.__file__)
    scripts = {f[:-3] for f in os.listdir(here) if f.endswith(".py") and not f.startswith("_") and f != "report.py"}
    results = {f[:-5] for f in os.listdir(os.path.join(here, "results"))}
    assert results <= scripts, f"results not named for a script: {sorted(results - scripts)}"
    for name in results - report.NOT_YET:
        with open(os.path.join(here, "results", f"{name}.json")) as f:
            doc = json.load(f)
        assert doc["benchmark"] == name and {"commit", "machine", "versions"} <= set(doc["meta"])


def test_headline_quotes_each_ratio_with_its_commit_and_is_stable(tmp_path):
    doc = {
        "benchmark": "bench_a",
        "meta": {"commit": "abcdef0123" + "0" * 30, "written_at": "2026-12-06T10:00:00Z"},
        "summary": [{"case": "w0", "ratio": 2.5}, {"num_workers": 2, "ratio": 3.0}, {"case": "x", "ratio": None}],
    }
    (tmp_path / "bench_a.json").write_text(json.dumps(doc))
    text = "speed: <!-- headline:bench_a -->old 9x<!-- /headline:bench_a --> end\n"
    out = report.render(text, str(tmp_path))
    assert out == (
        "speed: <!-- headline:bench_a -->w0 2.5x · num_workers=2 3x (commit `abcdef012`, 2026-12-06)"
        "<!-- /headline:bench_a --> end\n"
    )
    assert report.render(out, str(tmp_path)) == out
    missing = report.render("<!-- headline:bench_b -->9x<!-- /headline:bench_b -->", str(tmp_path))
    assert "9x" not in missing and "no current result" in missing
