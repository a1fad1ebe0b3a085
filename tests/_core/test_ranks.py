"""_core/ranks.py: world size and rank from torch.distributed, else the launcher's environment."""

from __future__ import annotations

import sys
import types

import pytest

from streamscope._core.errors import DatasetError
from streamscope._core.ranks import env_int, world_and_rank


@pytest.fixture(autouse=True)
def _no_env(monkeypatch):
    for name in ("WORLD_SIZE", "RANK", "GLOBAL_RANK", "X_A", "X_B"):
        monkeypatch.delenv(name, raising=False)


def _fake_dist(monkeypatch, *, initialized=True, world=8, rank=3, broken=False):
    dist = types.ModuleType("torch.distributed")

    def get_world_size():
        if broken:
            raise RuntimeError("half-initialised process group")
        return world

    dist.is_available = lambda: True  # type: ignore[attr-defined]
    dist.is_initialized = lambda: initialized  # type: ignore[attr-defined]
    dist.get_world_size = get_world_size  # type: ignore[attr-defined]
    dist.get_rank = lambda: rank  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "torch.distributed", dist)


@pytest.mark.parametrize("strict", [True, False])
def test_a_single_process_without_environment(monkeypatch, strict):
    _fake_dist(monkeypatch, initialized=False)
    assert world_and_rank(strict=strict) == (1, 0)


@pytest.mark.parametrize("strict", [True, False])
def test_the_environment_when_no_process_group(monkeypatch, strict):
    _fake_dist(monkeypatch, initialized=False)
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("GLOBAL_RANK", "2")
    assert world_and_rank(strict=strict) == (4, 2)
    monkeypatch.setenv("RANK", "1")  # RANK first
    assert world_and_rank(strict=strict) == (4, 1)


@pytest.mark.parametrize("strict", [True, False])
def test_an_initialised_process_group_wins_over_the_environment(monkeypatch, strict):
    _fake_dist(monkeypatch, world=8, rank=3)
    monkeypatch.setenv("WORLD_SIZE", "4")
    assert world_and_rank(strict=strict) == (8, 3)


@pytest.mark.parametrize("env", [{"WORLD_SIZE": "two"}, {"WORLD_SIZE": "2", "RANK": "2"}, {"WORLD_SIZE": "0"}])
def test_strict_names_a_bad_environment(monkeypatch, env):
    _fake_dist(monkeypatch, initialized=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    with pytest.raises(DatasetError, match="WORLD_SIZE"):
        world_and_rank(strict=True)


def test_lenient_skips_bad_values_and_survives_a_broken_group(monkeypatch):
    _fake_dist(monkeypatch, initialized=False)
    monkeypatch.setenv("WORLD_SIZE", "two")
    monkeypatch.setenv("RANK", "x")
    monkeypatch.setenv("GLOBAL_RANK", "0")
    assert world_and_rank(strict=False) == (1, 0)
    _fake_dist(monkeypatch, broken=True)
    assert world_and_rank(strict=False) == (1, 0)
    with pytest.raises(RuntimeError, match="half-initialised"):
        world_and_rank(strict=True)


def test_env_int_takes_the_first_integer(monkeypatch):
    monkeypatch.setenv("X_A", "")
    monkeypatch.setenv("X_B", "7")
    assert env_int("X_A", "X_B", default=1) == 7
    assert env_int("X_MISSING", default=5) == 5
