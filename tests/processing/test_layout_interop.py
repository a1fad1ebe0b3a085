"""optimize(mode="append") across engines, both directions, in the layout of the LitData these tests meet.

The real LitData is whichever ``import litdata`` loads (0.2.68 from the venv, or 0.2.76 first on the path); the
tests conftest sets ``write_format`` to its layout, so streamscope writes what that LitData writes. For each case
(JSON-like dict rows, tensors, zstd, a json leaf):

* streamscope writes samples 0..19, LitData appends 20..29 to it, and reads all 30 back;
* LitData writes samples 0..19, streamscope appends 20..29 to it, and LitData reads all 30 back;

and every dataset keeps the layout it was written in. With LitData 0.2.76, a two-worker optimize whose workers
infer different types must give the same index (fused ``types``) and chunk bytes in both engines.

LitData runs in subprocesses (its optimize spawns workers from an importable module), two of them per test.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
from typing import Any

import pytest

from streamscope.format.writer import layout_of
from streamscope.processing import optimize
from tests.processing import _layout_fns
from tests.processing.conftest import read_dataset

litdata = pytest.importorskip("litdata")
pytestmark = [pytest.mark.interop, pytest.mark.slow, pytest.mark.filterwarnings("ignore:A newer version of litdata")]

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LAYOUT = "0.2.76" if tuple(int(p) for p in litdata.__version__.split(".")[:3]) >= (0, 2, 76) else "0.2.68"
CASES = ["rows", "tensors", "zstd", "json_leaf"]


def _run_litdata(tmp: str, ops: list[list[Any]], name: str) -> None:
    """Run ``ops`` (see ``_layout_script``) in one process of the LitData this test imported."""
    ops_file = os.path.join(tmp, f"{name}.json")
    with open(ops_file, "w") as f:
        json.dump(ops, f)
    env = dict(os.environ)
    here = os.path.dirname(os.path.dirname(os.path.abspath(litdata.__file__)))
    site = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    # the same LitData, the tests package, and none of streamscope's sources
    env["PYTHONPATH"] = os.pathsep.join(([] if here in site else [here]) + [ROOT])
    env["LITDATA_DISABLE_VERSION_CHECK"] = "1"
    env["DATA_OPTIMIZER_CACHE_FOLDER"] = os.path.join(tmp, f"{name}-stage")
    env["DATA_OPTIMIZER_DATA_CACHE_FOLDER"] = os.path.join(tmp, f"{name}-dstage")
    proc = subprocess.run(
        [sys.executable, "-m", "tests.processing._layout_script", ops_file],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, f"LitData {litdata.__version__} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"


def _ours(out: str, case: str, start: int, end: int, mode: str | None = None, workers: int = 1) -> None:
    fn = _layout_fns.fn_of(case, LAYOUT)
    kwargs = _layout_fns.CASES[case][1]
    optimize(fn, list(range(start, end)), out, num_workers=workers, mode=mode, verbose=False, **kwargs)


def _read(path: str) -> list[Any]:
    with open(path) as f:
        got = json.load(f)
    assert got["version"] == litdata.__version__
    return got["samples"]


def _expected(case: str, n: int) -> list[Any]:
    fn = _layout_fns.fn_of(case, LAYOUT)
    return [json.loads(json.dumps(_layout_fns.plain(fn(i)))) for i in range(n)]


def _check_layout(path: str, case: str) -> None:
    """The chunks and config are in LAYOUT (what LitData of that version writes for the case)."""
    index, chunks = read_dataset(path)
    config = index["config"]
    assert layout_of(config) == LAYOUT, config
    names = [c["filename"] for c in index["chunks"]]
    if LAYOUT == "0.2.68":
        assert not any(data.endswith(b"LDARW01\0") or data.startswith(b"LDFZ01") for data in chunks.values())
        if case == "zstd":
            assert all(n.endswith(".zstd.bin") for n in names)
        return
    assert set(config) >= {"types", "compression_level", "compression_batch_size", "ipc_compression"}
    if case == "rows":  # JSON-like rows: every chunk ends with the Arrow footer
        assert all(data.endswith(b"LDARW01\0") for data in chunks.values())
    if case == "zstd":  # framed zstd inside plain .bin files
        assert all(n.endswith(".bin") and ".zstd" not in n for n in names)
        assert all(data.startswith(b"LDFZ01\0\0") for data in chunks.values())
        assert (config["compression"], config["compression_level"], config["compression_batch_size"]) == (
            "zstd",
            "batch",
            256,
        )
    if case == "json_leaf":
        assert "json" in config["data_format"]


def test_append_across_engines_both_ways(tmp_path: Any) -> None:
    tmp = str(tmp_path)
    ours = {c: os.path.join(tmp, "ours", c) for c in CASES}
    theirs = {c: os.path.join(tmp, "theirs", c) for c in CASES}
    for c in CASES:
        _ours(ours[c], c, 0, 20)
        _check_layout(ours[c], c)
    ops: list[list[Any]] = []
    for c in CASES:
        ops.append(["optimize", ours[c], c, LAYOUT, 20, 30, "append", 1])
        ops.append(["optimize", theirs[c], c, LAYOUT, 0, 20, None, 1])
        ops.append(["read", ours[c], os.path.join(tmp, f"read-ours-{c}.json")])
    _run_litdata(tmp, ops, "first")
    for c in CASES:
        _check_layout(theirs[c], c)
        _ours(theirs[c], c, 20, 30, mode="append")
    _run_litdata(tmp, [["read", theirs[c], os.path.join(tmp, f"read-theirs-{c}.json")] for c in CASES], "second")
    for c in CASES:
        want = _expected(c, 30)
        assert _read(os.path.join(tmp, f"read-ours-{c}.json")) == want, f"{c}: LitData's append to ours"
        assert _read(os.path.join(tmp, f"read-theirs-{c}.json")) == want, f"{c}: our append to LitData's"
        for d in (ours[c], theirs[c]):
            _check_layout(d, c)
            assert sum(e["chunk_size"] for e in read_dataset(d)[0]["chunks"]) == 30


@pytest.mark.skipif(LAYOUT != "0.2.76", reason="LitData 0.2.68 writes no types")
def test_two_workers_fuse_types_as_litdata(tmp_path: Any) -> None:
    tmp = str(tmp_path)
    ours, theirs = os.path.join(tmp, "ours"), os.path.join(tmp, "theirs")
    _ours(ours, "fused", 0, 20, workers=2)
    _run_litdata(tmp, [["optimize", theirs, "fused", LAYOUT, 0, 20, None, 2]], "fused")
    o_index, o_chunks = read_dataset(ours)
    t_index, t_chunks = read_dataset(theirs)
    assert o_index["config"]["types"]["vals"] == {"type": "list", "value": "json"}  # list(int) + list(str)
    assert o_index == t_index
    assert o_chunks == t_chunks
