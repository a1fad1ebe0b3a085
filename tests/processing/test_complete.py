"""``complete_dataset`` accepts what ``optimize`` leaves when it is interrupted before the merge.

A single-node optimize() keeps its workers' chunk lists in memory until it publishes ``index.json``, so it leaves
no partial index to complete. A multi-node one publishes each node's ``{rank}-index.json`` as the node finishes:
when the last node dies before the merge, those files are what is left, and ``complete_dataset`` must give the
index the uninterrupted run gives (same chunks, same config, byte-identical chunk files).
"""

from __future__ import annotations

import json
import os
from typing import Any

import pytest

from streamscope import StreamingDataset, complete_dataset, is_complete_dataset
from streamscope.processing import functions
from streamscope.processing.nodes import NODE_VARIABLES
from tests.processing import _node_fns as fns
from tests.processing.conftest import read_dataset

N = 40
KW: dict[str, Any] = {"chunk_size": 4, "verbose": False, "start_method": "fork"}


class _Interrupted(Exception):
    """The last node "dies" where it would merge."""


@pytest.fixture
def nodes_here(monkeypatch: pytest.MonkeyPatch) -> Any:
    """Run this process as node ``rank`` of 2 (the claim protocol's waits shortened, as tests/processing/test_nodes)."""
    for pair in NODE_VARIABLES:
        for var in pair:
            monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("STREAMSCOPE_OPTIMIZE_NODE_CLAIM_SETTLE", "0.1")
    monkeypatch.setenv("STREAMSCOPE_OPTIMIZE_NODE_HEARTBEAT", "0.2")
    monkeypatch.setenv("STREAMSCOPE_OPTIMIZE_NODE_STALE_AFTER", "5")

    def as_node(rank: int) -> None:
        monkeypatch.setenv("DATA_OPTIMIZER_NUM_NODES", "2")
        monkeypatch.setenv("DATA_OPTIMIZER_NODE_RANK", str(rank))

    return as_node


@pytest.mark.parametrize("compression", [None, "zstd"])
def test_complete_dataset_finishes_a_multi_node_optimize_interrupted_before_the_merge(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch, nodes_here: Any, compression: str | None
) -> None:
    ref, out = str(tmp_path / "ref"), str(tmp_path / "out")
    functions.optimize(fns.sample, list(range(N)), ref, num_workers=2, compression=compression, **KW)

    nodes_here(0)
    functions.optimize(fns.sample, list(range(N)), out, num_workers=1, compression=compression, **KW)
    assert os.path.exists(os.path.join(out, "0-index.json")) and not is_complete_dataset(out)

    def die(*args: Any, **kwargs: Any) -> bool:
        raise _Interrupted

    monkeypatch.setattr(functions, "merge_nodes", die)
    nodes_here(1)
    with pytest.raises(_Interrupted):
        functions.optimize(fns.sample, list(range(N)), out, num_workers=1, compression=compression, **KW)
    left = sorted(n for n in os.listdir(out) if n.endswith("index.json"))
    assert left == ["0-index.json", "1-index.json"]  # the per-node partial indexes, and no index.json

    assert complete_dataset(out) == out
    got, ref_index = read_dataset(out), read_dataset(ref)
    assert got[0]["chunks"] == ref_index[0]["chunks"] and got[0]["config"] == ref_index[0]["config"]
    assert got[1] == ref_index[1]  # the chunk files, byte for byte
    assert not any(n.endswith("-index.json") for n in os.listdir(out))
    with open(os.path.join(out, "index.json")) as f:
        assert set(json.load(f)) == {"chunks", "config", "updated_at"}
    monkeypatch.delenv("DATA_OPTIMIZER_NUM_NODES")
    samples = [(s["i"], s["k"]) for s in StreamingDataset(out)]
    assert samples == [(s["i"], s["k"]) for s in StreamingDataset(ref)]
