"""Patterns from LitData's docs that customise the dataset: subclass overriding __getitem__, lambdas in workers."""

from __future__ import annotations

from typing import Any

import litdata
import pytest

import streamscope
from tests.compat import _fns
from tests.compat.conftest import both

pytestmark = pytest.mark.interop


# module level, so DataLoader workers started with "spawn" can unpickle them (LitData's optimize switches the
# process-wide start method to spawn, so tests run after one see spawn)
class LitdataDoubled(litdata.StreamingDataset):  # README "transform while streaming": override __getitem__
    def __getitem__(self, index: Any) -> Any:
        sample = super().__getitem__(index)
        return {"index": sample["index"], "double": sample["index"] * 2}


class StreamscopeDoubled(streamscope.StreamingDataset):
    def __getitem__(self, index: Any) -> Any:
        sample = super().__getitem__(index)
        return {"index": sample["index"], "double": sample["index"] * 2}


def _subclass(ld: Any) -> type:
    return LitdataDoubled if ld is litdata else StreamscopeDoubled


def test_subclass_getitem_is_used_by_iteration(data_dir: str) -> None:
    def scenario(ld: Any) -> Any:
        ds = _subclass(ld)(data_dir)
        return ds[3], [s["double"] for s in ds][:5]

    a, b = both(scenario)
    assert a == b == ({"index": 3, "double": 6}, [0, 2, 4, 6, 8])


@pytest.mark.parametrize("num_workers", [0, 2])
def test_transform_in_workers(data_dir: str, num_workers: int) -> None:
    def scenario(ld: Any) -> Any:
        ds = ld.StreamingDataset(data_dir, transform=_fns.negate)
        loader = ld.StreamingDataLoader(ds, batch_size=10, num_workers=num_workers)
        return sorted(i for b in loader for i in b["neg"].tolist())

    a, b = both(scenario)
    assert a == b == sorted(-i for i in range(50))


def test_subclass_in_workers(data_dir: str) -> None:
    def scenario(ld: Any) -> Any:
        loader = ld.StreamingDataLoader(_subclass(ld)(data_dir), batch_size=10, num_workers=2)
        return sorted(i for b in loader for i in b["double"].tolist())

    a, b = both(scenario)
    assert a == b == [2 * i for i in range(50)]
