"""``local:/dir`` for raw files: the folder is read as remote storage (through the store; ``cache_files``
copies the files into the cache), as ``local:`` means for optimized datasets. LitData's raw dataset refuses
the scheme, so nothing a LitData user wrote changes meaning."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from streamscope import events as ev
from streamscope._core.errors import RawSchemeError, RawSourceNotFoundError
from streamscope.raw import StreamingRawDataset
from tests.raw.conftest import content, file_id, listing


def test_files_are_fetched_through_the_store_and_cached(folder: Path, cache_root: str):
    before = listing(folder)
    ds = StreamingRawDataset(f"local:{folder}", cache_dir=cache_root, cache_files=True, item_type="path")
    assert ds.source.is_remote and ds.source.root == f"local:{folder.resolve()}"
    paths = [ds[i] for i in range(len(ds))]
    assert len(paths) == 40 and all(p.startswith(cache_root) for p in paths)  # copies, not the source files
    assert [file_id(Path(p).read_bytes()) for p in paths] == list(range(40))
    # the source folder only gains the index next to the data, as an object-store prefix does
    assert listing(folder) == sorted([*before, "index.json.zstd"])


def test_bytes_items_are_traced_as_store_gets(folder: Path, cache_root: str):
    ev.drain()
    ev.ACTIVE.add("download")
    try:
        ds = StreamingRawDataset(f"local:{folder}", cache_dir=cache_root)
        assert ds[7] == content(7, 64)
    finally:
        ev.ACTIVE.discard("download")
    gets = [e for e in ev.drain() if e[0] == "B" and e[2] == "download" and e[6].get("op") == "get"]
    assert any(str(e[6]["url"]).endswith("/f00007.bin") and str(e[6]["url"]).startswith("local:") for e in gets)


def test_missing_folder_and_empty_suffix_are_named(tmp_path: Path, cache_root: str):
    with pytest.raises(RawSourceNotFoundError, match="does not exist"):
        StreamingRawDataset(f"local:{tmp_path / 'nope'}", cache_dir=cache_root)
    with pytest.raises(RawSchemeError, match="names no folder"):
        StreamingRawDataset("local:", cache_dir=cache_root)


def test_relative_folder_is_resolved(folder: Path, cache_root: str, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.chdir(folder.parent)
    ds = StreamingRawDataset(f"local:{os.path.basename(folder)}", cache_dir=cache_root)
    assert ds.source.root == f"local:{folder.resolve()}" and ds[3] == content(3, 64)
