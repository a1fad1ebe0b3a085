"""The tuner's state machine on the simulator (tests/tune/sim/world.py): no threads, no sleeps."""

from __future__ import annotations

import pytest

from streamscope._core.errors import TuneBudgetError
from streamscope.tune import Resources
from tests.tune.sim.world import World, make, run_tuned


def decisions(run):
    return [f for n, f in run.events if n == "decision"]


def test_a_latency_bound_loop_gets_the_downloads_littles_law_asks_for_verified_by_a_paired_check():
    w = World(step=0.005, w0=0.1, nb=3000)
    r = run_tuned(w, 1, history=True)
    kept = [f for f in decisions(r) if f["outcome"] == "kept"]
    assert kept and kept[0]["knob"] == "download_concurrency" and kept[0]["new"] >= 4 * kept[0]["old"]
    first = kept[0]
    # the model's inputs and prediction, and the paired check's verdict, are in the event
    assert first["check"] == "A-B-B-A windows" and first["blocks"] >= 2 and first["gain_lo"] > 0.01
    assert first["predicted_gain"] > 0.5 and first["w0_ms"] > 50 and "demand" in first["reason"]
    assert first["wait_after_ms"] < first["wait_before_ms"]
    assert r.controller.good["download_concurrency"] == r.history[-1][1]


def test_a_decode_bound_loop_without_workers_gets_workers_at_an_epoch_start_capped_by_the_cores():
    w = World(step=0.005, u=0.05, cores=3, dpb=0.0, workers=0, nb=500, seconds=200.0)
    r = run_tuned(w, 1, history=True)
    assert r.history[-1][3] == 3  # 11 would keep up; the cores allow 3
    d = [f for f in decisions(r) if f["knob"] == "num_workers"]
    assert d[0]["cause"] == "cpu" and "decod" in d[0]["reason"] and d[0]["outcome"] == "kept"
    assert d[0]["check"].endswith("epochs") and d[0]["cpu_ms_per_batch"] == pytest.approx(50, rel=0.03)


def test_a_noisy_loop_that_no_knob_helps_keeps_the_untuned_values():
    w = World(step=0.005, noise=0.3, drift=0.2, w0=0.02, sigma_w=0.0, x_bw=200.0, nb=1500, seconds=600.0)
    for seed in range(5):
        r = run_tuned(w, seed, history=True)
        assert all(f["outcome"] == "rolled back" for f in decisions(r))
        assert not r.controller.good  # nothing kept
        r.controller.abort("the run ended")  # a check under way goes back: the untuned values
        b = r.controller.target.board()
        assert (b.value("download_concurrency"), b.value("prefetch_depth")) == (4, 2)
        # candidates ran at most what the probing cap allows (none of them was worse here: no loss at all)
        assert r.controller._loss <= 0.02 * w.seconds + 3


def test_over_the_ram_budget_the_newest_memory_move_is_undone():
    w = World(step=0.005, u=0.05, cores=4, dpb=0.0, workers=0, nb=500, seconds=200.0)
    r = run_tuned(w, 1)
    c = r.controller
    target = c.target
    assert target.workers() == 4
    c.budgets = type(c.budgets)(1, "test", 4, 4)  # the budget shrinks below usage
    c.step(1000.0, c._last, Resources(10**9, 10**8, 4))
    last = decisions(r)[-1]
    assert last["knob"] == "num_workers" and last["outcome"] == "rolled back" and "RAM budget" in last["reason"]
    assert target.workers() == 0


def test_budgets_too_small_to_run_fail_before_the_first_batch():
    with pytest.raises(TuneBudgetError, match="RAM budget.*STREAMSCOPE_AUTOTUNE_RAM_BUDGET"):
        make(World(), ram=1000)
    with pytest.raises(TuneBudgetError, match="max_cache_size=1,000,000 bytes.*two chunks"):
        make(World(), base={"max_cache_size": (1_000_000, True, "max_cache_size"), "prefetch_depth": (2, False, "x")})


def test_a_cache_budget_below_the_prefetch_lowers_the_depth_at_the_start():
    base = {"max_cache_size": (20_000_000, True, "max_cache_size"), "prefetch_depth": (64, False, "x")}
    target, _c, events = make(World(workers=2), base=base)
    depth = int(target.board_.value("prefetch_depth"))
    assert depth == int(20_000_000 * 0.9) // (1_000_000 * 2) - 2
    assert ("budget", {"knob": "prefetch_depth", "old": 64, "new": depth, "reason": "cache"}) in events


def test_restore_applies_saved_values_except_pinned_ones():
    base = {"download_concurrency": (3, True, "download_concurrency"), "prefetch_depth": (2, False, "x")}
    target, c, _events = make(World(workers=1), base=base)
    done = c.restore({"download_concurrency": 16, "prefetch_depth": 40, "num_workers": 3})
    assert done == {"prefetch_depth": 40, "num_workers": 3}
    assert target.board_.value("download_concurrency") == 3 and target.board_.value("prefetch_depth") == 40
    assert target.workers() == 3


def test_a_regime_change_reopens_the_search_and_forgets_what_was_rejected():
    w = World(step=0.005, noise=0.05, w0=0.01, nb=3000, jump_t=120.0, jump=10.0, seconds=240.0)
    r = run_tuned(w, 2, history=True)
    resumed = [f["reason"] for n, f in r.events if n == "resumed"]
    assert any("a new regime" in x and "latency" in x for x in resumed)
    kept_after = [f for f in decisions(r) if f["outcome"] == "kept" and f["latency_ms"] > 50]
    assert kept_after, "no move kept in the new regime"


def test_another_ranks_memory_over_its_budget_undoes_the_newest_memory_move_too():
    """Ranks tuning together: the deciding rank's controller answers for a follower's RAM (tune/ranks.py)."""
    w = World(step=0.005, u=0.05, cores=4, dpb=0.0, workers=0, nb=500, seconds=200.0)
    r = run_tuned(w, 1)
    c = r.controller
    assert c.target.workers() == 4
    # this rank's own memory is fine; rank 1's is at 130% of its budget (the runner scales it to this budget)
    c.step(1000.0, c._last, Resources(int(1.3 * c.budgets.ram), 10**8, 4, rank=1))
    last = decisions(r)[-1]
    assert last["knob"] == "num_workers" and last["outcome"] == "rolled back"
    assert "rank 1's resident memory at 130% of its RAM budget" in last["reason"]
    assert c.target.workers() == 0
