"""Parquet datasets and the keys sidecar, with both engines: indexes and sidecars written by one read by the other.

LitData's ParquetLoader and keys sidecar need polars (installed for these interop tests only; streamscope reads
with pyarrow): the tests skip when polars is absent.
"""

from __future__ import annotations

import importlib
import json
import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.compat.conftest import both, engine

pytest.importorskip("polars")
pytestmark = pytest.mark.interop


def _parquet_folder(d: str, nulls: bool = True) -> list[dict[str, Any]]:
    os.makedirs(d, exist_ok=True)
    rows: list[dict[str, Any]] = []
    for k, n in enumerate((9, 5, 12)):
        ids = list(range(len(rows), len(rows) + n))
        cols: dict[str, Any] = {
            "id": ids,
            "text": [f"row-{i}" for i in ids],
            "score": [i * 0.5 for i in ids],
            "tags": [[i, i * 2] for i in ids],
        }
        if nulls:  # default_collate cannot batch None: only for the sample-level tests
            cols["maybe"] = [None if i % 4 == 0 else f"m{i}" for i in ids]
        t = pa.table(cols)
        pq.write_table(t, os.path.join(d, f"file-{k}.parquet"), row_group_size=4)
        rows.extend(t.to_pylist())
    return rows


def _loader(ld: Any) -> Any:
    return importlib.import_module(f"{ld.__name__}.streaming.item_loader").ParquetLoader()


def _canonical(index: dict[str, Any]) -> dict[str, Any]:
    """An index without its time stamp and with chunks in name order (LitData lists files in os.listdir order)."""
    return {"chunks": sorted(index["chunks"], key=lambda c: c["filename"]), "config": index["config"]}


def test_both_engines_write_the_same_parquet_index(tmp_path: Any) -> None:
    d = str(tmp_path / "pq")
    _parquet_folder(d)
    indexes = []
    for name in ("litdata", "streamscope"):
        engine(name).index_parquet_dataset(d)
        indexes.append(json.loads(Path(os.path.join(d, "index.json")).read_text()))
    assert _canonical(indexes[0]) == _canonical(indexes[1])
    assert set(indexes[1]) == set(indexes[0]) == {"chunks", "config", "updated_at"}


@pytest.mark.parametrize("indexer", ["litdata", "streamscope"])
def test_rows_match_whoever_wrote_the_index(tmp_path: Any, indexer: str) -> None:
    d = str(tmp_path / "pq")
    rows = _parquet_folder(d)
    engine(indexer).index_parquet_dataset(d)

    def scenario(ld: Any) -> Any:
        ds = ld.StreamingDataset(d, item_loader=_loader(ld), cache_dir=str(tmp_path / f"cache-{ld.__name__}"))
        return len(ds), [ds[i] for i in range(len(ds))], list(ds), ds[3:7]

    a, b = both(scenario)
    assert a == b
    assert sorted(a[2], key=lambda r: r["id"]) == rows


def test_parquet_pattern_input_and_batches(tmp_path: Any) -> None:
    d = str(tmp_path / "pq")
    _parquet_folder(d, nulls=False)
    engine("streamscope").index_parquet_dataset(d)

    def scenario(ld: Any) -> Any:
        one = ld.StreamingDataset(os.path.join(d, "file-1.parquet"), item_loader=_loader(ld))
        loader = ld.StreamingDataLoader(ld.StreamingDataset(d, item_loader=_loader(ld)), batch_size=5)
        batches = [(b["id"].tolist(), b["text"], b["score"].tolist()) for b in loader]
        return list(one), batches

    a, b = both(scenario)
    assert a == b
    assert [r["id"] for r in a[0]] == list(range(9, 14))


def _optimized(tmp_path: Any, name: str) -> str:
    from tests.engine._data import write_dataset

    return write_dataset(str(tmp_path / name), 45, lambda i: {"index": i, "name": f"item-{i:03d}"}, chunk_size=8)


@pytest.mark.parametrize("num_shards", [1, 3])
@pytest.mark.parametrize("key", ["name", "index"])
def test_keys_sidecar_is_the_same_file_content(tmp_path: Any, num_shards: int, key: str) -> None:
    dirs = {}
    for name in ("litdata", "streamscope"):
        d = _optimized(tmp_path, name)
        out = engine(name).build_keys_index(d, lambda s, key=key: s[key], verbose=False, num_shards=num_shards)
        assert out == os.path.join(d, "keys")
        dirs[name] = d
    for s in range(num_shards):
        theirs, ours = (pq.read_table(os.path.join(dirs[n], "keys", f"shard-{s:05d}.parquet")) for n in dirs)
        assert ours.schema == theirs.schema
        assert ours.to_pylist() == theirs.to_pylist()
    idx = [json.loads(Path(os.path.join(dirs[n], "index.json")).read_text())["keys"] for n in dirs]
    assert idx[0] == idx[1]


@pytest.mark.parametrize("builder", ["litdata", "streamscope"])
def test_get_by_key_reads_either_sidecar(tmp_path: Any, builder: str) -> None:
    d = _optimized(tmp_path, "ds")
    engine(builder).build_keys_index(d, lambda s: s["name"], verbose=False, num_shards=2)

    def scenario(ld: Any) -> Any:
        ds = ld.StreamingDataset(d)
        return [ds.get_by_key(f"item-{i:03d}") for i in (0, 7, 8, 30, 44)], ds["item-012"]

    a, b = both(scenario)
    assert a == b
    assert a[1] == {"index": 12, "name": "item-012"}


def test_missing_key_and_missing_sidecar_are_key_errors(tmp_path: Any) -> None:
    d = _optimized(tmp_path, "ds")

    def no_sidecar(ld: Any) -> Any:
        with pytest.raises(KeyError):
            ld.StreamingDataset(d).get_by_key("item-001")
        return "KeyError"

    a, b = both(no_sidecar)
    assert a == b == "KeyError"
    engine("streamscope").build_keys_index(d, lambda s: s["name"], verbose=False)

    def missing(ld: Any) -> Any:
        with pytest.raises(KeyError):
            ld.StreamingDataset(d).get_by_key("nope")
        return "KeyError"

    a, b = both(missing)
    assert a == b == "KeyError"


@pytest.mark.parametrize("updater", ["litdata", "streamscope"])
def test_dataset_update_is_seen_by_both_engines(tmp_path: Any, updater: str) -> None:
    d = _optimized(tmp_path, "ds")
    other = "streamscope" if updater == "litdata" else "litdata"
    engine(other).build_keys_index(d, lambda s: s["name"], verbose=False)
    with engine(updater).dataset_update(d) as update:
        update["item-010"] = {"index": 1000, "name": "item-010"}
        update["item-044"] = {"index": 4400, "name": "item-044"}
        update.commit()

    def scenario(ld: Any) -> Any:
        ds = ld.StreamingDataset(d, cache_dir=str(tmp_path / f"cache-{ld.__name__}"))
        return [s["index"] for s in ds], ds.get_by_key("item-044")

    a, b = both(scenario)
    assert a == b
    assert a[0][10] == 1000 and a[0][44] == 4400 and a[0][11] == 11
