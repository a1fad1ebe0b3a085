"""streamscope.processing.data_processor: LitData's recipe API run through optimize()/map()."""

from __future__ import annotations

import os

import pytest

from streamscope import StreamingDataset
from streamscope.processing.data_processor import ALL_DONE, DataChunkRecipe, DataProcessor, DataRecipe, MapRecipe
from tests.processing import _fns


def test_chunk_recipe_writes_what_optimize_writes(tmp_path):
    out = str(tmp_path / "out")
    DataProcessor(input_dir=None, output_dir=out, num_workers=2, fast_dev_run=False, verbose=False).run(
        _fns.Numbers(30, chunk_size=4)
    )
    assert [s["i"] for s in StreamingDataset(out)] == list(range(30))


def test_default_output_and_fast_dev_run_follow_litdata(tmp_path, monkeypatch):
    """No output_dir: DATA_OPTIMIZER_CACHE_FOLDER. fast_dev_run=None: DATA_OPTIMIZER_FAST_DEV_RUN, default on (10)."""
    monkeypatch.setenv("DATA_OPTIMIZER_CACHE_FOLDER", str(tmp_path / "cache"))
    monkeypatch.delenv("DATA_OPTIMIZER_FAST_DEV_RUN", raising=False)
    DataProcessor(input_dir=None, num_workers=1, verbose=False).run(_fns.Numbers(30, chunk_size=4))
    assert len(StreamingDataset(str(tmp_path / "cache"))) == 10
    monkeypatch.setenv("DATA_OPTIMIZER_FAST_DEV_RUN", "0")
    DataProcessor(input_dir=None, num_workers=1, verbose=False).run(_fns.Numbers(30, chunk_size=4))
    assert len(StreamingDataset(str(tmp_path / "cache"))) == 30  # a second run replaces the dataset


def test_recipe_defaults_and_argument_errors(tmp_path):
    r = _fns.Numbers(3)
    assert (r.chunk_size, r.chunk_bytes) == (None, 1 << 26)  # LitData's default: 64 MiB chunks
    with pytest.raises(ValueError, match="Either one of the `chunk_size` or the `chunk_bytes`"):
        _fns.Numbers(3, chunk_size=2, chunk_bytes=10)
    with pytest.raises(ValueError, match="Either the reader or the weights"):
        DataProcessor(input_dir=None, reader=object(), weights=[1])
    dp = DataProcessor(input_dir=None, output_dir=str(tmp_path / "o"), num_workers=1, align_chunking=True)
    with pytest.raises(ValueError, match="`chunk_size` is not defined in the data recipe"):
        dp.run(_fns.Numbers(3, chunk_bytes="10MB"))
    with pytest.raises(ValueError, match="should be a data recipe"):
        dp.run(object())  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="should return a list of item metadata or a Queue"):
        dp.run(_fns.NotAList(chunk_size=2))
    with pytest.raises(NotImplementedError, match="prepare_structure"):
        dp.run(DataChunkRecipe(chunk_size=2))
    with pytest.raises(ValueError, match="neither a DataChunkRecipe nor a MapRecipe"):
        dp.run(type("Plain", (DataRecipe,), {"prepare_structure": lambda self, d: [1]})())
    assert ALL_DONE == "ALL_DONE" and issubclass(MapRecipe, DataRecipe)
    assert not os.path.exists(tmp_path / "o" / "index.json")
