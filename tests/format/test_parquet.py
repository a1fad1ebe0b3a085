"""Parquet chunks (ParquetLoader / ParquetChunk) and the keys sidecar format, without any dataset machinery."""

from __future__ import annotations

import datetime as dt
import io
import json
import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamscope._core.errors import CorruptChunkError, DuplicateKeyError, FormatError
from streamscope.format.item_loader import loader_for_config
from streamscope.format.keys_store import (
    KeyShards,
    key_shard,
    keys_config,
    keys_table,
    normalize_key,
    shard_filename,
    write_keys_store,
)
from streamscope.format.parquet import (
    ParquetChunk,
    ParquetLoader,
    parquet_config,
    parquet_footer_range,
    parquet_info_from_footer,
)


def _table(n: int, start: int = 0) -> pa.Table:
    return pa.table(
        {
            "id": list(range(start, start + n)),
            "text": [f"row {i}" for i in range(start, start + n)],
            "score": [i / 4 for i in range(start, start + n)],
            "tags": [[i, i + 1] for i in range(start, start + n)],
            "blob": [bytes([i % 256]) * 3 for i in range(start, start + n)],
            "maybe": [None if i % 3 == 0 else i for i in range(start, start + n)],
            "meta": [{"a": i, "b": str(i)} for i in range(start, start + n)],
            "when": [dt.datetime(2024, 1, 1) + dt.timedelta(seconds=i) for i in range(start, start + n)],
        }
    )


def test_rows_are_dicts_of_python_values_across_row_groups(tmp_path: Any) -> None:
    path = str(tmp_path / "a.parquet")
    table = _table(23)
    pq.write_table(table, path, row_group_size=5)
    expected = table.to_pylist()
    for low_memory in (True, False):
        chunk = ParquetChunk(path, expected_rows=23, low_memory=low_memory)
        # random order crossing row groups, then every row
        order = [22, 0, 7, 6, 21, 12, 3] + list(range(23))
        assert [chunk.row(i) for i in order] == [expected[i] for i in order]
        assert chunk.rows([4, 5, 10]) == [expected[4], expected[5], expected[10]]
        chunk.close()
    row = ParquetChunk(path).row(4)
    assert row["meta"] == {"a": 4, "b": "4"} and row["blob"] == b"\x04\x04\x04" and row["maybe"] == 4
    assert row["when"] == dt.datetime(2024, 1, 1, 0, 0, 4) and row["tags"] == [4, 5]


def test_low_memory_keeps_few_row_groups_decoded(tmp_path: Any) -> None:
    path = str(tmp_path / "a.parquet")
    pq.write_table(_table(40), path, row_group_size=4)
    low = ParquetChunk(path, low_memory=True)
    high = ParquetChunk(path, low_memory=False)
    for i in range(40):
        low.row(i)
        high.row(i)
    assert len(low._groups) <= 2
    assert len(high._groups) == 10


def test_row_count_mismatch_and_bad_files_raise_naming_the_file(tmp_path: Any) -> None:
    path = str(tmp_path / "a.parquet")
    pq.write_table(_table(5), path)
    with pytest.raises(CorruptChunkError, match=r"a\.parquet.*5 rows.*chunk_size=6"):
        ParquetChunk(path, expected_rows=6)
    bad = tmp_path / "bad.parquet"
    bad.write_bytes(b"not parquet at all, just text")
    with pytest.raises(CorruptChunkError, match="bad.parquet"):
        ParquetChunk(str(bad))
    trunc = tmp_path / "trunc.parquet"
    trunc.write_bytes(Path(path).read_bytes()[:-20])
    with pytest.raises(CorruptChunkError, match="trunc.parquet"):
        ParquetChunk(str(trunc))
    with pytest.raises(FormatError, match="row 5 is outside"):
        ParquetChunk(path).row(5)


