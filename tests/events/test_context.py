"""Rank and worker fields of a process: computed in place, or taken from the parent a DataLoader worker forked from."""

from __future__ import annotations

import os
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, IterableDataset

from streamscope import events as ev
from streamscope.events import context
from tests.support.tracing import clean_tracer, forked_result  # noqa: F401

pytestmark = pytest.mark.usefixtures("clean_tracer")


class _Fields(IterableDataset):
    """Yields the worker's rank/worker fields after the worker's environment says another world size."""

    def __iter__(self) -> Any:
        os.environ["WORLD_SIZE"], os.environ["RANK"] = "8", "3"
        yield context.env_fields()


def _worker_fields() -> dict[str, Any]:
    loader = DataLoader(_Fields(), batch_size=None, num_workers=1, multiprocessing_context="fork")
    (got,) = list(loader)
    return {k: int(v) for k, v in got.items()}


def _own_fields() -> dict[str, int]:
    os.environ["WORLD_SIZE"], os.environ["RANK"] = "8", "3"
    return context.env_fields()


@pytest.fixture
def world_of_four(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("RANK", "1")
    assert torch.utils.data.get_worker_info() is None


def test_a_forked_dataloader_worker_has_the_rank_fields_its_parent_had_as_it_forked(world_of_four):
    ev.configure(trace={"download"})
    got = _worker_fields()
    assert got == {
        "dist_world_size": 4,
        "dist_global_rank": 1,
        "dist_num_nodes": 1,
        "worker_world_size": 1,
        "worker_rank": 0,
    }
    assert context.env_fields()["dist_world_size"] == 4  # the parent computes its own, as before


def test_with_the_tracer_off_a_fork_costs_nothing_and_the_worker_asks_itself(world_of_four):
    ev.configure(trace={"download"})
    ev.configure()  # switched off again
    assert _worker_fields()["dist_world_size"] == 8


def test_any_other_forked_process_asks_itself(world_of_four):
    """A process forked for another purpose (e.g. a rank that starts its own process group) is not a DataLoader
    worker: what its parent had does not hold for it."""
    ev.configure(trace={"download"})
    got = forked_result(_own_fields)
    assert (got["dist_world_size"], got["dist_global_rank"]) == (8, 3)
