"""The tuner's state machine on the simulator (tests/tune/sim/world.py): no threads, no sleeps."""

from __future__ import annotations

import math

import pytest

from streamscope._core.errors import TuneBudgetError
from streamscope.tune import Resources
from streamscope.tune.model import Estimates
from tests.tune.sim.world import World, make, replace, run_tuned


def decisions(run):
    return [f for n, f in run.events if n == "decision"]


def test_a_latency_bound_loop_gets_the_downloads_littles_law_asks_for_verified_by_a_paired_check():
    w = World(step=0.005, w0=0.1, nb=3000)
    r = run_tuned(w, 1, history=True)
    kept = [f for f in decisions(r) if f["outcome"] == "kept"]
    assert kept and kept[0]["knob"] == "download_concurrency" and kept[0]["new"] >= 4 * kept[0]["old"]
    first = kept[0]
    # the model's inputs and prediction, and the paired check's verdict, are in the event
    assert first["check"] == "A-B-B-A windows" and first["blocks"] >= 1 and first["gain_lo"] > 0.01
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


def _waiting(**kw: float) -> Estimates:
    """A loop waiting 30% of its time, one download a batch, a 5 ms step, a store at its unloaded 40 ms."""
    e = dict(step=0.005, wait=0.002, period=0.007, wait_share=0.3, latency=0.04, w0=0.04, rate=140.0)
    e.update(max_rate=140.0, in_flight=5.6, per_batch=1.0)
    e.update(kw)
    return Estimates(**e)  # type: ignore[arg-type]


def test_fewer_downloads_are_tried_only_where_the_store_shows_a_queue():
    # 32 in flight where the steady demand asks for 10: at the unloaded latency, fewer would gain nothing
    _t, c, _ev = make(World(conc=32, depth=48))
    assert c.propose.candidate(_waiting(), Resources()) is None
    # the same plan with the latency 3x W0 and more in flight than the BDP: the store queues, the move down is tried
    found = c.propose.candidate(_waiting(latency=0.12, in_flight=16.8), Resources())
    assert found is not None and found[0].cause == "saturated"
    assert dict((k, new) for k, _old, new in found[0].changes)["download_concurrency"] < 32


def test_a_wait_on_downloads_that_the_demand_does_not_explain_is_probed_upwards():
    # 8 in flight per reader (2 workers) meet the steady demand (10 with the margin: no gain predicted), yet the wait
    # split puts 90% of the wait on downloads (an epoch's start refilling the prefetch): a probe of 1.5x, for the
    # check to decide
    _t, c, _ev = make(World(conc=8, depth=12, workers=2))
    found = c.propose.candidate(_waiting(download_share=0.9), Resources())
    assert found is not None
    move, predicted = found
    assert move.cause == "download" and "probe 24 in flight" in move.reason and predicted > 0.03
    assert dict((k, new) for k, _old, new in move.changes)["download_concurrency"] == 12
    # without the split's evidence, or with a store pushing back, no probe
    assert c.propose.candidate(_waiting(download_share=0.0), Resources()) is None
    assert c.propose.probe(_waiting(download_share=0.9, retries=1), *_probe_args(c)) is None
    # a rejected probe bounds the next: half-way (geometrically) towards it
    c.propose.search.bound(16, 24, False)
    c.propose.rejected.add(move.key)
    nxt = c.propose.candidate(_waiting(download_share=0.9), Resources())
    assert nxt is not None and dict((k, new) for k, _o, new in nxt[0].changes)["download_concurrency"] == 10


def test_no_probe_goes_past_the_models_ceiling():
    # a 100 ms store, 200 downloads/s of demand: the ceiling is Little's law with its margin plus SLACK_S of demand,
    # 45 in flight (23 a reader of 2). From 16 a reader the probe asks for 23, not 1.5x (24); from 23, for nothing
    e = _waiting(download_share=0.9, w0=0.1, latency=0.1)
    _t, c, _ev = make(World(conc=16, depth=24, workers=2))
    assert c.model.ceiling(e, 2) == 23
    found = c.propose.candidate(e, Resources())
    assert found is not None and "probe 46 in flight" in found[0].reason, found
    assert dict((k, new) for k, _old, new in found[0].changes)["download_concurrency"] == 23
    _t, c, _ev = make(World(conc=23, depth=35, workers=2))
    assert c.propose.candidate(e, Resources()) is None
    # at a 40 ms store the ceiling (15 a reader) leaves the 1.5x probe from 8 a reader as it was
    assert c.model.ceiling(_waiting(), 2) == 15


