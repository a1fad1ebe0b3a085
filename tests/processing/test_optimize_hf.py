"""optimize_hf against the Hugging Face Hub emulator (tests/support/hf_hub.py), then the result streamed."""

from __future__ import annotations

import io
import os
import uuid
from collections.abc import Iterator

import pytest

from streamscope._core.errors import IndexNotFoundError, ObjectNotFoundError
from tests.support.hf_hub import HFHub

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")
pytest.importorskip("huggingface_hub")


def _parquet(ids: list[int]) -> bytes:
    buf = io.BytesIO()
    table = pa.table(
        {"id": ids, "tags": [["t"] * (i % 3) for i in ids], "note": [None if i % 2 else f"n{i}" for i in ids]}
    )
    pq.write_table(table, buf)
    return buf.getvalue()


@pytest.fixture(scope="module")
def hub() -> Iterator[HFHub]:
    with HFHub() as h:
        yield h


@pytest.fixture
def repo(hub: HFHub) -> str:
    repo = f"opt/{uuid.uuid4().hex[:10]}"
    hub.create_repo(repo)
    hub.put(repo, "data/train-00000-of-00002.parquet", _parquet(list(range(0, 6))))
    hub.put(repo, "data/train-00001-of-00002.parquet", _parquet(list(range(6, 10))))
    hub.put(repo, "data/test-00000-of-00001.parquet", _parquet([100, 101]))
    hub.put(repo, "README.md", b"card")
    return repo


def test_optimize_hf_split_then_stream(hub: HFHub, repo: str, tmp_path) -> None:
    import streamscope as ss

    opts = {"endpoint": hub.endpoint}
    out = str(tmp_path / "out")
    assert (
        ss.optimize_hf(
            repo, out, split="train", chunk_size=4, num_workers=2, cache_dir=str(tmp_path / "c"), storage_options=opts
        )
        == out
    )
    ds = ss.StreamingDataset(out)
    rows = sorted((ds[i] for i in range(len(ds))), key=lambda r: r["id"])
    assert [r["id"] for r in rows] == list(range(10))
    assert rows[5] == {"id": 5, "tags": ["t", "t"], "note": None} and rows[4]["note"] == "n4"
    before = len(hub.requests)
    assert ss.optimize_hf(repo, out, split="train", storage_options=opts) == out  # done already: no Hub request
    assert len(hub.requests) == before


def test_optimize_hf_fn_columns_revision(hub: HFHub, repo: str, tmp_path) -> None:
    import streamscope as ss

    hub.put(repo, "default/test/0000.parquet", _parquet([7, 8, 9]), revision="refs/convert/parquet")
    out = str(tmp_path / "out")
    ss.optimize_hf(
        repo,
        out,
        split="test",
        config="default",
        columns=["id"],
        fn=_double,
        num_workers=1,
        cache_dir=str(tmp_path / "c"),
        storage_options={"endpoint": hub.endpoint},
    )
    ds = ss.StreamingDataset(out)
    assert sorted(ds[i]["twice"] for i in range(len(ds))) == [14, 16, 18]  # refs/convert/parquet comes first


def _double(row: dict) -> dict:
    return {"twice": row["id"] * 2}


def test_optimize_hf_errors(hub: HFHub, tmp_path) -> None:
    import streamscope as ss

    opts = {"endpoint": hub.endpoint}
    empty = f"opt/{uuid.uuid4().hex[:10]}"
    hub.create_repo(empty)
    hub.put(empty, "README.md", b"no data yet")
    with pytest.raises(IndexNotFoundError, match="No parquet files found"):
        ss.optimize_hf(empty, str(tmp_path / "a"), split="train", revision="v0", storage_options=opts)
    with pytest.raises(ObjectNotFoundError, match="no such dataset repository"):
        ss.optimize_hf("opt/missing-repo", str(tmp_path / "b"), storage_options=opts)
    assert not os.path.exists(tmp_path / "b" / "index.json")
