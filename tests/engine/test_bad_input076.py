"""Damaged LitData 0.2.76 chunks through the dataset: an error naming the file and what is wrong, at once.

Arrow-footer datasets are read in place (local) or through the cache (remote); framed-zstd datasets always go
through the cache, which rewrites them as classic chunks when it fetches them.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

import pytest

from streamscope._core.errors import FormatError
from streamscope.engine.dataloader import StreamingDataLoader
from streamscope.engine.dataset import StreamingDataset
from tests.format.conftest import same
from tests.support import chunk_damage, ld076_datasets

pytest.importorskip("pyarrow")


def _damaged(src: Path, dst: Path, how: Any, chunk: str = "chunk-0-1.bin") -> str:
    shutil.copytree(src, dst)
    bad, words = how((dst / chunk).read_bytes())
    (dst / chunk).write_bytes(bad)
    return words


def _fails_fast(ds: StreamingDataset, words: str, workers: int) -> None:
    t0 = time.monotonic()
    with pytest.raises(FormatError, match=words) as info:
        list(StreamingDataLoader(ds, batch_size=4, num_workers=workers))
    assert "chunk-0-1.bin" in str(info.value)
    # an error, not a wait (worker start-up under load excluded)
    assert time.monotonic() - t0 < 5.0 + (20.0 if workers else 0.0)


@pytest.mark.parametrize("how", sorted(chunk_damage.ARROW))
def test_damaged_arrow_chunk(ld076_data: Path, tmp_path: Path, how: str) -> None:
    words = _damaged(ld076_data / "plain", tmp_path / "ds", chunk_damage.ARROW[how])
    ds = StreamingDataset(str(tmp_path / "ds"), cache_dir=str(tmp_path / "cache"))
    assert same(ds[0], ld076_datasets.plain(0)) and same(ds[11], ld076_datasets.plain(11))  # other chunks read
    with pytest.raises(FormatError, match=words) as info:
        ds[6]
    assert "chunk-0-1.bin" in str(info.value)
    _fails_fast(ds, words, 0)


@pytest.mark.parametrize("how", sorted(chunk_damage.FRAMED))
def test_damaged_framed_chunk(ld076_data: Path, tmp_path: Path, how: str) -> None:
    words = _damaged(ld076_data / "fixed_zstd", tmp_path / "ds", chunk_damage.FRAMED[how])
    ds = StreamingDataset(str(tmp_path / "ds"), cache_dir=str(tmp_path / "cache"))
    assert same(ds[0], ld076_datasets.fixed(0))
    with pytest.raises(FormatError, match=words) as info:
        ds[6]
    assert "chunk-0-1.bin" in str(info.value)
    _fails_fast(ds, words, 0)
    assert not [p for p in (tmp_path / "cache").rglob("*") if ".tmp." in p.name or ".download." in p.name]


@pytest.mark.parametrize(("name", "how"), [("plain", "len_off"), ("fixed_zstd", "frame_past_end")])
def test_damaged_chunk_in_a_worker(ld076_data: Path, tmp_path: Path, name: str, how: str) -> None:
    table = chunk_damage.ARROW if name == "plain" else chunk_damage.FRAMED
    words = _damaged(ld076_data / name, tmp_path / "ds", table[how])
    _fails_fast(StreamingDataset(str(tmp_path / "ds"), cache_dir=str(tmp_path / "cache")), words, 2)


@pytest.mark.parametrize(("name", "how"), [("plain", "garbage_ipc"), ("fixed_zstd", "truncated")])
def test_damaged_chunk_on_s3(ld076_data: Path, tmp_path: Path, s3_server: Any, name: str, how: str) -> None:
    table = chunk_damage.ARROW if name == "plain" else chunk_damage.FRAMED
    words = _damaged(ld076_data / name, tmp_path / "ds", table[how])
    client = s3_server.boto3_client()
    for p in (tmp_path / "ds").iterdir():
        client.upload_file(str(p), s3_server.bucket, f"{name}/{p.name}")
    ds = StreamingDataset(
        s3_server.url(name), cache_dir=str(tmp_path / "cache"), storage_options=s3_server.storage_options()
    )
    with pytest.raises(FormatError, match=words) as info:
        ds[6]
    assert "chunk-0-1.bin" in str(info.value)
    _fails_fast(ds, words, 0)
