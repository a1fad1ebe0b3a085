"""optimize(queue=...), keep_data_ordered=False, ParquetReader and output_dir time templates."""

from __future__ import annotations

import multiprocessing as mp
import os
import time
from typing import Any

import numpy as np
import pytest

from streamscope._core.errors import OptimizeInputError, WorkerFailedError
from streamscope.processing import map as ss_map
from streamscope.processing import optimize
from streamscope.processing.data_processor import ALL_DONE, is_all_done
from streamscope.processing.functions import expand_time_template
from tests.processing.conftest import read_dataset


def square(i: int) -> Any:
    return {"i": i, "sq": i * i}


def fail_on_7(i: int) -> Any:
    if i == 7:
        raise ValueError("seven")
    return i


def test_all_done_sentinel_is_not_confused_with_arrays() -> None:
    assert is_all_done(ALL_DONE)
    assert not is_all_done(np.array(["ALL_DONE", "x"]))
    assert not is_all_done(("ALL_DONE",))


def test_shared_queue_writes_every_input_once(tmp_path: Any) -> None:
    out = str(tmp_path / "o")
    optimize(square, list(range(50)), out, chunk_size=4, num_workers=2, keep_data_ordered=False, verbose=False)
    index, chunks = read_dataset(out)
    assert sum(c["chunk_size"] for c in index["chunks"]) == 50
    assert {c["filename"].split("-")[1] for c in index["chunks"]} <= {"0", "1"}


def test_shared_queue_failure_names_the_input(tmp_path: Any) -> None:
    out = str(tmp_path / "o")
    with pytest.raises(WorkerFailedError, match="input 7"):
        optimize(fail_on_7, list(range(20)), out, chunk_size=4, num_workers=2, keep_data_ordered=False, verbose=False)
    assert not os.path.exists(os.path.join(out, "index.json"))


def test_user_queue_single_sentinel_stops_all_workers(tmp_path: Any) -> None:
    q: Any = mp.Queue()
    for i in range(30):
        q.put(i)
    q.put(ALL_DONE)
    out = str(tmp_path / "o")
    optimize(square, queue=q, output_dir=out, chunk_size=8, num_workers=3, verbose=False)
    index, _ = read_dataset(out)
    assert sum(c["chunk_size"] for c in index["chunks"]) == 30


@pytest.mark.parametrize("kw", [{"queue": "q"}, {"keep_data_ordered": False}])
def test_checkpoint_needs_a_fixed_split(tmp_path: Any, kw: dict[str, Any]) -> None:
    args: dict[str, Any] = {"inputs": [1, 2]}
    if "queue" in kw:
        args = {"queue": mp.Queue()}
    else:
        args.update(kw)
    with pytest.raises(OptimizeInputError, match="use_checkpoint"):
        optimize(square, output_dir=str(tmp_path / "o"), chunk_size=2, use_checkpoint=True, **args)


def test_queue_must_be_a_queue(tmp_path: Any) -> None:
    with pytest.raises(OptimizeInputError, match="multiprocessing.Queue"):
        optimize(square, queue=[1, 2], output_dir=str(tmp_path / "o"), chunk_size=2)


def test_time_template() -> None:
    day = time.strftime("%Y-%m-%d")
    assert expand_time_template("/d/run_{%Y-%m-%d}") == f"/d/run_{day}"
    assert expand_time_template("/d/{%Y}/x_{%m}") == f"/d/{day[:4]}/x_{day[5:7]}"
    assert expand_time_template("/d/{plain}") == "/d/{plain}"


def test_parquet_reader_validates_and_reuses_shards(tmp_path: Any) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from streamscope.processing.readers import ParquetReader

    with pytest.raises(OptimizeInputError, match="num_rows"):
        ParquetReader(str(tmp_path / "c"), num_rows=0)
    p = str(tmp_path / "a.parquet")
    pq.write_table(pa.table({"x": list(range(5))}), p)
    reader = ParquetReader(str(tmp_path / "c"), num_rows=2)
    shards = reader.remap_items([p], 2)
    assert [os.path.basename(s) for s in shards] == ["0_2_a.parquet", "2_4_a.parquet", "4_5_a.parquet"]
    mtimes = [os.path.getmtime(s) for s in shards]
    assert reader.remap_items([p], 2) == shards and [os.path.getmtime(s) for s in shards] == mtimes
    assert reader.read(shards[1]).read().column("x").to_pylist() == [2, 3]
    with pytest.raises(OptimizeInputError, match="not a local parquet file"):
        reader.remap_items([str(tmp_path / "missing.parquet")], 1)


def test_parquet_reader_columns_and_filters_read_a_table(tmp_path: Any) -> None:
    """LitData 0.2.76's ``columns``/``filters``: ``read`` returns a pyarrow Table of those columns and rows."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from streamscope.processing.readers import ParquetReader

    p = str(tmp_path / "a.parquet")
    pq.write_table(pa.table({"x": list(range(6)), "y": [str(i) for i in range(6)]}), p)
    table = ParquetReader(str(tmp_path / "c"), columns=["y"], filters=[("x", ">=", 3)]).read(p)
    assert table.to_pydict() == {"y": ["3", "4", "5"]}
    assert ParquetReader(str(tmp_path / "c"), columns=["x"]).read(p).column_names == ["x"]
    assert isinstance(ParquetReader(str(tmp_path / "c")).read(p), pq.ParquetFile)


def write_marker(item: Any, output_dir: str) -> None:
    with open(os.path.join(output_dir, f"m{item}"), "w") as f:
        f.write(str(item))


def test_map_shared_queue_and_time_template(tmp_path: Any) -> None:
    out = str(tmp_path / "run_{%Y}")
    ss_map(write_marker, list(range(9)), out, num_workers=2, keep_data_ordered=False)
    assert sorted(os.listdir(tmp_path / f"run_{time.strftime('%Y')}")) == sorted(f"m{i}" for i in range(9))
