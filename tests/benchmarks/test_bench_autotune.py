"""benchmarks/bench_autotune.py: the paired protocol's numbers, the latency store, and one tiny run end to end."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time

import pytest

from benchmarks import _ab, _autotune_loop, _autotune_report, bench_autotune
from benchmarks._latency_store import LatencyStore, Profile, _range
from tests.engine._data import image_sample, write_dataset
from tests.support.litdata_version import litdata_env

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
report = _autotune_report

# The tiny end-to-end run has a LitData arm: every test here is marked so the 0.2.76 pass runs it too.
pytestmark = pytest.mark.interop


# --- _ab: the protocol's pieces ------------------------------------------------------------------------------


def test_abba_orders_reverse_every_other_round_and_vary() -> None:
    arms = ["a", "b", "c", "d"]
    orders = _ab.abba_orders(arms, 20, seed=3)
    assert len(orders) == 20 and all(sorted(o) == arms for o in orders)
    assert all(orders[i + 1] == orders[i][::-1] for i in range(0, 20, 2))
    assert len({tuple(o) for o in orders[::2]}) > 1  # not one fixed order
    firsts = {o[0] for o in orders}
    assert len(firsts) > 1  # no arm always runs first
    assert _ab.abba_orders(arms, 20, seed=3) == orders  # reproducible from the seed


def test_geomean_and_its_bootstrap_interval() -> None:
    assert _ab.geomean([2.0, 0.5]) == pytest.approx(1.0)
    assert math.isnan(_ab.geomean([])) and math.isnan(_ab.geomean([1.0, 0.0]))
    ratios = [1.10, 1.05, 1.20, 1.15, 1.08, 1.12, 1.18, 1.02, 1.11, 1.09]
    g = _ab.geomean_ci95(ratios)
    lo, hi = g["ci95"]
    assert lo < g["geomean"] < hi and min(ratios) <= lo and hi <= max(ratios) and g["rounds"] == 10
    # the same median interval bench_tracer reported before the pieces moved here (2000 draws, seed 0)
    assert _ab.bootstrap_ci95(ratios) == _ab.bootstrap_ci95(list(ratios))
    assert _ab.bootstrap_ci95([1.0] * 5) == [1.0, 1.0]


def test_pressure_is_read_from_the_psi_file(tmp_path) -> None:
    f = tmp_path / "cpu"
    f.write_text(
        "some avg10=12.50 avg60=3.00 avg300=1.00 total=1000000\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"
    )
    assert _ab.cpu_pressure(str(f)) == {"avg10": 12.5, "total_us": 1_000_000.0}
    p = _ab.Pressure(str(f)).start()
    f.write_text("some avg10=40.00 avg60=3.00 avg300=1.00 total=1500000\n")
    out = p.stop()
    assert out["cpu_some_avg10_end"] == 40.0 and out["cpu_some_pct"] > 0 and len(out["load_end"]) == 3
    assert _ab.cpu_pressure(str(tmp_path / "missing")) is None


# --- the report: paired ratios, the grid best picked and scored on different rounds ----------------------------


def _round(i: int, rates: dict[str, float], settle: float = 6.0) -> dict:
    arms = {k: {"status": "ok", "rate": v, "t_within_5pct_s": settle} for k, v in rates.items()}
    return {"round": i, "order": list(rates), "arms": arms, "pressure": {"cpu_some_pct": 10.0 + i, "load_end": [1.0]}}


def test_grid_best_is_picked_on_odd_rounds_and_scored_on_even_ones() -> None:
    rounds = []
    for i in range(1, 21):
        odd = i % 2 == 1
        # grid-lucky wins every odd round and loses every even one: picking and scoring on the same rounds
        # would crown it; grid-steady is the honest best on the rounds that score
        rates = {"untuned": 1000.0, "untuned-aa": 1000.0 * (1.01 if odd else 0.99), "tuned": 1500.0,
                 "grid-lucky": 3000.0 if odd else 900.0, "grid-steady": 2000.0}  # fmt: skip
        rounds.append(_round(i, rates))
    names = ["untuned", "untuned-aa", "tuned", "grid-lucky", "grid-steady"]
    assert report.pick_grid_best(rounds, ["grid-lucky", "grid-steady"]) == "grid-lucky"  # odd rounds pick it
    ev = report.evaluate({"rounds": rounds, "arm_names": names})
    assert ev["grid_best"] == "grid-lucky"
    assert ev["grid_best_vs_untuned_even"]["geomean"] == pytest.approx(0.9)  # ...and even rounds expose it
    assert ev["grid_best_vs_untuned_even"]["round_numbers"] == list(range(2, 21, 2))
    assert ev["tuned_vs_grid_best_even"]["geomean"] == pytest.approx(1500 / 900, rel=1e-3)
    assert ev["tuned_vs_untuned"]["geomean"] == pytest.approx(1.5) and ev["tuned_vs_untuned"]["rounds"] == 20
    assert ev["aa"]["geomean"] == pytest.approx(math.sqrt(1.01 * 0.99), rel=1e-4)
    assert ev["tuned_t_within_5pct_s_median"] == 6.0
    assert ev["cpu_pressure_pct"] == {"min": 11.0, "median": 20.5, "max": 30.0}
    rows = report.summary_rows({"scenarios": {"s3-20ms": {"window_s": 10.0, "evaluation": ev}}})
    assert rows[0]["scenario"] == "s3-20ms" and rows[0]["tuned / untuned"].startswith("1.500 (1.500-1.500, n=20)")


def test_after_the_warm_up_the_rates_past_it_are_paired_and_the_grid_best_picked_on_them() -> None:
    rounds = []
    for i in range(1, 11):
        # the tuner starts at the untuned rate and ends at grid-b's; grid-a is better over the whole window only
        rates = {"untuned": 1000.0, "untuned-aa": 1000.0, "tuned": 1500.0, "grid-a": 2100.0, "grid-b": 2000.0}
        rd = _round(i, rates)
        warm = {"untuned": 1000.0, "untuned-aa": 1000.0, "tuned": 1960.0, "grid-a": 1900.0, "grid-b": 2000.0}
        for k, v in warm.items():
            rd["arms"][k]["warm_rate"] = v
        rounds.append(rd)
    names = ["untuned", "untuned-aa", "tuned", "grid-a", "grid-b"]
    ev = report.evaluate({"rounds": rounds, "arm_names": names, "warmup_s": 15.0})
    assert ev["grid_best"] == "grid-a" and ev["tuned_vs_grid_best_even"]["geomean"] == pytest.approx(
        1500 / 2100, rel=1e-3
    )
    assert ev["grid_best_warm"] == "grid-b"
    assert ev["tuned_vs_grid_best_even_warm"]["geomean"] == pytest.approx(0.98)
    assert ev["tuned_vs_untuned_warm"]["geomean"] == pytest.approx(1.96)
    row = report.summary_rows({"scenarios": {"x": {"warmup_s": 15.0, "evaluation": ev}}})[0]
    assert row["after the warm-up (s)"] == 15.0 and row["tuned / grid best after it (even)"].startswith("0.980")
    # without a warm-up, no such pairs
    assert "tuned_vs_grid_best_even_warm" not in report.evaluate({"rounds": rounds, "arm_names": names})


def test_the_median_of_the_rounds_is_reported_beside_the_geometric_mean() -> None:
    # one even round far off (a loaded arm) moves the geometric mean, not the median the bar names
    rounds = []
    for i in range(1, 11):
        rd = _round(i, {"untuned": 1000.0, "untuned-aa": 1000.0, "tuned": 1900.0, "grid-a": 2000.0})
        tuned = 1000.0 if i == 2 else 1980.0 if i % 4 == 0 else 1960.0
        for k, v in {"untuned": 1000.0, "untuned-aa": 1000.0, "tuned": tuned, "grid-a": 2000.0}.items():
            rd["arms"][k]["warm_rate"] = v
        rounds.append(rd)
    ev = report.evaluate(
        {"rounds": rounds, "arm_names": ["untuned", "untuned-aa", "tuned", "grid-a"], "warmup_s": 15.0}
    )
    warm = ev["tuned_vs_grid_best_even_warm"]
    assert warm["median"] == pytest.approx(0.98) and warm["geomean"] < 0.9
    row = report.summary_rows({"scenarios": {"x": {"warmup_s": 15.0, "evaluation": ev}}})[0]
    assert row["median of those rounds"] == pytest.approx(0.98)


def test_a_failed_run_is_left_out_of_the_pairs_and_counted() -> None:
    rounds = [_round(i, {"untuned": 100.0, "untuned-aa": 100.0, "tuned": 200.0}) for i in range(1, 5)]
    rounds[1]["arms"]["tuned"] = {"status": "error", "reason": "boom"}
    ev = report.evaluate({"rounds": rounds, "arm_names": ["untuned", "untuned-aa", "tuned"]})
    assert ev["tuned_vs_untuned"]["round_numbers"] == [1, 3, 4] and ev["failed_runs"] == {"tuned": 1}
    assert report.summary_rows({"scenarios": {"x": {"evaluation": ev}}})[0]["runs left out"] == "tuned 1"
    assert ev["grid_best"] is None


def test_final_rate_and_time_to_within_5pct() -> None:
    ramp = [0, 100, 500, 900, 960, 1000, 1000, 1000, 1000, 1000, 40]  # the last second is partial
    assert report.final_rate(ramp) == pytest.approx(1000)
    assert report.time_to_within(ramp) == 6.0  # [900, 960, 1000] averages 953 >= 950, ending at second 6
    assert report.time_to_within(ramp, window=1) == 5.0
    assert report.time_to_within([0, 0, 0]) is None


def test_ranks_combine_into_global_throughput_and_the_stragglers_wait() -> None:
    def rank(rate: float, wait: float, bins: list[int]) -> dict:
        return {"status": "ok", "window_rate": rate, "warm_rate": rate, "wait_per_batch_s": wait,
                "first_batch_s": 0.5, "epochs": 2, "samples_in_window": sum(bins), "per_second_samples": bins,
                "epoch_log": [{"t_s": 0.0, "num_workers": 0}]}  # fmt: skip

    c = report.combine_ranks([rank(100.0, 0.01, [0, 100, 100, 10]), rank(100.0, 0.05, [0, 100, 100])])
    assert c["status"] == "ok" and c["rate"] == 200.0 and c["wait_per_batch_s"] == 0.05
    assert c["per_second_samples"] == [0, 200, 200, 10] and c["num_workers_by_epoch"] == [0]
    assert report.combine_ranks([rank(1, 0, [1]), {"status": "error", "error": "x"}]) == {
        "status": "error",
        "reason": "x",
    }


def test_step_time_changes_mid_run() -> None:
    changes = [[5.0, 0.002], [8.0, 0.05]]
    assert [_autotune_loop._step_at(t, 0.01, changes) for t in (0.0, 4.9, 5.0, 7.0, 9.0)] == [
        0.01, 0.01, 0.002, 0.002, 0.05]  # fmt: skip


def test_grid_holds_the_default_and_keeps_chunk_concurrency_within_prefetch() -> None:
    args = bench_autotune.parse_args(["--grid-prefetch", "2", "8", "--grid-concurrency", "4", "8", "--workers", "0",
                                      "--grid-workers", "0", "2", "--litdata", ""])  # fmt: skip
    plans = bench_autotune.plans_for({"name": "s3-50ms", "kind": "s3"}, args)
    names = [p.name for p in plans]
    assert names[:4] == ["untuned", "untuned-aa", "tuned", "litdata"]
    assert "grid-default-w0" in names and "grid-default-w2" in names
    grid = [p for p in plans if p.name.startswith("grid-p")]
    assert {(p.prefetch, p.concurrency, p.workers) for p in grid} == {(8, 4, 0), (8, 8, 0), (8, 4, 2), (8, 8, 2)}
    assert all(p.env == {"STREAMSCOPE_DOWNLOAD_CONCURRENCY": str(p.concurrency)} for p in grid)
    raw = [p for p in bench_autotune.plans_for({"name": "raw-s3-20ms", "kind": "raw"}, args) if p.prefetch]
    assert len(raw) == 8 and all("STREAMSCOPE_RAW_CONCURRENCY" in p.env for p in raw)
    local = bench_autotune.plans_for({"name": "local", "kind": "local"}, args)
    assert "litdata" not in [p.name for p in local]
    assert [p.workers for p in local if p.name.startswith("grid-")] == args.local_grid_workers


# --- the latency store -----------------------------------------------------------------------------------------


def test_range_header_forms() -> None:
    assert _range("bytes=0-9", 100) == (0, 9) and _range("bytes=90-", 100) == (90, 99)
    assert _range("bytes=-10", 100) == (90, 99) and _range("bytes=95-200", 100) == (95, 99)
    assert _range("bytes=100-", 100) is None and _range("bytes=0-1,5-6", 100) is None


def test_latency_store_serves_what_boto3_and_obstore_ask(tmp_path) -> None:
    import boto3
    import obstore
    from obstore.store import S3Store

    (tmp_path / "sub").mkdir()
    blob = os.urandom(300_000)
    (tmp_path / "a.bin").write_bytes(blob)
    (tmp_path / "sub" / "b c.txt").write_bytes(b"hello")
    with LatencyStore({str(tmp_path): "bk/pre"}, [Profile(latency_ms=30)]) as st:
        o = st.storage_options()
        c = boto3.client("s3", endpoint_url=o["endpoint_url"], aws_access_key_id="k", aws_secret_access_key="s",
                         region_name="us-east-1")  # fmt: skip
        assert c.head_object(Bucket="bk", Key="pre/a.bin")["ContentLength"] == 300_000
        assert c.get_object(Bucket="bk", Key="pre/a.bin", Range="bytes=10-19")["Body"].read() == blob[10:20]
        listed = [x["Key"] for x in c.list_objects_v2(Bucket="bk", Prefix="pre/")["Contents"]]
        assert listed == ["pre/a.bin", "pre/sub/b c.txt"]
        pages = c.get_paginator("list_objects_v2").paginate(Bucket="bk", PaginationConfig={"PageSize": 1})
        assert [k["Key"] for p in pages for k in p.get("Contents", [])] == listed
        with pytest.raises(Exception, match="404|Not Found|NoSuchKey"):
            c.head_object(Bucket="bk", Key="pre/none")
        s = S3Store("bk", endpoint=o["endpoint_url"], access_key_id="k", secret_access_key="s", region="us-east-1",
                    client_options={"allow_http": True})  # fmt: skip
        t = time.perf_counter()
        assert bytes(obstore.get(s, "pre/a.bin").bytes()) == blob
        assert time.perf_counter() - t >= 0.03  # the injected latency is there (a lower bound, never an upper one)
        assert bytes(obstore.get_range(s, "pre/a.bin", start=5, end=105)) == blob[5:105]
        assert [m["path"] for b in obstore.list(s, prefix="pre") for m in b] == listed
        stats = st.stats()
        assert stats["heads"] >= 1 and stats["range_gets"] >= 2 and stats["gets"] >= 1 and stats["lists"] >= 2
        assert stats["not_found"] == 1 and stats["injected_s"] >= 0.03 * stats["requests"] - 1e-6


def test_latency_store_rate_limit_answers_slowdown(tmp_path) -> None:
    import urllib.error
    import urllib.request

    (tmp_path / "x").write_bytes(b"x" * 10)
    with LatencyStore({str(tmp_path): "bk"}, [Profile(rate_limit_rps=1, rate_burst=2)]) as st:
        codes = []
        for _ in range(5):
            try:
                with urllib.request.urlopen(st.url() + "/bk/x", timeout=10) as r:
                    codes.append(r.status)
            except urllib.error.HTTPError as e:
                codes.append(e.code)
                assert b"SlowDown" in e.read()
        assert codes.count(200) >= 2 and 503 in codes and st.stats()["slowdown_503"] == codes.count(503)


# --- one tiny run, as a user runs it ---------------------------------------------------------------------------


@pytest.mark.slow
def test_a_tiny_run_end_to_end(tmp_path) -> None:
    """The script itself on a toy dataset: one S3 scenario through the latency store and the local one, two
    rounds of 2-second windows; the result file is self-describing and carries every arm of every round."""
    # our sources first, then the LitData under test (the 0.2.76 pass's folder, where it is not site-packages)
    path = os.pathsep.join(p for p in (f"{ROOT}/src", str(ROOT), litdata_env().get("PYTHONPATH", "")) if p)
    env = {**os.environ, "STREAMSCOPE_WRITE_FORMAT": "0.2.68", "PYTHONPATH": path}
    data = write_dataset(str(tmp_path / "ds"), 400, image_sample, chunk_size=40)
    out = tmp_path / "result.json"
    # an earlier result: its s3-50ms stays (with the run it came from), its local is re-run
    earlier = tmp_path / "earlier.json"
    old_meta = {"commit": "0123456789abcdef", "dirty": False, "written_at": "2026-12-01T00:00:00Z", "argv": ["x"]}
    old_sc = {"window_s": 30.0, "evaluation": {"rounds": 20}}
    earlier.write_text(json.dumps({"meta": old_meta, "result": {"scenarios": {"s3-50ms": old_sc, "local": old_sc}}}))
    cmd = [sys.executable, os.path.join(ROOT, "benchmarks", "bench_autotune.py"), "--scenarios", "s3-20ms", "local",
           "--rounds", "2", "--window", "2", "--data", data, "--batch", "8", "--step-ms", "2", "--decode-ms", "0.05",
           "--grid-prefetch", "8", "--grid-concurrency", "4", "--grid-workers", "0", "--local-grid-workers", "0",
           "--litdata-scenarios", "s3-20ms", "--litdata", "", "--out", str(out), "--keep", str(earlier)]  # fmt: skip
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    doc = json.loads(out.read_text())
    assert doc["benchmark"] == "bench_autotune" and doc["meta"]["commit"] and doc["meta"]["argv"]
    scs = doc["result"]["scenarios"]
    assert list(scs) == ["s3-50ms", "s3-20ms", "local"]
    assert scs["s3-50ms"]["run"]["commit"] == "0123456789abcdef" and scs["s3-50ms"]["run"]["argv"] == ["x"]
    assert scs["local"]["run"]["commit"] == doc["meta"]["commit"] and scs["local"]["rounds"]  # re-run, not kept
    s3 = scs["s3-20ms"]
    assert set(s3["arm_names"]) == {"untuned", "untuned-aa", "tuned", "litdata", "grid-default-w0", "grid-p8-c4-w0"}
    assert [rd["order"] for rd in s3["rounds"]][1] == s3["rounds"][0]["order"][::-1]
    ok = 0
    for rd in s3["rounds"]:
        for name, arm in rd["arms"].items():
            assert arm["store"][0]["requests"] > 0, name
            if arm["status"] == "no batch in the window":
                # a start (LitData's imports, a worker's first chunks) can outlast a 2-second window on 2 busy cores:
                # the run is counted as such, not hidden, and it did read
                assert arm["samples"] > 0, (name, arm)
                continue
            assert arm["status"] == "ok", (name, arm)
            assert arm["rate"] > 0 and arm["samples_in_window"] > 0
            ok += 1
        assert "load_end" in rd["pressure"]
    assert ok >= sum(len(rd["arms"]) for rd in s3["rounds"]) // 2  # most arms measured a rate
    assert s3["rounds"][0]["arms"]["tuned"]["tuner_values"] is not None  # read through state_dict()
    # an A/A round counts when both of its arms measured a rate (one may have had no batch in its window: above)
    assert 1 <= s3["evaluation"]["aa"]["rounds"] <= 2 and s3["evaluation"]["grid_best"] in s3["arm_names"]
    assert [row["scenario"] for row in doc["summary"]] == ["s3-50ms", "s3-20ms", "local"]
    assert [row["code at"] for row in doc["summary"]] == ["012345678"] + [doc["meta"]["commit"][:9]] * 2


def test_keep_names_a_file_that_is_no_result(tmp_path) -> None:
    # before any scenario runs: a missing file, and one that is not a result, stop with the file named
    bad = tmp_path / "bad.json"
    bad.write_text("[1, 2]")
    for path in (str(tmp_path / "missing.json"), str(bad)):
        with pytest.raises(SystemExit, match=f"--keep {path}: not a bench_autotune result file"):
            bench_autotune.parse_args(["--scenarios", "s3-50ms", "--litdata", "", "--keep", path])
