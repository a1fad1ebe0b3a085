"""The executors of optimize()/map(): each runs the same jobs to the same output (a contract every implementation
passes), and a bad or missing one is refused before output_dir is touched. Ray on a real cluster: test_ray.py."""

from __future__ import annotations

import dataclasses
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from streamscope._core.errors import MissingDependencyError, NodeConfigError, OptimizeInputError, WorkerFailedError
from streamscope.events import context as ev_context
from streamscope.processing import functions
from streamscope.processing.executors import ProcessExecutor, resolve_executor
from streamscope.processing.runner import raise_worker_error
from streamscope.processing.worker import execute, set_environ
from tests.processing import _node_fns as fns
from tests.processing.conftest import read_dataset, visible_files

N = 30
KW: dict[str, Any] = {"chunk_size": 4, "num_workers": 3, "verbose": False}


class InlineExecutor:
    """Every worker job in the calling process, one after the other (the smallest possible executor)."""

    name = "inline"

    def start(self) -> None:
        self.started = True

    def close(self) -> None:
        self.closed = True

    def default_workers(self) -> int:
        return 2

    def run(self, run):
        out = {}
        saved = dict(os.environ)
        try:
            for job in run.jobs:
                set_environ(job)  # what fn sees (DATA_OPTIMIZER_GLOBAL_RANK, ...) is part of the contract
                msg = execute(dataclasses.replace(job, in_child=False), [0] * len(run.jobs))
                if msg[0] != "done":
                    raise_worker_error(msg)
                out[msg[1]] = (msg[2], msg[3])
        finally:
            os.environ.clear()
            os.environ.update(saved)
            ev_context.pin(None)
        return out


EXECUTORS = {"process": lambda: "process", "process-object": ProcessExecutor, "inline": InlineExecutor}


@pytest.fixture(autouse=True)
def _one_node(monkeypatch):
    for var in ("DATA_OPTIMIZER_NUM_NODES", "DATA_OPTIMIZER_NODE_RANK", "NNODES", "NODE_RANK", "SLURM_NNODES"):
        monkeypatch.delenv(var, raising=False)


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> dict[str, str]:
    tmp = tmp_path_factory.mktemp("ref")
    opt, mapped = str(tmp / "opt"), str(tmp / "map")
    functions.optimize(fns.sample, list(range(N)), opt, key_fn=fns.key_of, **KW)
    functions.map(fns.write_files, list(range(N)), mapped, num_workers=3)
    return {"optimize": opt, "map": mapped}


@pytest.mark.parametrize("make", EXECUTORS.values(), ids=list(EXECUTORS))
def test_every_executor_writes_the_same_dataset_and_files(tmp_path, reference, make):
    out, mapped = str(tmp_path / "opt"), str(tmp_path / "map")
    functions.optimize(fns.sample, list(range(N)), out, key_fn=fns.key_of, executor=make(), **KW)
    assert read_dataset(out) == read_dataset(reference["optimize"])
    assert visible_files(out) == visible_files(reference["optimize"])
    functions.map(fns.write_files, list(range(N)), mapped, num_workers=3, executor=make())
    assert visible_files(mapped) == visible_files(reference["map"])
    for rel in visible_files(mapped):
        assert Path(f"{mapped}/{rel}").read_text() == Path(f"{reference['map']}/{rel}").read_text()


@pytest.mark.parametrize("make", EXECUTORS.values(), ids=list(EXECUTORS))
def test_every_executor_names_the_failing_input(tmp_path, make):
    with pytest.raises(WorkerFailedError, match="input 7"):
        functions.optimize(fns.fail_on_7, list(range(N)), str(tmp_path / "o"), executor=make(), **KW)
    assert not (tmp_path / "o" / "index.json").exists()


def test_the_executor_is_started_and_closed_and_gives_the_default_worker_count(tmp_path):
    ex = InlineExecutor()
    functions.optimize(fns.sample, list(range(N)), str(tmp_path / "o"), chunk_size=4, verbose=False, executor=ex)
    assert ex.started and ex.closed
    index, _ = read_dataset(str(tmp_path / "o"))
    assert {c["filename"].split("-")[1] for c in index["chunks"]} == {"0", "1"}  # default_workers() == 2


@pytest.mark.parametrize(
    ("executor", "match"),
    [
        ("spark", r"executor must be one of process, ray"),
        (object(), r"object with start\(\), close\(\), default_workers\(\) and run\(\)"),
    ],
)
def test_an_unknown_executor_is_refused(tmp_path, executor, match):
    with pytest.raises(OptimizeInputError, match=match):
        functions.optimize(fns.sample, [1], str(tmp_path / "o"), executor=executor, **KW)
    assert not (tmp_path / "o").exists()


def test_ray_missing_names_the_extra_before_touching_output(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray -> ImportError
    for call in (
        lambda: functions.optimize(fns.sample, [1, 2], str(tmp_path / "o"), executor="ray", **KW),
        lambda: functions.map(fns.write_files, [1, 2], str(tmp_path / "o"), executor="ray"),
    ):
        with pytest.raises(MissingDependencyError, match=r'pip install "streamscope\[ray\]"'):
            call()
    monkeypatch.setenv("STREAMSCOPE_OPTIMIZE_EXECUTOR", "ray")  # the knob picks it too
    with pytest.raises(MissingDependencyError, match=r"streamscope\[ray\]"):
        functions.optimize(fns.sample, [1, 2], str(tmp_path / "o"), **KW)
    assert not (tmp_path / "o").exists()


def test_ray_refuses_queues_and_explicit_litdata_nodes_before_connecting(tmp_path, monkeypatch):
    from streamscope.processing.ray_executor import RayExecutor

    monkeypatch.setitem(sys.modules, "ray", None)  # connecting would raise MissingDependencyError instead
    with pytest.raises(OptimizeInputError, match="keep_data_ordered=False"):
        functions.optimize(
            fns.sample, [1, 2], str(tmp_path / "o"), executor=RayExecutor(), keep_data_ordered=False, **KW
        )
    monkeypatch.setenv("DATA_OPTIMIZER_NUM_NODES", "2")
    monkeypatch.setenv("DATA_OPTIMIZER_NODE_RANK", "0")
    with pytest.raises(NodeConfigError, match="spreads the workers over its cluster itself"):
        functions.optimize(fns.sample, [1, 2], str(tmp_path / "o"), executor="ray", **KW)
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize(("kwargs", "match"), [({"num_cpus": -1}, "num_cpus"), ({"max_retries": "3"}, "max_retries")])
def test_ray_executor_arguments_are_checked(kwargs, match):
    from streamscope.processing.ray_executor import RayExecutor

    with pytest.raises(OptimizeInputError, match=match):
        RayExecutor(**kwargs)


def test_resolve_executor_default_is_processes():
    assert isinstance(resolve_executor(None), ProcessExecutor)
