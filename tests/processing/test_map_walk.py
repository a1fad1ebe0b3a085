"""map() and walk()."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from streamscope._core.errors import MapReturnError, OptimizeInputError, WorkerFailedError
from streamscope.processing import map as ss_map
from streamscope.processing import walk
from tests.processing import _fns
from tests.processing.conftest import visible_files


def test_map_publishes_files_with_relative_paths(tmp_path):
    out = str(tmp_path / "out")
    ss_map(_fns.write_files, list(range(9)), out, num_workers=2)
    assert visible_files(out) == sorted(f"d{i % 3}/f{i}.txt" for i in range(9))
    assert (tmp_path / "out" / "d1" / "f4.txt").read_text() == "content 4"


def test_map_fn_returning_a_value_is_a_value_error(tmp_path):
    out = str(tmp_path / "out")
    with pytest.raises(MapReturnError, match="return None") as info:
        ss_map(_fns.return_something, [1, 2, 3], out, num_workers=1)
    assert isinstance(info.value, ValueError)
    assert visible_files(out) == []


def test_map_exception_names_input(tmp_path):
    with pytest.raises(WorkerFailedError, match="input 2"):
        ss_map(_fns.write_files, [0, 1, "x"], str(tmp_path / "out"), num_workers=1)


@pytest.mark.parametrize("ordered", [True, False])
def test_map_passes_device_and_is_last_to_a_callable_that_names_them(tmp_path, ordered):
    out = str(tmp_path / "out")
    ss_map(_fns.RecordArgs(), list(range(6)), out, num_workers=2, keep_data_ordered=ordered)
    got = {int(n[:-4]): Path(os.path.join(out, n)).read_text() for n in os.listdir(out)}
    last = {2, 5} if ordered else set()  # each worker's last input; none from the shared queue
    assert got == {i: f"None {i in last}" for i in range(6)}  # no CUDA here: device None, as LitData


def test_map_error_when_not_empty(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("x")
    with pytest.raises(OptimizeInputError, match="not empty"):
        ss_map(_fns.write_files, [0], str(out), error_when_not_empty=True)
    with pytest.raises(OptimizeInputError, match="empty"):
        ss_map(_fns.write_files, [], str(out))


def test_walk_matches_os_walk(tmp_path):
    for d in ("a/b/c", "a/d", "e"):
        (tmp_path / d).mkdir(parents=True)
    for f in ("top.txt", "a/x.txt", "a/b/y.txt", "a/b/c/z.txt", "e/w.txt"):
        (tmp_path / f).write_text(f)
    ours = {folder: (sorted(dirs), sorted(files)) for folder, dirs, files in walk(str(tmp_path), max_workers=3)}
    theirs = {folder: (sorted(dirs), sorted(files)) for folder, dirs, files in os.walk(str(tmp_path))}
    assert ours == theirs
    order1 = [f for f, _, _ in walk(str(tmp_path), max_workers=2)]
    order2 = [f for f, _, _ in walk(str(tmp_path), max_workers=4)]
    assert order1 == order2  # deterministic, whatever the thread timing
    assert order1[0] == str(tmp_path)


def test_walk_missing_folder_raises(tmp_path):
    with pytest.raises(FileNotFoundError):
        list(walk(str(tmp_path / "nope")))
