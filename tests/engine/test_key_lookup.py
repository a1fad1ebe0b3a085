"""build_keys_index and StreamingDataset.get_by_key / ds["key"]: local, compressed, sharded, remote, workers."""

from __future__ import annotations

import json
import os
import pickle
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from streamscope._core.errors import (
    DatasetIndexError,
    DuplicateKeyError,
    IndexNotFoundError,
    KeyIndexExistsError,
    KeyIndexNotFoundError,
    SampleKeyError,
)
from streamscope.engine.dataset import StreamingDataset
from streamscope.engine.key_lookup import build_keys_index
from tests.engine._data import write_dataset


def _name(sample: dict[str, Any]) -> str:
    return sample["name"]


def _index(sample: dict[str, Any]) -> int:
    return int(sample["index"])


@pytest.mark.parametrize("compression", [None, "zstd"])
def test_build_then_get_by_key(tmp_path: Any, compression: str | None) -> None:
    d = write_dataset(str(tmp_path / "ds"), 47, chunk_size=10, compression=compression)
    before = json.loads(Path(os.path.join(d, "index.json")).read_text())
    out = build_keys_index(d, _name, verbose=False)
    assert out == os.path.join(d, "keys")
    after = json.loads(Path(os.path.join(d, "index.json")).read_text())
    assert after["keys"] == {"num_shards": 1, "sharding": "none", "version": 1}
    assert {k: v for k, v in after.items() if k != "keys"} == before  # nothing else changes (updated_at too)
    t = pq.read_table(os.path.join(out, "shard-00000.parquet"))
    assert t.column_names == ["key", "index", "chunk_index", "chunk_offset"]
    rows = {r["key"]: r for r in t.to_pylist()}
    assert rows["s23"] == {"key": "s23", "index": 23, "chunk_index": 2, "chunk_offset": 23}
    ds = StreamingDataset(d, cache_dir=str(tmp_path / "cache"))
    for i in (0, 9, 10, 23, 46):
        assert ds.get_by_key(f"s{i}") == {"index": i, "name": f"s{i}"}
        assert ds[f"s{i}"] == ds[i]
    with pytest.raises(SampleKeyError, match="s47") as info:
        ds.get_by_key("s47")
    assert isinstance(info.value, KeyError)


def test_int_keys_shards_and_overwrite(tmp_path: Any) -> None:
    d = write_dataset(str(tmp_path / "ds"), 60, chunk_size=7)
    build_keys_index(d, _index, verbose=False, num_shards=3)
    assert sorted(os.listdir(os.path.join(d, "keys"))) == [f"shard-0000{s}.parquet" for s in range(3)]
    ds = StreamingDataset(d)
    assert ds.get_by_key(59) == {"index": 59, "name": "s59"}
    assert ds.get_by_key(0)["name"] == "s0"
    with pytest.raises(KeyError):
        ds.get_by_key("59")  # int keys are stored as int64
    with pytest.raises(KeyIndexExistsError, match="overwrite=True"):
        build_keys_index(d, _name, verbose=False)
    build_keys_index(d, _name, verbose=False, overwrite=True)
    assert os.listdir(os.path.join(d, "keys")) == ["shard-00000.parquet"]
    fresh = StreamingDataset(d)
    assert fresh["s12"]["index"] == 12


def test_keys_follow_the_layout_not_the_subsample(tmp_path: Any) -> None:
    d = write_dataset(str(tmp_path / "ds"), 40, chunk_size=8)
    build_keys_index(d, _name, verbose=False)
    half = StreamingDataset(d, subsample=0.5, shuffle=True)
    assert all(half.get_by_key(f"s{i}") == {"index": i, "name": f"s{i}"} for i in range(40))


def test_output_dir_and_errors(tmp_path: Any) -> None:
    d = write_dataset(str(tmp_path / "ds"), 12, chunk_size=5)
    side = str(tmp_path / "side")
    assert build_keys_index(d, _name, verbose=False, output_dir=side) == os.path.join(side, "keys")
    assert not os.path.exists(os.path.join(d, "keys"))
    with pytest.raises(KeyIndexNotFoundError, match="keys/") as info:
        StreamingDataset(d).get_by_key("s1")
    assert isinstance(info.value, KeyError)
    with pytest.raises(DuplicateKeyError):
        build_keys_index(d, lambda s: s["index"] % 3, verbose=False)
    assert not os.path.exists(os.path.join(d, "keys"))  # nothing half-written
    with pytest.raises(IndexNotFoundError):
        build_keys_index(str(tmp_path / "nope"), _name, verbose=False)
    with pytest.raises(TypeError, match="float"):
        build_keys_index(d, lambda s: s["index"] / 2, verbose=False)


def test_stale_index_is_reported(tmp_path: Any) -> None:
    d = write_dataset(str(tmp_path / "ds"), 30, chunk_size=10)
    build_keys_index(d, _name, verbose=False)
    write_dataset(d, 12, chunk_size=10)  # the dataset shrinks, the sidecar stays
    with pytest.raises(DatasetIndexError, match="stale"):
        StreamingDataset(d).get_by_key("s25")


class _ByKey:
    """A map-style dataset that looks samples up by key (module level: spawned workers unpickle it)."""

    def __init__(self, ds: Any) -> None:
        self.ds = ds

    def __len__(self) -> int:
        return 20

    def __getitem__(self, i: int) -> int:
        return self.ds.get_by_key(f"s{19 - i}")["index"]


def test_dataset_with_key_index_pickles_and_works_in_workers(tmp_path: Any) -> None:
    from torch.utils.data import DataLoader

    d = write_dataset(str(tmp_path / "ds"), 20, chunk_size=6)
    build_keys_index(d, _name, verbose=False)
    ds = StreamingDataset(d)
    assert ds["s3"]["index"] == 3  # the sidecar is open in the parent
    clone = pickle.loads(pickle.dumps(ds))
    assert clone["s19"]["index"] == 19

    got = [int(x) for b in DataLoader(_ByKey(ds), batch_size=5, num_workers=2) for x in b]
    assert got == list(range(19, -1, -1))


def test_remote_lookup_reads_ranges(tmp_path: Any, s3_server: Any) -> None:
    d = write_dataset(str(tmp_path / "ds"), 33, chunk_size=8, compression="zstd")
    build_keys_index(d, _name, verbose=False, num_shards=2)
    client = s3_server.boto3_client()
    for root, _, files in os.walk(d):
        for f in files:
            rel = os.path.relpath(os.path.join(root, f), d).replace(os.sep, "/")
            client.upload_file(os.path.join(root, f), s3_server.bucket, f"ds/{rel}")
    ds = StreamingDataset(
        s3_server.url("ds"), storage_options=s3_server.storage_options(), cache_dir=str(tmp_path / "cache")
    )
    assert ds.get_by_key("s31") == {"index": 31, "name": "s31"}
    assert ds["s0"]["index"] == 0
    with pytest.raises(KeyError):
        ds.get_by_key("zzz")
    client.delete_object(Bucket=s3_server.bucket, Key="ds/keys/shard-00000.parquet")
    client.delete_object(Bucket=s3_server.bucket, Key="ds/keys/shard-00001.parquet")
    fresh = StreamingDataset(
        s3_server.url("ds"), storage_options=s3_server.storage_options(), cache_dir=str(tmp_path / "cache")
    )
    with pytest.raises(KeyIndexNotFoundError):
        fresh.get_by_key("s1")
