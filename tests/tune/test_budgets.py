"""The tuner's budgets: cgroup limits (v1 and v2) read from a fake hierarchy, the knobs' bad values."""

from __future__ import annotations

import os

import pytest

from streamscope._core import config
from streamscope._core.errors import ConfigError
from streamscope.tune import budgets


def _write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


def test_cgroup_v2_limit_is_the_tightest_on_the_way_to_the_root(tmp_path):
    root = str(tmp_path)
    _write(f"{root}/kube/pod/memory.max", "max\n")
    _write(f"{root}/kube/memory.max", "2147483648\n")
    _write(f"{root}/memory.max", "4294967296\n")
    _write(f"{root}/kube/pod/cpu.max", "150000 100000\n")
    assert budgets.cgroup_memory_limit(root, "0::/kube/pod\n") == 2 << 30
    assert budgets.cgroup_cpu_limit(root, "0::/kube/pod\n") == 1.5


def test_cgroup_v1_limit_and_no_limit(tmp_path):
    root = str(tmp_path)
    _write(f"{root}/memory/job/memory.limit_in_bytes", str(2**63 - 4096))  # v1's "no limit"
    _write(f"{root}/cpu,cpuacct/job/cpu.cfs_quota_us", "-1")
    _write(f"{root}/cpu,cpuacct/job/cpu.cfs_period_us", "100000")
    text = "4:memory:/job\n3:cpu,cpuacct:/job\n"
    assert budgets.cgroup_memory_limit(root, text) is None
    assert budgets.cgroup_cpu_limit(root, text) is None
    _write(f"{root}/memory/job/memory.limit_in_bytes", "1073741824")
    _write(f"{root}/cpu,cpuacct/job/cpu.cfs_quota_us", "200000")
    assert budgets.cgroup_memory_limit(root, text) == 1 << 30
    assert budgets.cgroup_cpu_limit(root, text) == 2.0


def test_resolve_takes_the_explicit_budget_and_names_its_variable(monkeypatch):
    monkeypatch.setenv("STREAMSCOPE_AUTOTUNE_RAM_BUDGET", "3GB")
    monkeypatch.setenv("STREAMSCOPE_AUTOTUNE_MAX_WORKERS", "5")
    b = budgets.resolve()
    assert b.ram == 3 * 10**9 and "STREAMSCOPE_AUTOTUNE_RAM_BUDGET" in b.ram_source and b.max_workers == 5


def test_resolve_default_is_a_fraction_of_the_limit_per_local_rank(monkeypatch):
    monkeypatch.setattr(budgets, "memory_limit", lambda: (8 * 10**9, "cgroup memory limit"))
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    monkeypatch.setenv("STREAMSCOPE_AUTOTUNE_RAM_FRACTION", "0.5")
    b = budgets.resolve()
    assert b.ram == 2 * 10**9 and "cgroup memory limit" in b.ram_source and "2 ranks" in b.ram_source


@pytest.mark.parametrize(
    "var,value",
    [
        ("STREAMSCOPE_AUTOTUNE_RAM_BUDGET", "lots"),
        ("STREAMSCOPE_AUTOTUNE_RAM_FRACTION", "1.5"),
        ("STREAMSCOPE_AUTOTUNE_MAX_WORKERS", "two"),
        ("STREAMSCOPE_AUTOTUNE", "maybe"),
        ("STREAMSCOPE_PREFETCH_DEPTH", "-3"),
    ],
)
def test_bad_values_from_the_environment_name_the_variable(monkeypatch, var, value):
    monkeypatch.setenv(var, value)
    name = next(k.name for k in config.KNOBS.values() if var in k.env)
    with pytest.raises(ConfigError, match=var):
        config.get(name)
