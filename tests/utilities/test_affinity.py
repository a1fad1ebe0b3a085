"""NUMA affinity plans (LitData 0.2.76's get_numa_affinity / get_gpu_affinity / NumaAffinity)."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

from streamscope import NumaAffinity, get_gpu_affinity, get_numa_affinity
from streamscope.utilities import affinity

pytestmark = pytest.mark.skipif(not Path("/sys/devices/system/node/node0").is_dir(), reason="no NUMA topology")


@pytest.mark.parametrize(("text", "ids"), [("0-3,8,10-11\n", {0, 1, 2, 3, 8, 10, 11}), ("5", {5}), ("", set())])
def test_id_lists(text: str, ids: set[int]) -> None:
    assert affinity._id_list(text) == ids


@pytest.mark.parametrize("bad", ["3-1", "a", "1-2-3", "-1"])
def test_bad_id_lists_are_refused(bad: str) -> None:
    with pytest.raises(ValueError, match="CPU/node list"):
        affinity._id_list(bad)


def test_plan_holds_the_nodes_allowed_cpus_and_pickles() -> None:
    plan = get_numa_affinity(0, bind_memory=False)
    node_cpus = affinity._id_list(Path("/sys/devices/system/node/node0/cpulist").read_text())
    assert plan == NumaAffinity(0, tuple(sorted(node_cpus & os.sched_getaffinity(0))), False)
    assert pickle.loads(pickle.dumps(plan)) == plan


_BIND = """
import os, sys
from streamscope import get_numa_affinity
plan = get_numa_affinity(0, bind_memory=sys.argv[1] == "1")
plan(0)  # as a worker_init_fn
assert os.sched_getaffinity(0) == set(plan.cpus), os.sched_getaffinity(0)
print("bound", len(plan.cpus))
"""


@pytest.mark.parametrize("memory", [False, True])
def test_bind_applies_the_cpu_mask_and_memory_policy(memory: bool) -> None:
    if memory:
        try:
            affinity._Policy()
        except RuntimeError:
            pytest.skip("libnuma.so.1 is not installed")
    out = subprocess.run(
        [sys.executable, "-c", _BIND, "1" if memory else "0"], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.startswith("bound ")


def test_cpus_of_another_node_are_refused_and_nothing_changes() -> None:
    before = os.sched_getaffinity(0)
    with pytest.raises(ValueError, match="not on NUMA node 0"):
        NumaAffinity(0, (10_000,), bind_memory=False).bind()
    with pytest.raises(ValueError, match="non-empty"):
        NumaAffinity(0, (), bind_memory=False).bind()
    assert os.sched_getaffinity(0) == before


def test_unknown_node_and_missing_gpu_are_clear_errors() -> None:
    with pytest.raises(RuntimeError, match="NUMA node 4096"):
        get_numa_affinity(4096)
    with pytest.raises(ValueError, match="numa_node"):
        get_numa_affinity(-1)
    import torch

    if not torch.cuda.is_available():
        with pytest.raises(RuntimeError, match="CUDA"):
            get_gpu_affinity(0)
