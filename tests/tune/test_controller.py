"""The tuner's state machine on a simulated loader (tests/tune/_sim.py): no threads, no sleeps."""

from __future__ import annotations

import pytest

from streamscope._core.errors import TuneBudgetError
from streamscope.tune import Resources
from tests.tune._sim import Pipeline, make_sim


def decisions(sim):
    return [f for n, f in sim.events if n == "decision"]


def test_download_bound_loop_gets_more_downloads_at_once_and_waits_far_less():
    sim = make_sim(Pipeline(latency=0.1), workers=2)
    before = sim.wait_now()
    sim.run(120)
    conc, depth, workers = sim.knobs()
    assert sim.wait_now() < before / 10
    assert conc > 4 and depth > 2 and workers == 2
    kept = [f for f in decisions(sim) if f["outcome"] == "kept"]
    assert kept and all(f["cause"] == "download" and "download" in f["reason"] for f in kept)
    for f in kept:  # every decision says what it saw before and after
        assert f["wait_after_ms"] < f["wait_before_ms"] and f["old"] < f["new"]
    assert sim.controller.phase == "stable"
    assert sim.controller.good["download_concurrency"] == conc


def test_decode_bound_loop_gets_more_workers_between_epochs_capped_by_the_cores():
    sim = make_sim(Pipeline(latency=0.001, decode=0.05), workers=0, cpus=3, epoch_s=10.0)
    sim.run(100)
    assert sim.knobs()[2] == 3  # 11 would keep up; the cores allow 3
    moves = [h for a, h in zip(sim.history, sim.history[1:]) if h["workers"] != a["workers"]]
    assert moves and all(abs(h["t"] % 10.0) < 1e-6 for h in moves)  # workers change only at an epoch's start
    d = [f for f in decisions(sim) if f["knob"] == "num_workers"]
    assert d[0]["cause"] == "cpu" and "decod" in d[0]["reason"] and d[0]["outcome"] == "kept"


def test_a_pinned_knob_never_moves():
    sim = make_sim(
        Pipeline(latency=0.1),
        workers=1,
        base={"download_concurrency": (3, True, "download_concurrency"), "prefetch_depth": (1, False, "x")},
    )
    sim.run(120)
    assert {h["conc"] for h in sim.history} == {3}
    assert sim.knobs()[1] > 1  # the depth, not pinned, moved instead
    assert all(f["knob"] != "download_concurrency" for f in decisions(sim))


