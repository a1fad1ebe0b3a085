"""optimize(): samples, generators, filtering, determinism, modes."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from streamscope import events as ev
from streamscope.processing import optimize
from tests.processing import _fns
from tests.processing._read import read_samples
from tests.processing.conftest import read_dataset, visible_files
from tests.support.tracing import clean_tracer  # noqa: F401

litdata = pytest.importorskip("litdata")
pytestmark = [pytest.mark.interop, pytest.mark.filterwarnings("ignore:A newer version of litdata")]


def _read_all(path: str) -> list:
    ds = litdata.StreamingDataset(path)
    return [ds[i] for i in range(len(ds))]


def test_fn_returning_samples_round_trips(tmp_path):
    out = str(tmp_path / "ds")
    optimize(_fns.mixed_sample, list(range(40)), out, chunk_size=7, num_workers=2, verbose=False)
    got = _read_all(out)
    assert len(got) == 40
    for i, s in enumerate(got):
        want = _fns.mixed_sample(i)
        np.testing.assert_array_equal(s["x"], want["x"])
        np.testing.assert_array_equal(s["m"], want["m"])
        assert s["f"] == want["f"] and s["b"] == want["b"] and s["flag"] == want["flag"]
        assert s["t"][0] == want["t"][0] and list(s["t"][1]) == want["t"][1]
    index, _ = read_dataset(out)
    assert [c["chunk_size"] for c in index["chunks"]] == [7, 7, 6, 7, 7, 6]  # 20 inputs per worker
    assert visible_files(out) == sorted(["index.json"] + [c["filename"] for c in index["chunks"]])


def test_none_results_are_filtered_out(tmp_path):
    out = str(tmp_path / "ds")
    optimize(_fns.keep_even, list(range(25)), out, chunk_bytes="1MB", num_workers=2, verbose=False)
    assert [s["i"] for s in _read_all(out)] == list(range(0, 25, 2))


def test_generator_fn_yields_many_none_or_nothing(tmp_path):
    out = str(tmp_path / "ds")
    optimize(_fns.gen_samples, list(range(30)), out, chunk_size=5, num_workers=2, verbose=False)
    want = [(i, k) for i in range(30) for k in range(i % 4)]
    assert [(s["i"], s["k"]) for s in _read_all(out)] == want


def test_all_inputs_filtered_writes_an_empty_index_and_warns(tmp_path):
    """As LitData: an index.json that lists no chunk (and no config); reading it says why; append fills it."""
    from streamscope import StreamingDataset
    from streamscope._core.errors import FormatError

    out = str(tmp_path / "ds")
    with pytest.warns(UserWarning, match="fn returned no sample for any of the 3 inputs"):
        optimize(_fns.keep_even, [1, 3, 5], out, chunk_size=2, num_workers=2, verbose=False)
    assert visible_files(out) == ["index.json"]
    with open(os.path.join(out, "index.json")) as f:
        index = json.load(f)
    assert (index["chunks"], index["config"]) == ([], None)
    with pytest.raises(FormatError, match="No chunks found in the .* the dataset is empty"):
        StreamingDataset(out)
    optimize(_fns.keep_even, [2, 4], out, chunk_size=2, num_workers=1, verbose=False, mode="append")
    assert len(StreamingDataset(out)) == 2


def test_two_runs_with_two_workers_are_byte_identical(tmp_path):
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    for out in (a, b):
        optimize(_fns.gen_samples, list(range(200)), out, chunk_bytes=600, num_workers=2, verbose=False)
    ia, ca = read_dataset(a)
    ib, cb = read_dataset(b)
    assert ia == ib and ca == cb
    assert len(ca) > 4
    assert {f.split("-")[1] for f in ca} == {"0", "1"}  # both workers wrote chunks


def test_dataset_order_is_input_order_with_two_workers(tmp_path):
    out = str(tmp_path / "ds")
    optimize(_fns.image_sample, list(range(101)), out, chunk_size=10, num_workers=2, verbose=False)
    assert [s["label"] for s in _read_all(out)] == list(range(101))


def test_batch_size_groups_inputs(tmp_path):
    out = str(tmp_path / "ds")
    optimize(len, list(range(10)), out, chunk_size=3, num_workers=1, batch_size=4, verbose=False)
    assert _read_all(out) == [4, 4, 2]


def test_fast_dev_run_keeps_each_workers_first_inputs(tmp_path):
    """As LitData ("items per process"): the dev run's chunks are the full run's first ones of every worker."""
    out = str(tmp_path / "ds")
    optimize(_fns.keep_even, list(range(100)), out, chunk_size=3, num_workers=2, fast_dev_run=6, verbose=False)
    assert [s["i"] for s in _read_all(out)] == [0, 2, 4, 50, 52, 54]
    unordered = str(tmp_path / "queue")  # one queue shared by the workers: its first inputs in all
    optimize(
        _fns.keep_even,
        list(range(100)),
        unordered,
        chunk_size=3,
        num_workers=2,
        fast_dev_run=6,
        keep_data_ordered=False,
        verbose=False,
    )
    assert sorted(s["i"] for s in _read_all(unordered)) == [0, 2, 4]


@pytest.mark.parametrize("layout", ["0.2.68", "0.2.76"])
def test_zstd_compression_reads_back(tmp_path, monkeypatch, layout):
    monkeypatch.setenv("STREAMSCOPE_WRITE_FORMAT", layout)
    out = str(tmp_path / "ds")
    optimize(_fns.image_sample, list(range(30)), out, chunk_size=8, compression="zstd:3", num_workers=2, verbose=False)
    index, chunks = read_dataset(out)
    assert index["config"]["compression"] == "zstd:3"
    if layout == "0.2.68":  # whole files
        assert all(name.endswith(".zstd:3.bin") for name in chunks)
    else:  # frames of 256 samples inside .bin files
        assert all(name.endswith(".bin") and data.startswith(b"LDFZ01\0\0") for name, data in chunks.items())
        assert index["config"]["compression_level"] == "batch"
    assert [s["id"] for s in read_samples(out)] == [f"s{i:05d}" for i in range(30)]


def test_spawn_start_method(tmp_path):
    out = str(tmp_path / "ds")
    optimize(_fns.keep_even, list(range(12)), out, chunk_size=4, num_workers=2, start_method="spawn", verbose=False)
    assert [s["i"] for s in _read_all(out)] == list(range(0, 12, 2))


def test_overwrite_replaces_dataset(tmp_path):
    out = str(tmp_path / "ds")
    optimize(_fns.image_sample, list(range(50)), out, chunk_size=5, num_workers=2, verbose=False)
    optimize(_fns.keep_even, list(range(6)), out, chunk_size=5, num_workers=1, verbose=False, mode="overwrite")
    index, chunks = read_dataset(out)
    assert list(chunks) == ["chunk-0-0.bin"]
    assert visible_files(out) == ["chunk-0-0.bin", "index.json"]
    assert [s["i"] for s in _read_all(out)] == [0, 2, 4]


def test_append_continues_chunk_numbers_and_keeps_existing_first(tmp_path):
    out = str(tmp_path / "ds")
    optimize(_fns.keep_even, list(range(10)), out, chunk_size=2, num_workers=2, verbose=False)
    before, before_chunks = read_dataset(out)
    optimize(_fns.keep_even, list(range(10, 20)), out, chunk_size=2, num_workers=2, verbose=False, mode="append")
    after, after_chunks = read_dataset(out)
    n_old = len(before["chunks"])
    assert after["chunks"][:n_old] == before["chunks"]
    assert all(after_chunks[k] == v for k, v in before_chunks.items())
    new_names = [c["filename"] for c in after["chunks"][n_old:]]
    assert new_names == ["chunk-0-2.bin", "chunk-0-3.bin", "chunk-1-1.bin"]
    assert [s["i"] for s in _read_all(out)] == list(range(0, 20, 2))


def test_append_with_different_sample_types_is_refused(tmp_path):
    from streamscope._core.errors import SchemaMismatchError

    out = str(tmp_path / "ds")
    optimize(_fns.keep_even, list(range(10)), out, chunk_size=2, num_workers=1, verbose=False)
    before, _ = read_dataset(out)
    with pytest.raises(SchemaMismatchError, match="^The config isn't consistent between chunks: .*existing dataset"):
        optimize(_fns.image_sample, list(range(4)), out, chunk_size=2, num_workers=1, verbose=False, mode="append")
    after, _ = read_dataset(out)
    assert after == before
    assert visible_files(out) == sorted(["index.json"] + [c["filename"] for c in before["chunks"]])


# clean_tracer: no flusher left running by an earlier test of this process (under load one took the optimize B off
# the buffer before this test's drain, and the E alone was left)
@pytest.mark.usefixtures("clean_tracer")
def test_tracing_spans_are_recorded(tmp_path):
    out = str(tmp_path / "ds")
    ev.drain()
    ev.ACTIVE.update({"epoch", "read"})
    try:
        optimize(_fns.keep_even, list(range(6)), out, chunk_size=2, num_workers=1, verbose=False)
    finally:
        ev.ACTIVE.clear()
    names = {(e[0], e[1]) for e in ev.drain()}  # main-process events only (workers have their own buffers)
    assert {("B", "optimize"), ("E", "optimize")} <= names
    # a "read" span: one complete X event when "read" is compact (the default), else a B/E pair
    assert ("X", "index_merge") in names or {("B", "index_merge"), ("E", "index_merge")} <= names


def test_index_json_matches_litdata_schema(tmp_path):
    out = str(tmp_path / "ds")
    optimize(_fns.keep_even, list(range(4)), out, chunk_bytes="64MB", num_workers=1, verbose=False)
    with open(os.path.join(out, "index.json")) as f:
        raw = f.read()
    index = json.loads(raw)
    assert raw == json.dumps(index, sort_keys=True)
    assert set(index) == {"chunks", "config", "updated_at"}
    assert index["config"]["chunk_bytes"] == 64_000_000
    assert float(index["updated_at"]) > 0


def test_progress_bar_shown_when_verbose(tmp_path, capfd):
    optimize(_fns.keep_even, list(range(30)), str(tmp_path / "ds"), chunk_size=4, num_workers=2, verbose=True)
    err = capfd.readouterr().err
    assert "optimize" in err and "30/30" in err


def test_stale_staging_dir_of_a_dead_job_is_removed(tmp_path):
    import subprocess

    out = tmp_path / "ds"
    out.mkdir()
    dead = subprocess.Popen(["true"])
    dead.wait()
    stale = out / f".streamscope-staging-{dead.pid}-abc"
    stale.mkdir()
    (stale / "chunk-0-0.bin").write_bytes(b"junk")
    optimize(_fns.keep_even, list(range(6)), str(out), chunk_size=4, num_workers=1, verbose=False)
    assert visible_files(str(out)) == ["chunk-0-0.bin", "index.json"]


def test_tokens_loader_dataset_reads_in_litdata(tmp_path):
    try:
        from streamscope.format.item_loader import TokensLoader
    except ImportError:
        pytest.skip("streamscope.format not merged yet")
    out = str(tmp_path / "ds")
    optimize(
        _fns.tokens, list(range(40)), out, chunk_size=100, num_workers=2, item_loader=TokensLoader(), verbose=False
    )
    index, _ = read_dataset(out)
    assert index["config"]["item_loader"] == "TokensLoader"
    ds = litdata.StreamingDataset(out, item_loader=litdata.TokensLoader(block_size=10))
    blocks = [ds[i].tolist() for i in range(len(ds))]
    stream = [t for i in range(40) for t in _fns.tokens(i).tolist()]
    flat = [t for b in blocks for t in b]
    assert len(blocks) > 10
    assert all(len(b) == 10 for b in blocks)
    assert set(map(tuple, blocks)) <= {tuple(stream[k : k + 10]) for k in range(len(stream) - 9)}
    assert len(flat) <= len(stream)


def test_align_chunking_gives_single_worker_chunk_boundaries(tmp_path):
    out = str(tmp_path / "ds")
    optimize(_fns.image_sample, list(range(18)), out, chunk_size=4, num_workers=2, align_chunking=True, verbose=False)
    index, _ = read_dataset(out)
    assert [(c["filename"], c["chunk_size"]) for c in index["chunks"]] == [
        ("chunk-0-0.bin", 4),
        ("chunk-0-1.bin", 4),
        ("chunk-1-0.bin", 4),
        ("chunk-1-1.bin", 4),
        ("chunk-1-2.bin", 2),
    ]


def test_weights_keep_input_order(tmp_path):
    out = str(tmp_path / "ds")
    weights = [50] + [1] * 49
    optimize(_fns.keep_even, list(range(50)), out, chunk_size=3, num_workers=2, weights=weights, verbose=False)
    index, _ = read_dataset(out)
    assert index["chunks"][0]["filename"] == "chunk-0-0.bin" and index["chunks"][0]["chunk_size"] == 1
    assert [s["i"] for s in _read_all(out)] == list(range(0, 50, 2))


@pytest.mark.slow
def test_two_concurrent_jobs_sharing_a_staging_parent_do_not_collide(tmp_path):
    """LitData's §8.16 bug: jobs on one host share /tmp/chunks. Ours stage in per-job directories."""
    import subprocess
    import sys

    shared = tmp_path / "shared-staging"
    outs = [str(tmp_path / f"out{j}") for j in range(2)]
    env = {**os.environ, "STREAMSCOPE_OPTIMIZE_STAGING_DIR": str(shared)}
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-c",
                "from streamscope.processing import optimize\n"
                "from tests.processing import _fns\n"
                f"optimize(_fns.slow_gen, list(range({j * 7}, {j * 7 + 120})), {out!r}, chunk_size=5, num_workers=2,"
                " verbose=False)\n",
            ],
            env=env,
        )
        for j, out in enumerate(outs)
    ]
    assert [p.wait(timeout=120) for p in procs] == [0, 0]
    for j, out in enumerate(outs):
        want = [(i, k) for i in range(j * 7, j * 7 + 120) for k in range(i % 4)]
        assert [(s["i"], s["k"]) for s in _read_all(out)] == want
    assert os.listdir(shared) == []  # each job removed its own staging directory


def test_streamscope_optimize_is_the_function_even_after_importing_the_package(tmp_path):
    import streamscope
    import streamscope.processing  # noqa: F401  (a subpackage import must not shadow the function)

    assert streamscope.optimize is optimize
    streamscope.optimize(_fns.keep_even, list(range(6)), str(tmp_path / "ds"), chunk_size=2, verbose=False)
    assert [s["i"] for s in _read_all(str(tmp_path / "ds"))] == [0, 2, 4]