def test_footer_parsing_matches_the_file(tmp_path: Any) -> None:
    path = str(tmp_path / "a.parquet")
    pq.write_table(_table(17), path, row_group_size=4)
    data = Path(path).read_bytes()
    start, end = parquet_footer_range(len(data), data[-8:], "a.parquet")
    rows, types = parquet_info_from_footer(data[start:end], "a.parquet")
    assert rows == 17
    assert types == [str(f.type) for f in pq.ParquetFile(path).schema_arrow]
    with pytest.raises(CorruptChunkError, match="not a Parquet file"):
        parquet_footer_range(100, b"\x00" * 8, "x.parquet")
    with pytest.raises(CorruptChunkError, match="does not fit"):
        parquet_footer_range(20, (1000).to_bytes(4, "little") + b"PAR1", "x.parquet")


def test_loader_checks_the_index_and_pickles_its_arguments() -> None:
    import pickle

    cfg = parquet_config(["int64", "string"])
    assert cfg["item_loader"] == "ParquetLoader" and cfg["data_spec"] is None and cfg["compression"] is None
    loader = ParquetLoader(low_memory=False)
    loader.setup(cfg)
    again = pickle.loads(pickle.dumps(loader))
    assert again.low_memory is False and again._data_format == ["int64", "string"]
    assert isinstance(loader_for_config(cfg), ParquetLoader)
    with pytest.raises(FormatError, match="'PyTreeLoader' but is read with 'ParquetLoader'"):
        ParquetLoader().setup({**cfg, "item_loader": "PyTreeLoader"})


# --- keys sidecar -----------------------------------------------------------------------------------


def test_normalize_key() -> None:
    import numpy as np

    assert normalize_key(3) == 3 and normalize_key(np.int32(4)) == 4 and normalize_key(b"ab") == "ab"
    for bad in (True, None, 1.5, [1]):
        with pytest.raises(TypeError):
            normalize_key(bad)


def test_key_shard_is_blake2b_of_str_key() -> None:
    import hashlib

    for key in ("a", "sample-17", 5, 123456789):
        digest = hashlib.blake2b(str(key).encode(), digest_size=8).digest()
        assert key_shard(key, 7) == int.from_bytes(digest, "little") % 7
    assert key_shard("anything", 1) == 0


def test_keys_table_schema_sorting_and_duplicates() -> None:
    t = keys_table(["b", "a", 3], [0, 1, 2], [0, 0, 1], [0, 1, 2])
    assert t.schema.field("key").type == pa.large_string()
    assert t.column("key").to_pylist() == ["3", "a", "b"]  # mixed keys are stored as str(key), sorted
    assert t.column("index").to_pylist() == [2, 1, 0]
    assert [f.type for f in t.schema] == [pa.large_string(), pa.int64(), pa.int32(), pa.int32()]
    ints = keys_table([5, 1], [0, 1])
    assert ints.schema.field("key").type == pa.int64() and ints.column_names == ["key", "index"]
    with pytest.raises(DuplicateKeyError, match="'x'"):
        keys_table(["x", "y", "x"], [0, 1, 2])
    with pytest.raises(DuplicateKeyError):
        keys_table([1, "1"], [0, 1])  # both become "1"


