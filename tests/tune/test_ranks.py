"""Ranks tune together (``tune/ranks.py``) in real gloo jobs of two rank processes on loopback, in lock step (an
all-reduce per batch): the slow rank (a transform that sleeps) decides, every rank applies its values at the same
published step, through the process group's store only (keys per epoch and rank, not per batch); a rank whose
loader is not tuned still trains."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from typing import Any

import pytest

from tests.engine._data import write_dataset

RANK_SCRIPT = os.path.join(os.path.dirname(__file__), "_rank_job.py")
EPOCHS = 4


@pytest.fixture(scope="module")
def src(tmp_path_factory):
    return write_dataset(str(tmp_path_factory.mktemp("ranks") / "src"), 800, chunk_size=20)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _launch(args: dict[str, Any], world: int = 2, timeout: float = 180) -> list[dict[str, Any]]:
    """Run ``world`` rank processes of one gloo job (the tuner reading every 0.1 s, sharing every 3 readings);
    their JSON reports, by rank."""
    port = _free_port()
    procs = []
    for rank in range(world):
        env = dict(
            os.environ,
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=str(port),
            WORLD_SIZE=str(world),
            RANK=str(rank),
            LOCAL_RANK=str(rank),
            LOCAL_WORLD_SIZE=str(world),
            GLOO_SOCKET_IFNAME="lo",
            STREAMSCOPE_METRICS_INTERVAL="0.1",
            STREAMSCOPE_AUTOTUNE_RANK_EVERY="3",
            STREAMSCOPE_AUTOTUNE_MAX_WORKERS="0",  # num_workers stays: the test is about the live knobs
        )
        cmd = [sys.executable, RANK_SCRIPT, json.dumps(args)]
        procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    outs = []
    try:
        for rank, p in enumerate(procs):
            stdout, stderr = p.communicate(timeout=timeout)
            assert p.returncode == 0, f"rank {rank} failed:\n{stderr[-4000:]}"
            outs.append(json.loads(stdout.strip().splitlines()[-1]))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    assert [o["rank"] for o in outs] == list(range(world))
    return outs


def _applied(out: dict[str, Any]) -> list[tuple[int, int, int, str]]:
    return [(f["applied"], f["step"], f["decider"], f["values"]) for f in out["ranks"] if "applied" in f]


def test_the_slow_rank_decides_and_every_rank_switches_at_the_same_step(src, tmp_path):
    # the slow rank's tuner holds a kept value (as a resumed run's); the fast rank starts from the defaults
    outs = _launch({"src": src, "cache": str(tmp_path), "slow": 1, "epochs": EPOCHS, "kept": {"prefetch_depth": 7}})
    fast, slow = outs
    assert fast["batches"] == slow["batches"] == EPOCHS * 100
    assert fast["before"]["prefetch_depth"] != 7 and slow["before"]["prefetch_depth"] == 7
    # the same plans, taken at the same published step, on both ranks; decided by the slow rank, from its inputs
    plans = _applied(fast)
    assert plans and plans == _applied(slow)
    assert {d for _, _, d, _ in plans} == {1}
    assert fast["paused"] and not slow["paused"]  # one controller moves knobs: the decider's
    assert "prefetch_depth=7" in plans[-1][3]
    for out in outs:
        for f in out["ranks"]:
            if "applied" in f:
                assert f["at_batch"] >= f["step"]
                assert f["decider_wait_per_batch_ms"] > 2.0  # the slow rank's wait: 4 samples x 4 ms sleep
    # both ranks end with the same values: the knob board and the tuner's state
    assert fast["after"]["prefetch_depth"] == slow["after"]["prefetch_depth"] == 7
    assert fast["values"]["prefetch_depth"] == slow["values"]["prefetch_depth"] == 7
    # the side channel: one key per rank and epoch and the plan, never one per batch
    keys = fast["store_keys"]
    assert keys == slow["store_keys"]
    assert "streamscope/tune/plan" in keys and len(keys) <= 2 * (EPOCHS + 1) + 1
    assert len(keys) * 20 < fast["batches"]


def test_a_rank_whose_loader_is_not_tuned_still_trains(src, tmp_path):
    # rank 1 (the slow one) has no tuner: it never writes its inputs; rank 0 decides from its own, nobody waits
    outs = _launch({"src": src, "cache": str(tmp_path), "slow": 1, "epochs": 2, "untuned": [1]})
    tuned, untuned = outs
    assert tuned["batches"] == untuned["batches"] == 200
    assert "ranks" not in untuned
    assert {d for _, _, d, _ in _applied(tuned)} <= {0}
    assert not any(k.endswith("/1") for k in tuned["store_keys"])


# --- the protocol on a real store (a TCPStore of this process), ranks driven by hand --------------------------------


def _store():
    from torch.distributed import TCPStore

    return TCPStore("127.0.0.1", 0, 2, True, wait_for_workers=False, use_libuv=False)


def _reading(t: float, batches: int, wait_s: float, epoch: int = 1):
    from streamscope.tune.signals import Reading

    return Reading(t, batches, wait_s, epoch=epoch)


def _est(w):
    return {"step_ms": round(w.step * 1e3, 3)}


def test_a_rank_that_stops_writing_is_left_out_and_ties_go_to_the_lowest_rank():
    from streamscope.tune.ranks import STALE_ROUNDS, RankShare

    store = _store()
    r0 = RankShare(store, 0, 2, every=1, tick=0.1)
    r1 = RankShare(store, 1, 2, every=1, tick=0.1)
    # two rounds: both wait 5 ms per batch (a tie: rank 0 decides), rank 1 keeps prefetch_depth 9
    for i in range(2):
        r1.on_reading(_reading(i, 100 * i, 0.5 * i), _est, {"prefetch_depth": 9})
        r0.on_reading(_reading(i, 100 * i, 0.5 * i), _est, {})
    r1.read_plan()
    assert r0.plan is not None and r0.plan.decider == 0 and r1.plan == r0.plan
    assert r0.due(r0.plan.step - 1) is None and r0.due(r0.plan.step) is not None
    assert r1.due(r1.plan.step + 5) == r0.plan  # a rank past the step applies at once
    # rank 1 waits three times more per batch: one round is not enough (ranks must not take turns on noise) ...
    r1.on_reading(_reading(2, 200, 2.0), _est, {"prefetch_depth": 9})
    r0.on_reading(_reading(2, 200, 1.0), _est, {})
    assert r0.plan.decider == 0 and r0.published == 1
    # ... SWITCH_ROUNDS in a row are: it decides
    r1.on_reading(_reading(3, 300, 3.5), _est, {"prefetch_depth": 9})
    r0.on_reading(_reading(3, 300, 1.5), _est, {})
    r1.read_plan()
    assert r0.plan.decider == 1 and r0.plan.values == {"prefetch_depth": 9} and r1.plan == r0.plan
    r0.due(10**9), r1.due(10**9)
    # rank 1 dies: its last entry stays the same; after STALE_ROUNDS rounds rank 0 decides alone
    for i in range(4, 4 + STALE_ROUNDS + 1):
        r0.on_reading(_reading(i, 100 * i, 0.1 * i), _est, {"prefetch_depth": 4})
        r0.due(10**9)
    assert r0.plan.decider == 0 and r0.plan.values == {"prefetch_depth": 4}


def test_a_plan_is_not_overwritten_before_its_step():
    from streamscope.tune.ranks import PLAN_KEY, RankShare

    store = _store()
    r0 = RankShare(store, 0, 1, every=1, tick=0.1)
    for i in range(2):
        r0.on_reading(_reading(i, 10 * i, 0.05 * i), _est, {"prefetch_depth": 3})
    first = r0.plan
    assert first is not None and r0.pending == first
    r0.on_reading(_reading(2, 20, 0.1), _est, {"prefetch_depth": 5})  # a new value, the step not reached
    assert r0.plan == first and r0.published == 1
    assert r0.due(first.step) == first
    r0.on_reading(_reading(3, max(first.step, 20) + 10, 0.2), _est, {"prefetch_depth": 5})
    assert r0.plan.seq == 2 and r0.plan.values == {"prefetch_depth": 5} and r0.plan.step > first.step
    assert store.check([PLAN_KEY])


def test_without_a_process_group_there_is_no_sharing():
    from streamscope.api.autotune import rank_share
    from streamscope.tune.ranks import default_store

    assert default_store() is None and rank_share() is None


def test_a_rank_a_round_behind_is_waited_for_not_left_out():
    from streamscope.tune.ranks import RankShare

    store = _store()
    r0 = RankShare(store, 0, 2, every=1, tick=0.1)
    r1 = RankShare(store, 1, 2, every=1, tick=0.1)
    r1.on_reading(_reading(0, 0, 0.0), _est, {"prefetch_depth": 9})  # its first entry: no window yet
    r0.on_reading(_reading(0, 0, 0.0), _est, {})
    r0.on_reading(_reading(1, 100, 0.1), _est, {})  # rank 0 has inputs, rank 1 none yet: no plan
    assert r0.plan is None
    r1.on_reading(_reading(1, 100, 1.0), _est, {"prefetch_depth": 9})
    r0.on_reading(_reading(2, 200, 0.2), _est, {})
    assert r0.plan is not None and r0.plan.decider == 1 and r0.plan.values == {"prefetch_depth": 9}


def test_the_decider_keeps_its_role_while_another_rank_waits_within_noise_of_it():
    from streamscope.tune.ranks import SWITCH, RankShare

    store = _store()
    r0 = RankShare(store, 0, 2, every=1, tick=0.1)
    r1 = RankShare(store, 1, 2, every=1, tick=0.1)
    w0, w1, t = 0.0, 0.0, 0
    decided = []
    # rank 0 waits 10 ms per batch; rank 1 alternates 8 and 12 ms (more than rank 0 every other round, within SWITCH)
    for i in range(12):
        t += 1
        w0 += 1.0
        w1 += 0.8 if i % 2 else 1.2
        r1.on_reading(_reading(t, 100 * t, w1), _est, {"prefetch_depth": 9})
        r0.on_reading(_reading(t, 100 * t, w0), _est, {"prefetch_depth": 4})
        r0.due(10**9)
        if r0.plan is not None:
            decided.append(r0.plan.decider)
    assert len(decided) >= 10 and set(decided[1:]) == {decided[1]} and r0.published <= 2, (decided, r0.published)
    assert 1.2 < SWITCH * 1.0  # the scenario is what it says: within SWITCH of the decider


def test_a_follower_over_its_ram_budget_is_answered_by_the_decider_once_per_plan():
    from streamscope.tune.ranks import RAM_KEY, RankShare

    store = _store()
    r0 = RankShare(store, 0, 2, every=1, tick=0.1)
    r1 = RankShare(store, 1, 2, every=1, tick=0.1)
    r1.ram, r0.ram = 1.3, 0.4  # rank 1's tree is at 130% of its budget
    for i in range(2):
        r1.on_reading(_reading(i, 100 * i, 0.1 * i), _est, {})
        r0.on_reading(_reading(i, 100 * i, 0.5 * i), _est, {"prefetch_depth": 9})  # rank 0 waits more: decides
    assert r0.plan is not None and r0.plan.decider == 0 and store.check([RAM_KEY])
    assert r0.worst_ram() == (0.0, -1)  # the plan is pending: the share was measured before it applied
    p = r0.due(10**9)
    r1.read_plan()
    r1.due(10**9)
    assert p is not None and r1.applied
    # every rank writes again, having applied the plan: rank 1 is still over
    r1.on_reading(_reading(2, 200, 0.2), _est, {})
    r0.on_reading(_reading(2, 200, 1.0), _est, {"prefetch_depth": 9})
    assert r0.worst_ram() == (1.3, 1)
    assert r0.worst_ram() == (0.0, -1)  # answered under this plan: the undo travels in the next plan
    # within budgets: nothing to answer
    r1.ram = 0.8
    r1.on_reading(_reading(3, 300, 0.3), _est, {})
    r0.on_reading(_reading(3, 300, 1.5), _est, {"prefetch_depth": 4})
    r0.due(10**9)
    r1.read_plan()
    r1.due(10**9)
    r1.on_reading(_reading(4, 400, 0.4), _est, {})
    r0.on_reading(_reading(4, 400, 2.0), _est, {"prefetch_depth": 4})
    assert r0.worst_ram() == (0.0, -1)
