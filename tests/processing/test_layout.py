"""optimize() and the ``write_format`` knob: the layout of a new dataset, an append that keeps the layout of the
dataset it extends (whatever the knob says), types fused across workers and appends, arguments refused before
any worker starts, and a resumed 0.2.76 job equal to an uninterrupted one."""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import pytest

from streamscope._core.errors import ConfigError, SchemaMismatchError, WorkerDiedError
from streamscope.format.writer import layout_of
from streamscope.processing import optimize
from streamscope.utilities.encryption import FernetEncryption
from tests.format.conftest import same
from tests.processing import _fns, _layout_fns
from tests.processing._read import read_samples
from tests.processing.conftest import read_dataset, visible_files

V076_KEYS = {"types", "compression_level", "compression_batch_size", "ipc_compression"}


def _row(i: int) -> dict[str, Any]:
    return {"id": f"k{i}", "n": i, "s": "v" * (i % 7)}


def _row_opt(i: int) -> dict[str, Any]:
    """``_row`` whose ``s`` is None on odd samples (the first appended sample, 10, has it)."""
    return {**_row(i), "s": None if i % 2 else "w"}


def _arr(i: int) -> dict[str, Any]:
    return {"a": np.full((2, 2), i, dtype=np.int32), "i": i}


@pytest.fixture
def knob(monkeypatch: pytest.MonkeyPatch) -> Any:
    def set_to(value: str | None) -> None:
        if value is None:
            monkeypatch.delenv("STREAMSCOPE_WRITE_FORMAT", raising=False)
        else:
            monkeypatch.setenv("STREAMSCOPE_WRITE_FORMAT", value)

    return set_to


def test_default_is_0_2_76(tmp_path: Any, knob: Any) -> None:
    knob(None)
    out = str(tmp_path)
    optimize(_row, list(range(10)), out, chunk_size=4, num_workers=1, verbose=False)
    index, chunks = read_dataset(out)
    assert V076_KEYS <= set(index["config"]) and index["config"]["types"] == {"id": "str", "n": "int", "s": "str"}
    assert all(data.endswith(b"LDARW01\0") for data in chunks.values())
    assert read_samples(out) == [_row(i) for i in range(10)]


def test_append_to_a_0_2_68_dataset_keeps_its_layout(tmp_path: Any, knob: Any) -> None:
    out = str(tmp_path)
    knob("0.2.68")
    optimize(_row, list(range(10)), out, chunk_size=4, compression="zstd", num_workers=1, verbose=False)
    before, _ = read_dataset(out)
    knob("0.2.76")
    optimize(
        _row, list(range(10, 16)), out, chunk_size=4, compression="zstd", num_workers=1, mode="append", verbose=False
    )
    index, chunks = read_dataset(out)
    assert index["config"] == before["config"] and layout_of(index["config"]) == "0.2.68"
    assert [c["filename"] for c in index["chunks"]][-2:] == ["chunk-0-3.zstd.bin", "chunk-0-4.zstd.bin"]
    assert all(data.startswith(b"\x28\xb5\x2f\xfd") for data in chunks.values())  # whole-file zstd, as 0.2.68
    assert read_samples(out) == [_row(i) for i in range(16)]