def test_no_more_downloads_for_a_wait_at_the_epoch_starts():
    # the loop waits 30% of its time, but outside the epoch starts only 7% (a residual no download knob shortens):
    # neither the probe nor the model's plan asks for more in flight; at 12% outside the starts, both may
    from streamscope.tune.propose import UP_WAIT

    _t, c, _ev = make(World(conc=8, depth=12, workers=2))
    assert c.propose.candidate(_waiting(download_share=0.9, steady_share=0.07), Resources()) is None
    assert c.propose.candidate(_waiting(download_share=0.9, steady_share=UP_WAIT + 0.02), Resources()) is not None
    _t, c, _ev = make(World(conc=2, depth=3, workers=2))  # 4 in flight where the demand asks for 10
    assert c.propose.candidate(_waiting(steady_share=0.07), Resources()) is None
    found = c.propose.candidate(_waiting(steady_share=0.3), Resources())
    assert found is not None and found[0].cause == "download"


def test_estimates_without_epoch_starts_set_apart_wait_as_a_whole():
    # built without the steady fields (no start set apart), the estimates' steady wait is the whole wait, not 0
    e = Estimates(period=0.01, wait_share=0.3)
    assert (e.steady_period, e.steady_share) == (0.01, 0.3)
    assert Estimates(period=0.01, wait_share=0.3, steady_share=0.0).steady_share == 0.0


def test_the_plan_scales_littles_law_by_the_slots_kept_busy():
    # 2 workers allowed 4 in flight each (8 slots), 2.4 under way on average while the loop waits on downloads
    # (occupancy 0.3): the plan asks for 1 / 0.3 of what full slots would need; without the split's evidence it
    # trusts Little's law as it is
    from streamscope.tune.model import Model

    # (a 20 ms store, 200 downloads/s: 5 in flight at full slots, 16.7 at occupancy 0.3, within SLACK_S of demand)
    e = _waiting(in_flight=2.4, slots=8.0, download_share=0.9, w0=0.02, latency=0.02)
    assert e.occupancy == pytest.approx(0.3)
    full = Model().plan(_waiting(w0=0.02, latency=0.02), 2, 2, 2, 4)
    scaled = Model().plan(e, 2, 2, 2, 4)
    assert full.in_flight is not None and scaled.in_flight is not None
    assert scaled.in_flight * 2 >= full.in_flight * 2 / 0.3 - 2 and "occupancy 0.30" in scaled.why
    assert "beyond it" not in scaled.why
    assert _waiting(in_flight=2.4, slots=8.0, download_share=0.0).occupancy == 1.0
    assert _waiting(in_flight=0.1, slots=8.0, download_share=0.9).occupancy == 0.25  # OCCUPANCY_MIN


def test_the_occupancy_adds_at_most_a_slack_of_demand_to_littles_law():
    # a 100 ms store, 200 downloads/s of demand: Little's law with the margin asks for 25 in flight, the occupancy
    # of 0.3 for 84; the slots beyond Little's law hold at most SLACK_S of demand (20 more: 45 in all, 23 a reader),
    # since every slot begins at once at an epoch's start and delays the first chunk
    from streamscope.tune.model import MARGIN, SLACK_S, Model

    e = _waiting(in_flight=2.4, slots=8.0, download_share=0.9, w0=0.1, latency=0.1)
    plan = Model().plan(e, 2, 2, 2, 4)
    want = 200 * (0.1 * MARGIN + SLACK_S)
    assert plan.in_flight == math.ceil(want / 2) == 23
    assert "at most 100 ms of demand beyond it" in plan.why
    # at full slots the cap does not bind: Little's law with the margin, 13 a reader
    assert Model().plan(_waiting(w0=0.1, latency=0.1), 2, 2, 2, 4).in_flight == 13


