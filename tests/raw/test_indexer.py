from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st

from streamscope._core import config
from streamscope._core.errors import (
    EmptyRawSourceError,
    RawIndexError,
    RawSchemeError,
    RawSourceNotFoundError,
)
from streamscope.raw import INDEX_FILENAME, FileIndexer, FileMetadata, StreamingRawDataset
from streamscope.raw.indexer import decode_index, encode_index
from tests.raw.conftest import listing, make_folder


def local_index_path(cache_root: str, data: Path) -> str:
    return os.path.join(cache_root, hashlib.md5(str(data.resolve()).encode()).hexdigest(), INDEX_FILENAME)


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(st.text(min_size=1, max_size=30), st.integers(0, 2**40)),
        max_size=30,
    )
)
def test_index_roundtrip(entries):
    files = [FileMetadata(p, s) for p, s in entries]
    blob = encode_index("s3://b/p", files, created_at=12.5)
    assert decode_index(blob, "x") == files


def test_index_bytes_follow_the_schema():
    blob = encode_index("/d", [FileMetadata("/d/a", 3)], created_at=1.0)
    assert zstandard.ZstdDecompressor().decompress(blob) == (
        b'{"source": "/d", "files": [{"path": "/d/a", "size": 3}], "created_at": 1.0}'
    )


@pytest.mark.parametrize(
    "blob",
    [b"not zstd", zstandard.ZstdCompressor().compress(b"{bad json"), zstandard.ZstdCompressor().compress(b'{"x": 1}')],
)
def test_bad_index_bytes_raise(blob):
    with pytest.raises(RawIndexError, match="where.zstd"):
        decode_index(blob, "where.zstd")


def test_bad_entry_names_position():
    blob = zstandard.ZstdCompressor().compress(b'{"files": [{"path": "a", "size": 1}, {"path": "b", "size": -2}]}')
    with pytest.raises(RawIndexError, match=r"files\[1\]"):
        decode_index(blob, "i")


def test_sorted_order_depth_and_extensions(tmp_path: Path):
    data = tmp_path / "d"
    for rel in ["b.JPG", "a.jpg", "c.txt", "x/y.jpg", "x/z/w.jpg", "x/z/v/deep.jpg", INDEX_FILENAME]:
        (data / rel).parent.mkdir(parents=True, exist_ok=True)
        (data / rel).write_bytes(b"12345")
    root = str(data.resolve())
    got = [f.path for f in FileIndexer().discover_files(str(data), None)]
    assert got == sorted(got)
    assert INDEX_FILENAME not in {os.path.basename(p) for p in got}
    assert len(got) == 6
    got = [
        os.path.relpath(f.path, root) for f in FileIndexer(max_depth=2, extensions=[".jpg"]).discover_files(root, None)
    ]
    assert got == ["a.jpg", "b.JPG", "x/y.jpg"]
    assert [os.path.relpath(f.path, root) for f in FileIndexer(max_depth=1).discover_files(root, None)] == [
        "a.jpg",
        "b.JPG",
        "c.txt",
    ]


def test_index_cached_reused_and_recomputed(tmp_path: Path, cache_root: str):
    data = make_folder(tmp_path, 5)
    before = listing(data)
    ds = StreamingRawDataset(str(data), cache_dir=cache_root)
    assert len(ds) == 5
    idx = local_index_path(cache_root, data)
    assert os.path.isfile(idx)
    assert listing(data) == before  # nothing written into the source folder
    assert [f.path for f in decode_index(Path(idx).read_bytes(), idx)] == [f.path for f in ds.files]
    (data / "f99999.bin").write_bytes(b"new")
    assert len(StreamingRawDataset(str(data), cache_dir=cache_root)) == 5  # index reused
    ds2 = StreamingRawDataset(str(data), cache_dir=cache_root, recompute_index=True)
    assert len(ds2) == 6
    assert len(StreamingRawDataset(str(data), cache_dir=cache_root)) == 6  # the rebuilt index was saved


def test_source_index_only_on_request(tmp_path: Path, cache_root: str):
    data = make_folder(tmp_path, 3)
    config.set_value("raw_write_source_index", True)
    StreamingRawDataset(str(data), cache_dir=cache_root)
    assert (data / INDEX_FILENAME).is_file()
    # a fresh cache finds the index next to the data (it is not re-listed: a new file stays unseen)
    (data / "f77777.bin").write_bytes(b"late")
    other_cache = str(tmp_path / "other")
    assert len(StreamingRawDataset(str(data), cache_dir=other_cache)) == 3
    assert os.path.isfile(local_index_path(other_cache, data))


def test_corrupt_local_index_is_rebuilt(tmp_path: Path, cache_root: str):
    data = make_folder(tmp_path, 4)
    StreamingRawDataset(str(data), cache_dir=cache_root)
    idx = local_index_path(cache_root, data)
    Path(idx).write_bytes(b"garbage")
    assert len(StreamingRawDataset(str(data), cache_dir=cache_root)) == 4
    assert decode_index(Path(idx).read_bytes(), idx)


def test_missing_folder(tmp_path: Path, cache_root: str):
    missing = tmp_path / "nope"
    with pytest.raises(RawSourceNotFoundError, match="nope"):
        StreamingRawDataset(str(missing), cache_dir=cache_root)
    f = tmp_path / "file.bin"
    f.write_bytes(b"x")
    with pytest.raises(RawSourceNotFoundError, match="not a folder"):
        StreamingRawDataset(str(f), cache_dir=cache_root)


def test_empty_folder(tmp_path: Path, cache_root: str):
    (tmp_path / "empty" / "sub").mkdir(parents=True)
    with pytest.raises(EmptyRawSourceError, match="empty"):
        StreamingRawDataset(str(tmp_path / "empty"), cache_dir=cache_root)


@pytest.mark.parametrize("url", ["ftp://host/data", "http://127.0.0.1:1/x"])
def test_unsupported_scheme(url: str, cache_root: str):
    with pytest.raises(RawSchemeError, match=url.split("://")[0]):
        StreamingRawDataset(url, cache_dir=cache_root)