def test_append_to_a_0_2_76_dataset_keeps_its_layout(tmp_path: Any, knob: Any) -> None:
    rows, framed, whole = str(tmp_path / "rows"), str(tmp_path / "framed"), str(tmp_path / "whole")
    knob("0.2.76")
    optimize(_row, list(range(10)), rows, chunk_size=4, num_workers=1, verbose=False)
    optimize(_arr, list(range(10)), framed, chunk_size=4, compression="zstd", num_workers=1, verbose=False)
    optimize(_arr, list(range(10)), whole, chunk_size=4, compression="zstd", compression_level="chunk", num_workers=1)
    knob("0.2.68")  # the appends keep 0.2.76's layout and settings anyway
    optimize(_row_opt, list(range(10, 15)), rows, chunk_size=4, num_workers=1, mode="append", verbose=False)
    optimize(_arr, list(range(10, 15)), framed, chunk_size=4, compression="zstd", mode="append", num_workers=1)
    optimize(_arr, list(range(10, 15)), whole, chunk_size=4, compression="zstd", mode="append", num_workers=1)

    index, chunks = read_dataset(rows)
    # the appended rows' None made the field optional in the fused schema; the leaves are unchanged
    assert index["config"]["types"] == {"id": "str", "n": "int", "s": {"optional": True, "type": "str"}}
    assert index["config"]["data_format"] == ["str", "int", "str"]
    assert all(data.endswith(b"LDARW01\0") for data in chunks.values())
    assert read_samples(rows) == [_row(i) for i in range(10)] + [_row_opt(i) for i in range(10, 15)]

    index, chunks = read_dataset(framed)
    assert (index["config"]["compression_level"], index["config"]["compression_batch_size"]) == ("batch", 256)
    assert len(chunks) == 3 + 2 and all(data.startswith(b"LDFZ01\0\0") for data in chunks.values())
    index, chunks = read_dataset(whole)
    assert index["config"]["compression_level"] is None and layout_of(index["config"]) == "0.2.76"
    assert all(name.endswith(".zstd.bin") for name in chunks) and len(chunks) == 5
    for d in (framed, whole):
        assert all(same(a, b) for a, b in zip(read_samples(d), [_arr(i) for i in range(15)]))


def test_append_with_other_settings_is_refused_with_litdatas_sentence(tmp_path: Any, knob: Any) -> None:
    out = str(tmp_path)
    knob(None)
    optimize(_arr, list(range(6)), out, chunk_size=4, compression="zstd", num_workers=1, verbose=False)
    before = visible_files(out)
    with pytest.raises(SchemaMismatchError, match="^The config isn't consistent between chunks"):
        optimize(_arr, list(range(6, 9)), out, chunk_size=4, num_workers=1, mode="append", verbose=False)
    assert visible_files(out) == before  # the refused append left nothing behind


def test_two_workers_fuse_their_types(tmp_path: Any, knob: Any) -> None:
    knob(None)
    out = str(tmp_path)
    optimize(_layout_fns.fused, list(range(20)), out, chunk_size=4, num_workers=2, verbose=False)
    index, _ = read_dataset(out)
    assert {c["filename"].split("-")[1] for c in index["chunks"]} == {"0", "1"}  # both workers wrote chunks
    # worker 0 saw lists of ints, worker 1 lists of strings: fused through config.types as LitData's merge does
    assert index["config"]["types"] == {
        "id": "str",
        "n": "int",
        "vals": {"type": "list", "value": "json"},
        "note": {"optional": True, "type": "str"},
    }
    assert read_samples(out) == [_layout_fns.fused(i) for i in range(20)]


@pytest.mark.parametrize(
    ("kw", "knob_value", "match"),
    [
        ({"compression": "zstd", "encryption": "key"}, None, "does not support encryption"),
        ({"compression": "zstd", "compression_level": "batch"}, "0.2.68", "need LitData 0.2.76's layout"),
        ({"compression": "zstd", "compression_level": 3}, None, "not a zstd numeric level"),
        ({"compression": "gzip", "compression_level": "sample"}, None, "only supported with compression='zstd'"),
        ({}, "0.2.69", "STREAMSCOPE_WRITE_FORMAT"),
    ],
)
def test_bad_write_arguments_are_refused_before_any_work(
    tmp_path: Any, knob: Any, kw: dict[str, Any], knob_value: str | None, match: str
) -> None:
    knob(knob_value)
    if kw.get("encryption") == "key":
        kw = {**kw, "encryption": FernetEncryption(password="pw", level="chunk")}
    out = str(tmp_path / "out")
    with pytest.raises(ConfigError, match=match):
        optimize(_fns.fail_on_13, list(range(5)), out, chunk_size=2, num_workers=1, verbose=False, **kw)
    assert not os.path.exists(out)


