"""StreamingRawDataset usage from LitData's docs, with both engines."""

from __future__ import annotations

import os
from typing import Any

import litdata
import pytest
from torch.utils.data import DataLoader

import streamscope
from tests.compat import _fns
from tests.compat.conftest import both

pytestmark = pytest.mark.interop


@pytest.fixture
def raw_dir(tmp_path: Any) -> str:
    root = tmp_path / "raw"
    for i in range(8):
        sub = root / f"class{i % 2}"
        sub.mkdir(parents=True, exist_ok=True)
        (sub / f"img{i}.bin").write_bytes(bytes([i]) * (10 + i))
    return str(root)


class LitdataPairs(litdata.StreamingRawDataset):
    """The docs' pattern: group files into items in ``setup``."""

    def setup(self, files: list[Any]) -> list[Any]:
        ordered = sorted(files, key=lambda f: f.path)
        return [ordered[i : i + 2] for i in range(0, len(ordered), 2)]


class StreamscopePairs(streamscope.StreamingRawDataset):
    def setup(self, files: list[Any]) -> list[Any]:
        ordered = sorted(files, key=lambda f: f.path)
        return [ordered[i : i + 2] for i in range(0, len(ordered), 2)]


def test_raw_transform_and_loader(raw_dir: str, tmp_path: Any) -> None:
    def scenario(ld: Any) -> Any:
        ds = ld.StreamingRawDataset(raw_dir, cache_dir=str(tmp_path / f"c-{ld.__name__}"), transform=_fns.byte_len)
        loader = DataLoader(ds, batch_size=4)  # raw datasets go to torch's DataLoader (LitData's refuses them)
        sizes = sorted(int(x) for b in loader for x in b)
        return len(ds), sorted(ds[i] for i in range(len(ds))), sizes

    a, b = both(scenario)
    assert a == b
    assert a[1] == list(range(10, 18))


def test_raw_setup_groups_files(raw_dir: str, tmp_path: Any) -> None:
    def scenario(ld: Any) -> Any:
        cls = LitdataPairs if ld is litdata else StreamscopePairs
        ds = cls(raw_dir, cache_dir=str(tmp_path / f"s-{ld.__name__}"))
        return len(ds), [[len(x) for x in ds[i]] for i in range(len(ds))]

    a, b = both(scenario)
    assert a == b
    assert a[0] == 4


def test_raw_item_type_path(raw_dir: str, tmp_path: Any) -> None:
    def scenario(ld: Any) -> Any:
        ds = ld.StreamingRawDataset(
            raw_dir, cache_dir=str(tmp_path / f"p-{ld.__name__}"), cache_files=True, item_type="path"
        )
        paths = [ds[i] for i in range(len(ds))]
        return len(paths), sorted(os.path.getsize(p) for p in paths), all(isinstance(p, str) for p in paths)

    a, b = both(scenario)
    assert a == b == (8, list(range(10, 18)), True)
