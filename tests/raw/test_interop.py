"""LitData's StreamingRawDataset and ours reuse each other's index.json.zstd (needs litdata, fsspec, zstd)."""

from __future__ import annotations

from pathlib import Path

import pytest

from streamscope.raw import StreamingRawDataset
from tests.raw.conftest import content, make_folder

litdata_raw = pytest.importorskip("litdata.raw")
pytest.importorskip("fsspec")
pytest.importorskip("zstd")

pytestmark = pytest.mark.interop


def test_litdata_reads_our_index(tmp_path: Path):
    data = make_folder(tmp_path, 12, size=80, nested=True)
    cache = str(tmp_path / "cache")
    ours = StreamingRawDataset(str(data), cache_dir=cache)
    (data / "zz_late.bin").write_bytes(b"added after indexing")
    theirs = litdata_raw.StreamingRawDataset(str(data), cache_dir=cache)
    assert [f.path for f in theirs.files] == [f.path for f in ours.files]  # loaded, not re-listed
    assert [theirs[i] for i in range(len(theirs))] == [ours[i] for i in range(len(ours))]


def test_we_read_litdatas_index(tmp_path: Path):
    data = make_folder(tmp_path, 9, size=50)
    cache = str(tmp_path / "cache")
    theirs = litdata_raw.StreamingRawDataset(str(data), cache_dir=cache)
    (data / "zz_late.bin").write_bytes(b"added after indexing")
    ours = StreamingRawDataset(str(data), cache_dir=cache)
    assert [f.path for f in ours.files] == [f.path for f in theirs.files]
    assert len(ours) == 9
    assert sorted(ours[i] for i in range(9)) == sorted(content(i, 50) for i in range(9))