def test_write_store_updates_index_json_and_resolves(tmp_path: Any) -> None:
    d = str(tmp_path)
    index = {"chunks": [], "config": {"item_loader": "PyTreeLoader"}, "updated_at": "1.5"}
    with open(os.path.join(d, "index.json"), "w") as f:
        json.dump(index, f, sort_keys=True)
    keys = [f"k{i}" for i in range(50)]
    out = write_keys_store(d, keys, list(range(50)), [i // 10 for i in range(50)], list(range(50)), num_shards=4)
    assert sorted(os.listdir(out)) == [shard_filename(s) for s in range(4)]
    saved = json.loads(Path(os.path.join(d, "index.json")).read_text())
    assert saved["keys"] == keys_config(4) == {"num_shards": 4, "sharding": "hash", "version": 1}
    assert saved["updated_at"] == "1.5"
    for s in range(4):
        t = pq.read_table(os.path.join(out, shard_filename(s)))
        assert all(key_shard(k, 4) == s for k in t.column("key").to_pylist())
        assert t.column("key").to_pylist() == sorted(t.column("key").to_pylist())
        assert pq.ParquetFile(os.path.join(out, shard_filename(s))).metadata.row_group(0).column(0).compression == (
            "ZSTD"
        )
    shards = KeyShards([lambda s=s: os.path.join(out, shard_filename(s)) for s in range(4)], ["s"] * 4, "hash")
    for i in (0, 17, 49):
        assert shards.resolve(f"k{i}") == (i, i // 10, i)
    assert shards.resolve("missing") is None and shards.resolve(17) is None
    with pytest.raises(FormatError, match="num_shards"):
        write_keys_store(d, keys, list(range(50)), num_shards=0)


def test_lookup_skips_row_groups_by_statistics(tmp_path: Any) -> None:
    path = str(tmp_path / "shard-00000.parquet")
    n = 200_000
    t = keys_table(list(range(n)), list(range(n)))
    pq.write_table(t, path, row_group_size=20_000)
    reads: list[int] = []

    class Counting(io.FileIO):
        def read(self, size: int = -1) -> bytes:  # type: ignore[override]
            data = super().read(size)
            reads.append(len(data))
            return data

    handles: list[io.FileIO] = []

    def open_counting() -> io.FileIO:
        handles.append(Counting(path))
        return handles[-1]

    shards = KeyShards([open_counting], [path])
    assert shards.resolve(155_555) == (155_555, -1, -1)
    assert sum(reads) < os.path.getsize(path) / 3  # footer + one of ten row groups, not the whole file
    assert shards.resolve("555") is None  # int keys never match a string (as in LitData)
    assert shards.resolve(n + 5) is None
    shards.close()  # closes the files its openers gave it (pyarrow alone leaves them to the garbage collector)
    assert handles and all(h.closed for h in handles)


@settings(max_examples=25, deadline=None)
@given(
    keys=st.one_of(
        st.lists(st.integers(-(2**62), 2**62), min_size=1, max_size=60, unique=True),
        st.lists(st.text(min_size=0, max_size=8), min_size=1, max_size=60, unique=True),
    ),
    num_shards=st.integers(1, 5),
)
def test_every_key_resolves_to_its_sample(tmp_path_factory: Any, keys: list[Any], num_shards: int) -> None:
    d = str(tmp_path_factory.mktemp("keys"))
    n = len(keys)
    out = write_keys_store(d, keys, list(range(n)), [i // 7 for i in range(n)], list(range(n)), num_shards=num_shards)
    paths = [os.path.join(out, shard_filename(s)) for s in range(num_shards)]
    shards = KeyShards([lambda p=p: p for p in paths], paths, "hash" if num_shards > 1 else "none")
    for i, k in enumerate(keys):
        assert shards.resolve(k) == (i, i // 7, i)


def test_columns_reads_only_those_columns(tmp_path: Any) -> None:
    """LitData 0.2.76's ``ParquetLoader(columns=[...])``: each row holds the chosen columns only."""
    import pickle

    path = str(tmp_path / "a.parquet")
    table = _table(12)
    pq.write_table(table, path, row_group_size=5)
    loader = pickle.loads(pickle.dumps(ParquetLoader(columns=["text", "id"])))
    chunk = loader.open_chunk(path, expected_rows=12)
    assert [loader.read_row(chunk, i) for i in (0, 7)] == [{"id": 0, "text": "row 0"}, {"id": 7, "text": "row 7"}]
    assert ParquetLoader().open_chunk(path).row(3) == table.to_pylist()[3]
    with pytest.raises(FormatError, match=r"a\.parquet.*no column \['nope'\]"):
        ParquetLoader(columns=["id", "nope"]).open_chunk(path)
