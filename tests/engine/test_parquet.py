"""StreamingDataset over folders of .parquet files: indexing, rows as dicts, loaders with workers, S3."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from streamscope._core.errors import (
    DatasetError,
    IndexNotFoundError,
    ItemLoaderMismatchError,
    SchemaMismatchError,
)
from streamscope.engine.dataloader import StreamingDataLoader
from streamscope.engine.dataset import StreamingDataset
from streamscope.engine.parquet import build_parquet_index, index_parquet_dataset
from streamscope.format.parquet import ParquetLoader

SIZES = (10, 7, 13)  # rows per file


def write_parquet_dir(d: str, sizes: tuple[int, ...] = SIZES, row_group_size: int = 4) -> list[dict[str, Any]]:
    """Files part-0.parquet ... with rows {"id", "text", "vec"}; returns all rows in file order."""
    os.makedirs(d, exist_ok=True)
    rows: list[dict[str, Any]] = []
    start = 0
    for k, n in enumerate(sizes):
        ids = list(range(start, start + n))
        t = pa.table({"id": ids, "text": [f"t{i}" for i in ids], "vec": [[float(i), -1.0] for i in ids]})
        pq.write_table(t, os.path.join(d, f"part-{k}.parquet"), row_group_size=row_group_size)
        rows.extend(t.to_pylist())
        start += n
    return rows


@pytest.fixture
def pq_dir(tmp_path: Any) -> tuple[str, list[dict[str, Any]]]:
    d = str(tmp_path / "pq")
    rows = write_parquet_dir(d)
    index_parquet_dataset(d)
    return d, rows


@pytest.mark.parametrize("layout", ["0.2.76", "0.2.68"])
def test_index_json_describes_every_file(tmp_path: Any, monkeypatch: pytest.MonkeyPatch, layout: str) -> None:
    monkeypatch.setenv("STREAMSCOPE_WRITE_FORMAT", layout)
    d = str(tmp_path / "pq")
    write_parquet_dir(d)
    os.makedirs(os.path.join(d, "sub"))
    pq.write_table(pa.table({"x": [1]}), os.path.join(d, "sub", "nested.parquet"))  # not top level: ignored
    Path(os.path.join(d, "notes.txt")).write_text("ignored")
    index_parquet_dataset(d)
    index = json.loads(Path(os.path.join(d, "index.json")).read_text())
    assert index["config"] == {
        "chunk_bytes": None,
        "chunk_size": None,
        "compression": None,
        "data_format": ["int64", "string", "list<element: double>"],
        "data_spec": None,
        "encryption": None,
        "item_loader": "ParquetLoader",
        **({"types": None} if layout == "0.2.76" else {}),  # LitData 0.2.76 adds an empty schema
    }
    assert index["chunks"] == [
        {
            "chunk_bytes": os.path.getsize(os.path.join(d, f"part-{k}.parquet")),
            "chunk_size": n,
            "dim": None,
            "filename": f"part-{k}.parquet",
        }
        for k, n in enumerate(SIZES)
    ]
    assert float(index["updated_at"]) > 0
    text = Path(os.path.join(d, "index.json")).read_text()
    assert text == json.dumps(index, sort_keys=True)  # one line, sorted keys, like LitData


def test_index_into_cache_dir_and_read_with_index_path(tmp_path: Any) -> None:
    d = str(tmp_path / "pq")
    rows = write_parquet_dir(d)
    cache = str(tmp_path / "idx")
    index_parquet_dataset(d, cache_dir=cache, num_workers=1)
    assert not os.path.exists(os.path.join(d, "index.json"))
    ds = StreamingDataset(d, item_loader=ParquetLoader(), index_path=os.path.join(cache, "index.json"))
    assert [ds[i] for i in range(len(ds))] == rows


def test_rows_random_access_and_iteration(pq_dir: tuple[str, list[dict[str, Any]]]) -> None:
    d, rows = pq_dir
    for loader in (ParquetLoader(), ParquetLoader(low_memory=False), None):  # None: picked from the index
        ds = StreamingDataset(d, item_loader=loader)
        assert len(ds) == sum(SIZES)
        assert ds[0] == rows[0] and ds[12] == rows[12] and ds[-1] == rows[-1]
        assert ds[3:6] == rows[3:6]
        assert list(ds) == rows
    shuffled = list(StreamingDataset(d, item_loader=ParquetLoader(), shuffle=True, seed=3))
    assert shuffled != rows and sorted(shuffled, key=lambda r: r["id"]) == rows


def test_parquet_file_pattern_input(pq_dir: tuple[str, list[dict[str, Any]]]) -> None:
    d, rows = pq_dir
    one = StreamingDataset(os.path.join(d, "part-1.parquet"), item_loader=ParquetLoader())
    assert list(one) == rows[10:17]
    glob = StreamingDataset(os.path.join(d, "part-[02].parquet"), item_loader=ParquetLoader())
    assert list(glob) == rows[:10] + rows[17:]
    with pytest.raises(DatasetError, match="matches"):
        StreamingDataset(os.path.join(d, "nothing-*.parquet"), item_loader=ParquetLoader())


@pytest.mark.parametrize("ctx", ["fork", pytest.param("spawn", marks=pytest.mark.slow)])
def test_loader_with_workers(pq_dir: tuple[str, list[dict[str, Any]]], ctx: str) -> None:
    d, rows = pq_dir
    ds = StreamingDataset(d, item_loader=ParquetLoader())
    ds[5]  # the parent has read rows (open pyarrow files) before the workers start
    loader = StreamingDataLoader(ds, batch_size=4, num_workers=2, multiprocessing_context=ctx)
    ids: list[int] = []
    texts: list[str] = []
    for batch in loader:
        assert set(batch) == {"id", "text", "vec"}
        ids.extend(batch["id"].tolist())
        texts.extend(batch["text"])
    assert ids == [r["id"] for r in rows]
    assert texts == [r["text"] for r in rows]


def test_errors_are_clear(tmp_path: Any, pq_dir: tuple[str, list[dict[str, Any]]]) -> None:
    d, _ = pq_dir
    with pytest.raises(IndexNotFoundError, match="does not exist"):
        index_parquet_dataset(str(tmp_path / "missing"))
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(IndexNotFoundError, match="no .parquet files"):
        index_parquet_dataset(str(empty))
    mixed = str(tmp_path / "mixed")
    write_parquet_dir(mixed, (3,))
    pq.write_table(pa.table({"id": ["a"], "text": ["b"], "vec": [[1.0]]}), os.path.join(mixed, "z.parquet"))
    with pytest.raises(SchemaMismatchError, match=r"z\.parquet.*part-0\.parquet"):
        index_parquet_dataset(mixed)
    from streamscope.format.item_loader import PyTreeLoader

    with pytest.raises(ItemLoaderMismatchError, match="ParquetLoader"):
        StreamingDataset(d, item_loader=PyTreeLoader())
    # a file replaced after indexing: its row count no longer matches index.json
    pq.write_table(pa.table({"id": [1], "text": ["x"], "vec": [[1.0]]}), os.path.join(d, "part-1.parquet"))
    from streamscope._core.errors import CorruptChunkError

    with pytest.raises(CorruptChunkError, match=r"part-1\.parquet.*chunk_size=7"):
        StreamingDataset(d, item_loader=ParquetLoader())[12]


def _upload(s3: Any, d: str, prefix: str) -> None:
    client = s3.boto3_client()
    for name in sorted(os.listdir(d)):
        if os.path.isfile(os.path.join(d, name)):
            client.upload_file(os.path.join(d, name), s3.bucket, f"{prefix}/{name}")


def test_s3_index_and_stream(tmp_path: Any, s3_server: Any) -> None:
    d = str(tmp_path / "pq")
    rows = write_parquet_dir(d)
    _upload(s3_server, d, "data")
    url = s3_server.url("data")
    opts = s3_server.storage_options()
    local = build_parquet_index(d)
    index_parquet_dataset(url, storage_options=opts, num_workers=2)
    remote = json.loads(
        s3_server.boto3_client().get_object(Bucket=s3_server.bucket, Key="data/index.json")["Body"].read()
    )
    assert remote["chunks"] == local["chunks"] and remote["config"] == local["config"]
    cache = str(tmp_path / "cache")
    ds = StreamingDataset(url, item_loader=ParquetLoader(), storage_options=opts, cache_dir=cache)
    assert ds[11] == rows[11]
    assert list(ds) == rows
    loader = StreamingDataLoader(ds, batch_size=5, num_workers=2)
    assert [i for b in loader for i in b["id"].tolist()] == [r["id"] for r in rows]


def test_keys_over_parquet_and_pattern_subsets(pq_dir: tuple[str, list[dict[str, Any]]]) -> None:
    from streamscope._core.errors import SampleKeyError
    from streamscope.engine.key_lookup import build_keys_index

    d, rows = pq_dir
    build_keys_index(d, lambda r: r["text"], verbose=False)
    assert StreamingDataset(d)["t15"] == rows[15]
    part = StreamingDataset(os.path.join(d, "part-[12].parquet"), item_loader=ParquetLoader())
    assert part.get_by_key("t15") == rows[15] and part["t20"] == rows[20]
    with pytest.raises(SampleKeyError, match="leaves out"):
        part.get_by_key("t3")


def test_a_parquet_folder_without_index_is_indexed_on_open(tmp_path: Any) -> None:
    """LitData 0.2.76: StreamingDataset builds the index of a folder of Parquet files that has none."""
    d = str(tmp_path / "pq")
    rows = write_parquet_dir(d, (4, 3))
    assert not os.path.exists(os.path.join(d, "index.json"))
    ds = StreamingDataset(d, item_loader=ParquetLoader())
    assert len(ds) == 7 and os.path.exists(os.path.join(d, "index.json"))
    assert [ds[i]["id"] for i in range(7)] == [r["id"] for r in rows]