def test_a_noisy_metric_no_knob_changes_settles_without_flapping():
    sim = make_sim(Pipeline(flat=0.01, noise=0.3), workers=0, cpus=4)
    sim.run(600)
    d = decisions(sim)
    assert len(d) <= 4 and all(f["outcome"] == "rolled back" for f in d)
    assert sim.knobs() == (4, 2, 0)  # back where it started
    late = sim.history[len(sim.history) // 2 :]
    assert len({(h["conc"], h["depth"], h["workers"]) for h in late}) == 1  # the second half moves nothing
    assert sim.controller.phase == "stable"


def test_a_noisy_download_wait_no_knob_changes_settles_and_never_goes_back():
    """Live-knob moves are kept on their measured gain when the noise leaves it unclear: a few may be kept by
    chance, but values only grow, each knob moves a bounded number of times, and the search stops."""
    sim = make_sim(Pipeline(flat=0.01, noise=0.3, flat_stage="download"), workers=2, cpus=2)
    sim.run(900)
    d = decisions(sim)
    assert len({f["decision"] for f in d}) <= 10
    kept: dict[str, list[int]] = {}
    for f in d:
        if f["outcome"] == "kept":
            kept.setdefault(f["knob"], []).append(f["new"])
    assert all(v == sorted(v) and len(v) <= 3 for v in kept.values()), kept  # kept values only grow
    late = sim.history[len(sim.history) // 2 :]
    assert len({(h["conc"], h["depth"], h["workers"]) for h in late}) == 1  # the second half moves nothing
    assert sim.controller.phase == "stable"


def test_stable_tuner_backs_off_to_the_longest_pause():
    sim = make_sim(Pipeline(latency=0.001, step=0.01), workers=1)
    sim.controller.period_max = 16.0
    wakes = []
    for _ in range(120):
        sim.run(1)
        wakes.append(sim.controller.next_wake())
    gaps = sorted({round(b - a) for a, b in zip(wakes, wakes[1:]) if b != a})
    assert not decisions(sim) and sim.controller.phase == "stable"
    assert max(gaps) == 16 and 2 in gaps and 4 in gaps  # fast first, doubling to the cap


def test_workers_stay_within_the_ram_budget():
    pipe = Pipeline(latency=0.001, decode=0.05, main=300_000_000, per_worker=200_000_000)
    ram = int((300_000_000 + 2 * 200_000_000) / 0.9) + 1  # room for two workers at 90%
    sim = make_sim(pipe, workers=1, cpus=8, ram=ram)
    sim.run(100)
    assert sim.knobs()[2] == 2


def test_over_the_ram_budget_the_newest_memory_move_is_undone():
    sim = make_sim(Pipeline(latency=0.001, decode=0.05), workers=0, cpus=4)
    sim.run(60)
    assert sim.knobs()[2] == 4
    sim.controller.budgets = type(sim.controller.budgets)(1, "test", 4, 4)  # the budget shrinks below usage
    sim.controller.step(sim.t + 1, sim.reading(), Resources(10**9, 10**8, 4))
    last = decisions(sim)[-1]
    assert last["knob"] == "num_workers" and last["outcome"] == "rolled back" and "RAM budget" in last["reason"]
    assert sim.target.workers() == 0


def test_budgets_too_small_to_run_fail_before_the_first_batch():
    with pytest.raises(TuneBudgetError, match="RAM budget.*STREAMSCOPE_AUTOTUNE_RAM_BUDGET"):
        make_sim(Pipeline(), ram=1000)
    with pytest.raises(TuneBudgetError, match="max_cache_size=1,000,000 bytes.*two chunks"):
        make_sim(
            Pipeline(),
            base={"max_cache_size": (1_000_000, True, "max_cache_size"), "prefetch_depth": (2, False, "x")},
        )


def test_a_cache_budget_below_the_prefetch_lowers_the_depth_at_the_start():
    sim = make_sim(
        Pipeline(),
        workers=2,
        base={"max_cache_size": (20_000_000, True, "max_cache_size"), "prefetch_depth": (64, False, "x")},
    )
    depth = sim.knobs()[1]
    assert depth == int(20_000_000 * 0.9) // (1_000_000 * 2) - 2
    assert ("budget", {"knob": "prefetch_depth", "old": 64, "new": depth, "reason": "cache"}) in sim.events


def test_restore_applies_saved_values_except_pinned_ones():
    sim = make_sim(
        Pipeline(),
        workers=1,
        base={"download_concurrency": (3, True, "download_concurrency"), "prefetch_depth": (2, False, "x")},
    )
    done = sim.controller.restore({"download_concurrency": 16, "prefetch_depth": 40, "num_workers": 3})
    assert done == {"prefetch_depth": 40, "num_workers": 3}
    assert sim.knobs()[:2] == (3, 40) and sim.target.workers() == 3


def test_rolling_back_more_workers_keeps_the_shallower_prefetch_until_their_epoch_ends():
    """More readers share the cache budget: the move lowers the depth at once; its rollback restores the depth
    only once the next epoch runs with fewer workers (the move's workers read until their epoch ends)."""
    sim = make_sim(
        Pipeline(latency=0.001, decode=0.05),
        workers=1,
        cpus=4,
        base={"max_cache_size": (30_000_000, True, "max_cache_size"), "prefetch_depth": (20, False, "x")},
    )
    c = sim.controller
    from streamscope.tune.policy import Move

    move = Move((("num_workers", 1, 3), ("prefetch_depth", 20, 7)), "test", "cpu")
    c._apply(sim.t, move, 0.05)
    assert sim.knobs()[1] == 7 and sim.target.workers() == 3
    sim.target.new_epoch()  # the trial's epoch: three workers
    c._trial = None
    c._roll_back(sim.t, c.decisions[-1], "rolled back")
    assert sim.target.workers() == 1 and sim.knobs() == (4, 7, 3)  # depth stays while the three read
    c.step(sim.t + 1, sim.reading(), sim.resources())
    assert sim.knobs()[1] == 7
    sim.target.new_epoch()
    c.step(sim.t + 2, sim.reading(), sim.resources())
    assert sim.knobs() == (4, 20, 1)
