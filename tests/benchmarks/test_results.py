"""benchmarks/_results.py: every result file says which tree, machine, versions and arguments produced it."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
from pathlib import Path

import pytest

from benchmarks import _results


def _git(cwd, *argv: str) -> None:
    subprocess.run(["git", *argv], cwd=cwd, check=True, capture_output=True)


@pytest.fixture
def repo(tmp_path):
    root = tmp_path / "repo"
    (root / "benchmarks" / "results").mkdir(parents=True)
    (root / "code.py").write_text("x = 1\n")
    (root / "benchmarks" / "results" / "b.json").write_text("{}\n")
    _git(root, "init", "-q")
    _git(root, "add", ".")
    _git(root, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "init")
    return root


@pytest.mark.interop  # finds the installed LitData (its version) without importing it
def test_a_written_result_describes_itself(tmp_path):
    args = argparse.Namespace(rounds=3, workers=[0, 2], out=None)
    run = _results.start("bench_example", args)
    path = run.write({"rate": 12.5}, summary=[{"case": "a", "ratio": 1.5}], out=str(tmp_path / "r.json"))
    doc = json.loads(Path(path).read_text())
    assert doc["benchmark"] == "bench_example"
    assert doc["result"] == {"rate": 12.5} and doc["summary"] == [{"case": "a", "ratio": 1.5}]
    meta = doc["meta"]
    assert meta["args"] == {"rounds": 3, "workers": [0, 2], "out": None}
    assert len(meta["commit"]) == 40 and isinstance(meta["dirty"], bool)
    machine = meta["machine"]
    assert machine["cpu_count"] == os.cpu_count() and machine["cpus_usable"] >= 1
    assert machine["cpu_model"] and machine["ram_bytes"] > 0
    assert len(machine["load_avg_start"]) == 3 and len(machine["load_avg_end"]) == 3
    versions = meta["versions"]
    assert set(versions) >= {"python", "torch", "streamscope", "litdata"}
    assert versions["python"].count(".") == 2 and versions["streamscope"]
    assert meta["written_at"].endswith("Z") and meta["duration_s"] >= 0


@pytest.mark.interop
def test_versions_the_script_knows_better_override_this_process(tmp_path):
    run = _results.start("b", {})
    doc = json.loads(Path(run.write({}, out=str(tmp_path / "r.json"), versions={"litdata": "9.9"})).read_text())
    assert doc["meta"]["versions"]["litdata"] == "9.9"


def test_where_results_go(tmp_path):
    assert _results.result_path("bench_x") == os.path.join(_results.RESULTS_DIR, "bench_x.json")
    assert _results.result_path("bench_x", "other.json") == os.path.join(_results.RESULTS_DIR, "other.json")
    assert _results.result_path("bench_x", str(tmp_path / "a.json")) == str(tmp_path / "a.json")


def test_dirty_flag_ignores_results_but_not_code(repo):
    state = _results.source_state(str(repo))
    assert state["dirty"] is False and len(state["commit"]) == 40
    (repo / "benchmarks" / "results" / "b.json").write_text('{"new": 1}\n')
    assert _results.source_state(str(repo))["dirty"] is False
    (repo / "code.py").write_text("x = 2\n")
    assert _results.source_state(str(repo))["dirty"] is True


def test_outside_a_checkout_commit_and_dirty_are_unknown(tmp_path):
    state = _results.source_state(str(tmp_path))
    assert state["commit"] is None and state["dirty"] is None


def test_package_version_reads_the_package_found_without_importing_it(tmp_path):
    pkg = tmp_path / "fakepkg_for_results"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("raise RuntimeError('must not be imported')\n")
    (pkg / "__about__.py").write_text('__version__ = "1.2.3"\n')
    assert _results.package_version("fakepkg_for_results", path=str(tmp_path)) == "1.2.3"
    assert _results.package_version("no_such_package_xyz", path=str(tmp_path)) is None
    assert _results.package_version("no_such_package_xyz") is None
