"""benchmarks/pool_ab.py: pooling tracer A/B runs taken at different times."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from benchmarks.pool_ab import pool, pool_by_kind, two_stage_interval


def _run(path, ratio: float, n: int, seed: int) -> str:
    rng = random.Random(seed)
    off = [[0.5 + rng.uniform(-0.05, 0.05), 0.25 + rng.uniform(-0.02, 0.02), 0.01] for _ in range(n)]
    chunk = [[a * ratio, b * ratio, c] for a, b, c in off]
    path.write_text(json.dumps({"in_process_ab_w2_chunk": {"rounds_raw": {"off": off, "chunk": chunk}}}))
    return str(path)


def test_pooled_median_and_per_run_medians(tmp_path):
    runs = [_run(tmp_path / f"r{i}.json", r, 50, i) for i, r in enumerate([1.01, 1.02, 1.03])]
    res = pool(runs)
    assert res["kind"] == "in_process_ab_w2_chunk" and res["rounds"] == [50, 50, 50]
    for m in ("cpu", "wall"):
        assert res[m]["per_run_paired_median"] == pytest.approx([1.01, 1.02, 1.03], abs=1e-4)
        assert res[m]["pooled_paired_median"] == pytest.approx(1.02, abs=1e-4)
        lo, hi = res[m]["ci95_two_stage"]
        assert 1.01 - 1e-9 <= lo <= 1.02 <= hi <= 1.03 + 1e-9


def test_the_interval_widens_with_the_spread_between_runs():
    rng = random.Random(1)
    same = [[1.02 + rng.gauss(0, 0.01) for _ in range(100)] for _ in range(4)]
    drifting = [[x + shift for x in run] for run, shift in zip(same, (-0.01, 0.0, 0.01, 0.02))]
    lo1, hi1 = two_stage_interval(same)
    lo2, hi2 = two_stage_interval(drifting)
    assert hi2 - lo2 > 2 * (hi1 - lo1)


def test_runs_of_different_kinds_are_not_pooled(tmp_path):
    a = _run(tmp_path / "a.json", 1.01, 10, 0)
    b = tmp_path / "b.json"
    b.write_text(json.dumps({"in_process_ab_w0_chunk": json.loads(Path(a).read_text())["in_process_ab_w2_chunk"]}))
    with pytest.raises(SystemExit, match="different A/B kinds"):
        pool([a, str(b)])


def test_runs_are_grouped_by_kind_and_read_inside_the_result_envelope(tmp_path):
    a = _run(tmp_path / "a.json", 1.01, 10, 0)
    b = tmp_path / "b.json"
    body = json.loads(Path(a).read_text())["in_process_ab_w2_chunk"]
    b.write_text(json.dumps({"meta": {"commit": "c" * 40}, "result": {"in_process_ab_w0_chunk": body}}))
    pools = pool_by_kind([a, str(b)])
    assert list(pools) == ["in_process_ab_w0_chunk", "in_process_ab_w2_chunk"]
    assert pools["in_process_ab_w0_chunk"]["run_commits"] == ["c" * 40]
    assert pools["in_process_ab_w2_chunk"]["run_commits"] == [None]
    assert pools["in_process_ab_w0_chunk"]["cpu"]["pooled_paired_median"] == pytest.approx(1.01, abs=1e-4)