def _probe_args(c):
    values, pinned = c.propose.knobs()
    plan = c.model.plan(_waiting(), 2, 2, 2, 8)
    return plan, values, pinned, 2, 2, 8, Resources()


def test_an_epochs_exact_record_replaces_what_its_windows_summed():
    r = run_tuned(World(step=0.005, w0=0.04, nb=300, seconds=60.0), 3)
    book = r.controller._book
    target = r.controller.target
    whole = [e for e in book.epochs if target.epoch_record(e) is not None and e > 1]
    assert len(whole) >= 3
    for e in whole:
        seconds, batches = target.epoch_record(e)
        assert book.seconds(e) == seconds and book.period(e) == pytest.approx(seconds / batches)
    # a record the target does not have leaves the windows' sum
    book.epochs[999] = [2.0, 100.0, 0.0, 0.0]
    book.exact(999, 0.0, 0)
    assert book.period(999) == 0.02 and not book.since_start(999)


#: S3 +100 ms, a 10 ms step, epochs of ~2-4 s (1 s windows): as the benchmark's rig (bench_autotune.py, 20,000
#: samples of 1 MB chunks a 2.2 s epoch at the grid's best), each epoch starting with 0.5 s without batches
SHORT = World(step=0.01, w0=0.1, dpb=1.6, nb=156, start_s=0.3, start_per_worker=0.1, cores=2, seconds=300.0)


def test_with_epochs_of_a_few_windows_a_live_trial_measures_whole_epochs():
    # an arm of one window holds an epoch's start or not by chance. Measured by windows, the first check of seeds
    # 0, 1 and 3 ran 5 blocks to 95% intervals of -39% .. +74% and -71% .. +42% and rolled back (8,000 batches in
    # the 300 s against 15,100-16,100 now); over whole epochs every first move is kept after one epoch of each (the
    # difference beyond three standard deviations of consecutive epochs), its lower bound above 15%
    for seed in range(5):
        first = decisions(run_tuned(SHORT, seed))[0]
        assert first["check"] == "A-B epochs" and first["outcome"] == "kept", first
        assert first["gain_lo"] > 0.15 and first["blocks"] == 1, first
    # long epochs keep windows (an epoch's start left out of them)
    long = run_tuned(replace(SHORT, nb=3000), 0)
    assert decisions(long)[0]["check"] == "A-B-B-A windows"


@pytest.mark.parametrize("early", [True, False])
def test_no_arm_over_epochs_measures_an_epoch_in_which_the_knobs_switched(monkeypatch, early):
    # early=False: the one-epoch-each decision never fires, so whole A-B-B-A blocks run
    from streamscope.tune.controller import Controller
    from streamscope.tune.epochs import EpochBook

    if not early:
        monkeypatch.setattr(EpochBook, "a_b_periods", lambda self, pa, pb: None)

    switched: list[int] = []
    measured: list[range] = []
    set_, whole = Controller._set, Controller._whole_epochs

    def spy_set(self, values, reason):
        switched.append(self.target.epoch())
        set_(self, values, reason)

    def spy_whole(self, arm, w):
        done = whole(self, arm, w)
        if done:
            measured.append(range(arm.epoch, self._trial.next_epoch))
        return done

    monkeypatch.setattr(Controller, "_set", spy_set)
    monkeypatch.setattr(Controller, "_whole_epochs", spy_whole)
    for seed in range(3):
        switched.clear()
        measured.clear()
        checks = {f["check"] for f in decisions(run_tuned(SHORT, seed))}
        assert checks == ({"A-B epochs"} if early else {"A-B-B-A epochs"}), checks
        assert len(measured) >= (2 if early else 4) and switched
        assert all(len(m) >= 1 for m in measured)
        assert not [(e, m) for e in switched for m in measured if e in m]
        # consecutive arms of one block never measure the same epoch twice
        assert all(a.stop <= b.start for a, b in zip(measured, measured[1:]))
