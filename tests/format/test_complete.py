"""complete_dataset / is_complete_dataset (LitData 0.2.76), and StreamingDataset finishing a folder itself."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from streamscope import complete_dataset, is_complete_dataset
from streamscope._core.errors import FormatError
from streamscope.engine.dataset import StreamingDataset
from streamscope.streaming.writer import BinaryWriter


def _write_shards(out: str, ranks: int = 2, n: int = 5) -> None:
    """What writers that never merged leave: chunks and one ``{rank}.index.json`` each."""
    for rank in range(ranks):
        os.environ["DATA_OPTIMIZER_GLOBAL_RANK"] = str(rank)  # the writer of rank ``rank``
        try:
            w = BinaryWriter(out, chunk_size=2)
            assert w.rank == rank
        finally:
            del os.environ["DATA_OPTIMIZER_GLOBAL_RANK"]
        for i in range(n):
            w[i] = {"rank": rank, "i": i}
        w.done()


def test_complete_dataset_merges_the_shards_in_rank_order(tmp_path: Any) -> None:
    out = str(tmp_path / "chunks")
    _write_shards(out)
    assert not is_complete_dataset(out)
    assert sorted(n for n in os.listdir(out) if n.endswith("index.json")) == ["0.index.json", "1.index.json"]
    assert complete_dataset(out) == out
    assert is_complete_dataset(out)
    assert [n for n in os.listdir(out) if n.endswith("index.json")] == ["index.json"]
    index = json.loads(Path(os.path.join(out, "index.json")).read_text())
    assert "updated_at" in index and [c["chunk_size"] for c in index["chunks"]] == [2, 2, 1, 2, 2, 1]
    ds = StreamingDataset(out)
    assert [(s["rank"], s["i"]) for s in ds] == [(r, i) for r in range(2) for i in range(5)]
    assert complete_dataset(out) == out  # nothing left to do


def test_streaming_dataset_completes_a_folder_of_shards(tmp_path: Any) -> None:
    out = str(tmp_path / "chunks")
    _write_shards(out, ranks=1)
    assert len(StreamingDataset(out)) == 5
    assert is_complete_dataset(out)


def test_nothing_to_complete_is_a_clear_error(tmp_path: Any) -> None:
    with pytest.raises(FileNotFoundError, match="does not exist"):
        complete_dataset(str(tmp_path / "missing"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="no index shards"):
        complete_dataset(str(tmp_path / "empty"))


def test_shards_of_different_configs_are_refused_naming_both(tmp_path: Any) -> None:
    out = str(tmp_path / "chunks")
    _write_shards(out)
    path = os.path.join(out, "1.index.json")
    part = json.loads(Path(path).read_text())
    part["config"]["chunk_size"] = 3
    Path(path).write_text(json.dumps(part))
    with pytest.raises(FormatError, match=r"'1\.index\.json' differs from '0\.index\.json' in \['chunk_size'\]"):
        complete_dataset(out)
    assert not is_complete_dataset(out)


def test_merge_written_ranks_merges_at_rank_0_and_waits_elsewhere(tmp_path: Any) -> None:
    from streamscope.format.complete import merge_written_ranks

    out = str(tmp_path / "chunks")
    _write_shards(out)
    with pytest.raises(FormatError, match="rank 1: .*index.json' did not appear"):
        merge_written_ranks(out, 1, 2, 0.05)  # not rank 0: waits for index.json only
    with pytest.raises(FormatError, match="2 of 3 per-rank index files"):
        merge_written_ranks(out, 0, 3, 0.05)
    merge_written_ranks(out, 0, 2, 5.0)
    assert [n for n in os.listdir(out) if n.endswith("index.json")] == ["index.json"]
    merge_written_ranks(out, 1, 2, 0.05)  # index.json is there: nothing to wait for
    assert [(s["rank"], s["i"]) for s in StreamingDataset(out)] == [(r, i) for r in range(2) for i in range(5)]
