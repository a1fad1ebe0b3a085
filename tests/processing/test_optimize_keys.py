"""optimize(..., key_fn=...): the keys sidecar, read back through StreamingDataset.get_by_key / ds["key"]."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from streamscope._core.errors import DuplicateKeyError, OptimizeInputError
from streamscope.engine.dataset import StreamingDataset
from streamscope.processing import optimize


def _sample(i: int) -> dict:
    return {"id": f"entity-{i}", "x": i, "pad": "p" * (i % 7)}


def _key(s: dict) -> str:
    return s["id"]


def _int_key(s: dict) -> int:
    return 1000 + s["x"]


@pytest.mark.parametrize("compression", [None, "zstd"])
def test_every_sample_is_found_by_its_key(tmp_path, compression):
    out = str(tmp_path / "d")
    optimize(
        _sample, list(range(37)), out, chunk_size=5, num_workers=2, compression=compression, key_fn=_key, verbose=False
    )
    assert os.path.isfile(os.path.join(out, "keys", "shard-00000.parquet"))
    assert json.loads(Path(os.path.join(out, "index.json")).read_text())["keys"]["num_shards"] == 1
    ds = StreamingDataset(out)
    for i in range(37):
        assert ds[f"entity-{i}"]["x"] == i
        assert ds.get_by_key(f"entity-{i}") == ds[f"entity-{i}"]
    with pytest.raises(KeyError):
        ds.get_by_key("entity-99")


def test_int_keys_and_append_cover_the_whole_dataset(tmp_path):
    out = str(tmp_path / "d")
    optimize(_sample, list(range(10)), out, chunk_size=4, num_workers=1, key_fn=_int_key, verbose=False)
    optimize(
        _sample, list(range(10, 16)), out, chunk_size=4, num_workers=1, key_fn=_int_key, mode="append", verbose=False
    )
    ds = StreamingDataset(out)
    assert len(ds) == 16
    assert [ds.get_by_key(1000 + i)["x"] for i in range(16)] == list(range(16))
    assert ds[3]["x"] == 3  # an int index stays positional


def test_duplicate_keys_and_failing_key_fn_are_clear_errors(tmp_path):
    with pytest.raises(DuplicateKeyError):
        optimize(
            _sample,
            list(range(6)),
            str(tmp_path / "a"),
            chunk_size=4,
            num_workers=1,
            key_fn=lambda s: s["x"] % 3,
            verbose=False,
        )
    with pytest.raises(OptimizeInputError, match="key_fn failed on item 0 of chunk"):
        optimize(
            _sample,
            list(range(6)),
            str(tmp_path / "b"),
            chunk_size=4,
            num_workers=1,
            key_fn=lambda s: s["missing"],
            verbose=False,
        )
    with pytest.raises(OptimizeInputError, match="key_fn must be callable"):
        optimize(_sample, list(range(6)), str(tmp_path / "c"), chunk_size=4, num_workers=1, key_fn="id", verbose=False)


@pytest.mark.slow
def test_keys_on_s3(s3_server):
    url, opts = s3_server.url("keyed"), s3_server.storage_options()
    optimize(
        _sample, list(range(12)), url, storage_options=opts, chunk_size=5, num_workers=1, key_fn=_key, verbose=False
    )
    from streamscope.storage import open_store

    store = open_store(url, opts)
    assert store.exists("keys/shard-00000.parquet")
    assert json.loads(store.get("index.json"))["keys"]["num_shards"] == 1
    ds = StreamingDataset(url, storage_options=opts)
    assert ds["entity-7"]["x"] == 7
