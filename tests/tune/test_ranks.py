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
    assert "prefetch_depth=7" in plans[-1][3]
    for out in outs:
        for f in out["ranks"]:
            if "applied" in f:
                assert f["at_batch"] >= f["step"]
                assert f["decider_wait_per_batch_ms"] > 2.0  # the slow rank's wait: 4 samples x 2 ms sleep
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
