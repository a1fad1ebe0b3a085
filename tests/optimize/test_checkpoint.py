"""use_checkpoint=True: a run killed mid-way and resumed gives the dataset of an uninterrupted run."""

from __future__ import annotations

import json
import os

import pytest

from streamscope._core.errors import CheckpointMismatchError, WorkerDiedError
from streamscope.optimize import optimize
from tests.optimize import _fns
from tests.optimize.conftest import read_dataset, visible_files

N = 200


def _run(out: str, **kw) -> None:
    optimize(_fns.kill_on_flag, list(range(N)), out, chunk_size=7, num_workers=2, verbose=False, **kw)


@pytest.mark.parametrize("kill_at", [150, 37])
def test_killed_then_resumed_equals_uninterrupted(tmp_path, monkeypatch, kill_at):
    ref, out = str(tmp_path / "ref"), str(tmp_path / "out")
    _run(ref)
    flag = tmp_path / "kill.flag"
    flag.write_text("x")
    log = tmp_path / "calls.log"
    monkeypatch.setenv(_fns.KILL_FLAG_ENV, str(flag))
    monkeypatch.setenv(_fns.KILL_AT_ENV, str(kill_at))
    monkeypatch.setenv(_fns.CALL_LOG_ENV, str(log))
    with pytest.raises(WorkerDiedError, match="signal 9"):
        _run(out, use_checkpoint=True)
    left = visible_files(out)
    assert "index.json" not in left  # nothing claims a finished dataset
    assert any(name.startswith(".checkpoints/checkpoint-") for name in left)
    assert any(name.startswith("chunk-") for name in left)  # progress was kept for the resume

    flag.unlink()
    log.write_text("")
    _run(out, use_checkpoint=True)
    assert read_dataset(out) == read_dataset(ref)
    assert visible_files(out) == visible_files(ref)  # .checkpoints removed, no stray chunks
    calls = [int(x) for x in log.read_text().split()]
    assert kill_at in calls
    assert len(calls) < N  # it resumed, it did not start over


def test_checkpoint_for_other_arguments_is_refused(tmp_path, monkeypatch):
    out = str(tmp_path / "out")
    flag = tmp_path / "kill.flag"
    flag.write_text("x")
    monkeypatch.setenv(_fns.KILL_FLAG_ENV, str(flag))
    monkeypatch.setenv(_fns.KILL_AT_ENV, "150")
    with pytest.raises(WorkerDiedError):
        _run(out, use_checkpoint=True)
    flag.unlink()
    with pytest.raises(CheckpointMismatchError, match="chunk_size"):
        optimize(
            _fns.kill_on_flag, list(range(N)), out, chunk_size=9, num_workers=2, verbose=False, use_checkpoint=True
        )
    with open(os.path.join(out, ".checkpoints", "config.json")) as f:
        assert json.load(f)["num_workers"] == 2


def test_main_process_killed_then_resumed_equals_uninterrupted(tmp_path):
    import signal
    import subprocess
    import sys
    import time

    import psutil

    n = 300
    ref, out = str(tmp_path / "ref"), str(tmp_path / "out")
    optimize(_fns.slow_gen, list(range(n)), ref, chunk_size=7, num_workers=2, verbose=False)
    script = (
        "from streamscope.optimize import optimize\n"
        "from tests.optimize import _fns\n"
        f"optimize(_fns.slow_gen, list(range({n})), {out!r}, chunk_size=7, num_workers=2, verbose=False,"
        " use_checkpoint=True)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", script], env=os.environ.copy())
    ckpt = os.path.join(out, ".checkpoints", "checkpoint-1.json")
    deadline = time.monotonic() + 30
    while not os.path.exists(ckpt) and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.01)
    assert proc.poll() is None, "the run finished before it could be killed"
    workers = psutil.Process(proc.pid).children()
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    gone, alive = psutil.wait_procs(workers, timeout=10)
    assert not alive  # orphaned workers notice and stop
    assert not os.path.exists(os.path.join(out, "index.json"))

    optimize(_fns.slow_gen, list(range(n)), out, chunk_size=7, num_workers=2, verbose=False, use_checkpoint=True)
    assert read_dataset(out) == read_dataset(ref)
    assert visible_files(out) == visible_files(ref)


def test_interrupted_overwrite_job_resumes(tmp_path, monkeypatch):
    ref, out = str(tmp_path / "ref"), str(tmp_path / "out")
    _run(ref)
    optimize(_fns.keep_even, list(range(10)), out, chunk_size=2, num_workers=1, verbose=False)  # an old dataset
    flag = tmp_path / "kill.flag"
    flag.write_text("x")
    log = tmp_path / "calls.log"
    monkeypatch.setenv(_fns.KILL_FLAG_ENV, str(flag))
    monkeypatch.setenv(_fns.KILL_AT_ENV, "150")
    monkeypatch.setenv(_fns.CALL_LOG_ENV, str(log))
    with pytest.raises(WorkerDiedError):
        _run(out, use_checkpoint=True, mode="overwrite")
    assert not os.path.exists(os.path.join(out, "index.json"))
    flag.unlink()
    log.write_text("")
    _run(out, use_checkpoint=True, mode="overwrite")
    assert read_dataset(out) == read_dataset(ref)
    assert visible_files(out) == visible_files(ref)
    assert len(log.read_text().split()) < N  # resumed
    _run(out, use_checkpoint=True, mode="overwrite")  # a finished dataset is simply overwritten again
    assert read_dataset(out) == read_dataset(ref)


def test_iterator_inputs_and_weights(tmp_path):
    out = str(tmp_path / "out")
    optimize(_fns.keep_even, iter(range(10)), out, chunk_size=2, num_workers=2, weights=[1] * 10, verbose=False)
    index, _ = read_dataset(out)
    assert sum(c["chunk_size"] for c in index["chunks"]) == 5
