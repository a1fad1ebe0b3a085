"""optimize(): every bad input is a clear error and leaves nothing that looks like a finished dataset."""

from __future__ import annotations

import os
import re

import pytest

from streamscope._core.errors import (
    ConfigError,
    DatasetExistsError,
    OptimizeInputError,
    OutputDirError,
    SchemaMismatchError,
    WorkerDiedError,
    WorkerFailedError,
)
from streamscope.processing import optimize
from tests.processing import _fns
from tests.processing.conftest import read_dataset, visible_files


def test_empty_inputs(tmp_path):
    out = str(tmp_path / "ds")
    with pytest.raises(OptimizeInputError, match="inputs is empty"):
        optimize(_fns.keep_even, [], out, chunk_size=2, verbose=False)
    assert not os.path.exists(out)


def test_unknown_compression(tmp_path):
    out = str(tmp_path / "ds")
    for bad in ("gzip", "zstd:0", "zstd:23", "zstd:x", "zstd:03", "ZSTD"):
        with pytest.raises(ConfigError, match=f"The provided compression {re.escape(bad)} isn.t available"):
            optimize(_fns.keep_even, [0], out, chunk_size=2, compression=bad, verbose=False)
    assert not os.path.exists(out)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({}, "chunk_size or chunk_bytes"),
        ({"chunk_size": 2, "chunk_bytes": 10}, "not both"),
        ({"chunk_size": 2, "mode": "replace"}, "mode must be"),
        ({"chunk_size": 0}, "positive"),
        ({"chunk_bytes": "12 parsecs"}, "cannot parse size"),
        ({"chunk_size": 2, "num_nodes": 2}, "Lightning platform"),
    ],
)
def test_bad_arguments(tmp_path, kwargs, match):
    with pytest.raises(ValueError, match=match):
        optimize(_fns.keep_even, [0, 1], str(tmp_path / "ds"), verbose=False, **kwargs)


def test_unwritable_output_dir(tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a directory")
    out = str(blocker / "ds")
    with pytest.raises(OutputDirError, match="a_file"):
        optimize(_fns.keep_even, [0, 1], out, chunk_size=2, verbose=False)


def test_unknown_mode_is_refused_with_litdatas_sentence(tmp_path):
    out = str(tmp_path / "ds")
    with pytest.raises(OptimizeInputError, match="^The provided `mode` should be either `append` or `overwrite`"):
        optimize(_fns.keep_even, [0], out, chunk_size=2, verbose=False, mode="some-random-mode")
    assert not os.path.exists(out)


def test_existing_dataset_with_mode_none(tmp_path):
    out = str(tmp_path / "ds")
    optimize(_fns.keep_even, list(range(8)), out, chunk_size=2, num_workers=1, verbose=False)
    before = read_dataset(out)
    with pytest.raises(DatasetExistsError, match="mode='overwrite'") as info:
        optimize(_fns.keep_even, list(range(4)), out, chunk_size=2, num_workers=1, verbose=False)
    assert read_dataset(out) == before
    assert isinstance(info.value, RuntimeError)  # LitData raises a RuntimeError, led by these words
    assert "HINT: If you want to append/overwrite to the existing dataset" in str(info.value)


def test_mixed_leaf_types_across_samples(tmp_path):
    out = str(tmp_path / "ds")
    with pytest.raises(WorkerFailedError, match=r"input 7 \(7\)") as info:
        optimize(_fns.mixed_types, list(range(20)), out, chunk_size=3, num_workers=1, verbose=False)
    assert isinstance(info.value.__cause__, SchemaMismatchError)
    assert isinstance(info.value, RuntimeError) and str(info.value).startswith("We found the following error")
    assert "float" in str(info.value)
    assert visible_files(out) == []


def test_mixed_leaf_types_across_workers(tmp_path):
    # input 7 is the first sample of worker 1, so each worker alone is consistent: caught at merge
    out = str(tmp_path / "ds")
    with pytest.raises(SchemaMismatchError, match="worker 1"):
        optimize(_fns.mixed_types, list(range(7)) + [7] * 7, out, chunk_size=3, num_workers=2, verbose=False)
    assert visible_files(out) == []


def test_exception_in_fn_names_input_and_cleans_up(tmp_path):
    out = str(tmp_path / "ds")
    with pytest.raises(WorkerFailedError, match=r"failed on input 13 \(13\)") as info:
        optimize(_fns.fail_on_13, list(range(40)), out, chunk_size=2, num_workers=2, verbose=False)
    assert isinstance(info.value.__cause__, KeyError)
    assert "input 13 is bad" in str(info.value)
    assert "Worker traceback" in str(info.value)
    assert visible_files(out) == []  # no index.json, no chunks, no staging dir


def test_killed_worker_is_noticed(tmp_path):
    out = str(tmp_path / "ds")
    with pytest.raises(WorkerDiedError, match="killed by signal 9"):
        optimize(_fns.die_hard, list(range(20)), out, chunk_size=2, num_workers=2, verbose=False)
    assert visible_files(out) == []


def test_failed_append_keeps_the_old_dataset_intact(tmp_path):
    out = str(tmp_path / "ds")
    optimize(_fns.fail_on_13, list(range(10)), out, chunk_size=2, num_workers=2, verbose=False)
    before = read_dataset(out)
    with pytest.raises(WorkerFailedError):
        optimize(_fns.fail_on_13, list(range(10, 30)), out, chunk_size=2, num_workers=2, verbose=False, mode="append")
    assert read_dataset(out) == before
    assert visible_files(out) == sorted(["index.json"] + list(before[1]))


def test_unpicklable_fn_with_spawn(tmp_path):
    out = str(tmp_path / "ds")
    with pytest.raises(OptimizeInputError, match="picklable"):
        optimize(lambda i: {"i": i}, [1, 2], out, chunk_size=2, num_workers=1, start_method="spawn", verbose=False)
    assert visible_files(out) == []
