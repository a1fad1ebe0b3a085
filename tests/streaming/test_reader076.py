"""``streaming.reader.BinaryReader`` and ``streaming.cache.Cache`` over datasets written by the real LitData 0.2.76."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from streamscope.format.item_loader import TokensLoader
from streamscope.streaming.cache import Cache, Dir
from streamscope.streaming.reader import BinaryReader, ChunkedIndex
from tests.format.conftest import same
from tests.support import ld076_datasets
from tests.support.litdata076 import expected

pytest.importorskip("pyarrow")

_LITDATA_CANNOT = {"enc_chunk_plain", "enc_sample_plain", "enc_sample_plain_zstd"}
NAMES = [
    "plain",
    "rows",
    "rows_ipc_zstd",
    "opt",
    "tens",
    "tens_zstd",
    "tens_zstd_k2",
    "tens_zstd_sample",
    "tens_zstd_chunk",
    "img",
    "tup",
    "nested",
    "tok",
    "tok_zstd_chunk",
    "enc_chunk_plain",
    "enc_chunk_tens_zstd",
    "enc_sample_plain",
    "enc_sample_plain_zstd",
    "enc_sample_tens",
    "keyed_updated",
]


def _args(name: str, root: Path) -> tuple[dict[str, Any], list[Any]]:
    kw: dict[str, Any] = {}
    lit: dict[str, Any] = {}
    if name.startswith("tok"):
        kw["item_loader"], lit["block_size"] = TokensLoader(block_size=5), 5
    if name.startswith("enc"):
        from streamscope.utilities.encryption import FernetEncryption

        kw["encryption"] = FernetEncryption.load(str(root / name / "key.json"), ld076_datasets.PASSWORD)
        lit["encrypted"] = True
    if name in _LITDATA_CANNOT:
        fn, n, _ = ld076_datasets.DATASETS[name]
        return kw, [fn(i) for i in range(n)]
    return kw, expected(name, **lit)


def _indexes(reader: Any) -> list[ChunkedIndex]:
    return [
        ChunkedIndex(g, c)
        for c, iv in enumerate(reader.get_chunk_intervals())
        for g in range(iv.chunk_start, iv.chunk_end)
    ]


@pytest.mark.parametrize("name", NAMES)
def test_binary_reader(ld076_data: Path, tmp_path: Path, name: str) -> None:
    if not (ld076_data / name).exists():
        pytest.skip("LitData 0.2.76's keyed datasets need polars")
    shutil.copytree(ld076_data / name, tmp_path / "ds")  # the reader decompresses next to the chunks
    kw, want = _args(name, ld076_data)
    reader = BinaryReader(str(tmp_path / "ds"), **kw)
    got = [reader.read(i) for i in _indexes(reader)]
    assert len(got) == len(want) and all(same(a, b) for a, b in zip(got, want))
    got = [reader.read(i) for i in reversed(_indexes(reader))]
    assert all(same(a, b) for a, b in zip(got, want[::-1]))
    reader.close()


@pytest.mark.parametrize("name", ["plain", "tens_zstd", "tens_zstd_sample", "enc_chunk_plain"])
def test_cache_reads_076(ld076_data: Path, tmp_path: Path, name: str) -> None:
    shutil.copytree(ld076_data / name, tmp_path / "ds")
    kw, want = _args(name, ld076_data)
    cache = Cache(str(tmp_path / "ds"), chunk_size=5, encryption=kw.get("encryption"))
    assert len(cache) == len(want)
    assert all(same(cache[i], w) for i, w in enumerate(want))


@pytest.mark.parametrize("name", ["rows", "tens_zstd", "tens_zstd_chunk"])
def test_binary_reader_remote(ld076_data: Path, tmp_path: Path, s3_server: Any, name: str) -> None:
    client = s3_server.boto3_client()
    for p in (ld076_data / name).iterdir():
        client.upload_file(str(p), s3_server.bucket, f"{name}/{p.name}")
    (tmp_path / "cache").mkdir()
    reader = BinaryReader(
        str(tmp_path / "cache"), remote_input_dir=s3_server.url(name), storage_options=s3_server.storage_options()
    )
    want = _args(name, ld076_data)[1]
    got = [reader.read(i) for i in _indexes(reader)]
    assert len(got) == len(want) and all(same(a, b) for a, b in zip(got, want))
    cache = Cache(
        Dir(path=str(tmp_path / "cache2"), url=s3_server.url(name)),
        chunk_size=5,
        storage_options=s3_server.storage_options(),
    )
    assert all(same(cache[i], w) for i, w in enumerate(want))