def test_append_with_a_level_to_a_0_2_68_dataset_names_its_layout(tmp_path: Any, knob: Any) -> None:
    out = str(tmp_path)
    knob("0.2.68")
    optimize(_row, list(range(4)), out, chunk_size=4, compression="zstd", num_workers=1, verbose=False)
    knob(None)
    with pytest.raises(ConfigError, match="the dataset appended to has LitData 0.2.68's"):
        optimize(_row, [4], out, chunk_size=4, compression="zstd", compression_level="sample", mode="append")


def test_resumed_0_2_76_job_equals_uninterrupted(tmp_path: Any, knob: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    knob(None)
    ref, out = str(tmp_path / "ref"), str(tmp_path / "out")

    def run(path: str, **kw: Any) -> None:
        optimize(_fns.kill_rows_on_flag, list(range(120)), path, chunk_bytes=300, num_workers=2, verbose=False, **kw)

    run(ref)
    flag = tmp_path / "kill.flag"
    flag.write_text("x")
    monkeypatch.setenv(_fns.KILL_FLAG_ENV, str(flag))
    monkeypatch.setenv(_fns.KILL_AT_ENV, "97")
    with pytest.raises(WorkerDiedError):
        run(out, use_checkpoint=True)
    flag.unlink()
    run(out, use_checkpoint=True)
    ref_index, ref_chunks = read_dataset(ref)
    assert ref_index["config"]["types"]["note"] == {"optional": True, "type": "str"}
    assert all(data.endswith(b"LDARW01\0") for data in ref_chunks.values())
    assert read_dataset(out) == (ref_index, ref_chunks)


def test_chunk_recipe_passes_the_compression_level(tmp_path: Any, knob: Any) -> None:
    from streamscope.processing.data_processor import DataProcessor  # noqa: PLC0415

    knob(None)
    out = str(tmp_path / "out")
    recipe = _fns.Arrays(9, chunk_size=4, compression="zstd", compression_level="sample")
    assert (recipe.compression_level, recipe.compression_batch_size) == ("sample", None)
    DataProcessor(input_dir=None, output_dir=out, num_workers=1, fast_dev_run=False, verbose=False).run(recipe)
    index, chunks = read_dataset(out)
    assert (index["config"]["compression"], index["config"]["compression_level"]) == ("zstd", "sample")
    assert all(name.endswith(".bin") and "zstd" not in name for name in chunks)
    assert [s["i"] for s in read_samples(out)] == list(range(9))


def test_merge_datasets_keeps_framed_names_and_fuses_types(tmp_path: Any, knob: Any) -> None:
    from streamscope.processing.merge import merge_datasets  # noqa: PLC0415

    knob(None)
    a, b, out = (str(tmp_path / n) for n in ("a", "b", "out"))
    optimize(_arr, list(range(5)), a, chunk_size=4, compression="zstd", num_workers=1, verbose=False)
    optimize(_arr, list(range(5, 9)), b, chunk_size=4, compression="zstd", num_workers=1, verbose=False)
    merge_datasets([a, b], out)
    index, chunks = read_dataset(out)
    assert list(chunks) == ["chunk-0-0.bin", "chunk-0-1.bin", "chunk-0-2.bin"]  # framed zstd stays .bin
    assert all(data.startswith(b"LDFZ01\0\0") for data in chunks.values())
    assert all(same(x, y) for x, y in zip(read_samples(out), [_arr(i) for i in range(9)]))
    rows_a, rows_b, rows_out = (str(tmp_path / n) for n in ("ra", "rb", "rout"))
    optimize(_row, list(range(3)), rows_a, chunk_size=4, num_workers=1, verbose=False)
    optimize(_row_opt, list(range(4, 7)), rows_b, chunk_size=4, num_workers=1, verbose=False)
    merge_datasets([rows_a, rows_b], rows_out)
    assert read_dataset(rows_out)[0]["config"]["types"]["s"] == {"optional": True, "type": "str"}
