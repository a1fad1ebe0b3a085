"""Module-level fns for the multi-node and Ray tests (importable by node subprocesses, workers and Ray tasks)."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from typing import Any

import numpy as np

GATE_ENV = "STREAMSCOPE_TEST_GATE"  # a path: gated() waits until it exists
MARK_ENV = "STREAMSCOPE_TEST_MARK"  # a path: marked() creates it (proof that a worker ran fn)
KILL_FLAG_ENV = "STREAMSCOPE_TEST_KILL_FLAG"  # a path: while it exists, input $KILL_AT kills (see below)
KILL_AT_ENV = "STREAMSCOPE_TEST_KILL_AT"
CALL_LOG_ENV = "STREAMSCOPE_TEST_CALL_LOG"  # a folder: every call appends its input to <folder>/<pid>.log


def _log_call(i: int) -> None:
    folder = os.environ.get(CALL_LOG_ENV)
    if folder:
        with open(os.path.join(folder, f"{os.getpid()}.log"), "a") as f:
            f.write(f"{i}\n")


def sample(i: int) -> Iterator[dict[str, Any]]:
    """0..2 samples per input (sizes vary), so chunk boundaries do not follow input boundaries."""
    _log_call(i)
    for k in range(i % 3):
        yield {"i": i, "k": k, "id": f"s{i:05d}-{k}", "img": np.full((3, 4 + k, 4), i % 251, dtype=np.uint8)}


def key_of(s: dict[str, Any]) -> str:
    return str(s["id"])


def gated(i: int) -> Iterator[dict[str, Any]]:
    """``sample``, but the first input waits (at most 60 s) until the file $GATE exists: keeps a node alive."""
    gate = os.environ.get(GATE_ENV, "")
    deadline = time.monotonic() + 60
    while gate and not os.path.exists(gate) and time.monotonic() < deadline:
        time.sleep(0.02)
    yield from sample(i)


def marked(i: int) -> Iterator[dict[str, Any]]:
    mark = os.environ.get(MARK_ENV)
    if mark:
        with open(mark, "a") as f:
            f.write(f"{i}\n")
    yield from sample(i)


def kill_node(i: int) -> Iterator[dict[str, Any]]:
    """``sample``; at input $KILL_AT, while the file $KILL_FLAG exists, removes it and SIGKILLs this worker's
    parent (the node's main process) and itself: a node dying mid-job, once."""
    yield from sample(i)
    flag = os.environ.get(KILL_FLAG_ENV, "")
    if i == int(os.environ.get(KILL_AT_ENV, "-1")) and flag and os.path.exists(flag):
        os.unlink(flag)
        os.kill(os.getppid(), signal.SIGKILL)
        os.kill(os.getpid(), signal.SIGKILL)


KILL_LOG_ENV = "STREAMSCOPE_TEST_KILL_LOG"  # a folder: kill_task() appends its input to <folder>/<pid>.log


def kill_task(i: int) -> Iterator[dict[str, Any]]:
    """``sample``; at input $KILL_AT, while the file $KILL_FLAG exists, removes it and SIGKILLs its own process
    (a Ray task's worker process dying mid-task, once)."""
    folder = os.environ.get(KILL_LOG_ENV)
    if folder:
        with open(os.path.join(folder, f"{os.getpid()}.log"), "a") as f:
            f.write(f"{i}\n")
    yield from sample(i)
    flag = os.environ.get(KILL_FLAG_ENV, "")
    if i == int(os.environ.get(KILL_AT_ENV, "-1")) and flag and os.path.exists(flag):
        os.unlink(flag)
        os.kill(os.getpid(), signal.SIGKILL)


def fail_on_7(i: int) -> dict[str, int]:
    if i == 7:
        raise KeyError(f"input {i} is bad")
    return {"i": i}


def write_files(i: int, output_dir: str) -> None:
    sub = os.path.join(output_dir, f"d{i % 3}")
    os.makedirs(sub, exist_ok=True)
    with open(os.path.join(sub, f"f{i}.txt"), "w") as f:
        f.write(f"content {i} from global worker {os.environ.get('DATA_OPTIMIZER_GLOBAL_RANK')}")


NODE_LOG_ENV = "STREAMSCOPE_TEST_NODE_LOG"  # a folder: sample_where() appends its input to <folder>/<ray node id>


#: How long sample_where() waits for the job's other worker process to start.
MEET_TIMEOUT_S = 30.0


def _meet_the_other_worker(folder: str) -> None:
    """Wait (at most :data:`MEET_TIMEOUT_S`) until a second worker process of the job has started too, so that
    the job's two tasks run at the same time: on 1-CPU nodes that means one on each node. Without it a quick task
    frees its CPU and Ray may give the other task to the same warm worker before the other node has started
    one (seen on a fast machine); one process running both tasks waits out the timeout once, then the test fails."""
    here = folder + ".started"
    os.makedirs(here, exist_ok=True)
    mark = os.path.join(here, str(os.getpid()))
    if os.path.exists(mark):
        return
    open(mark, "w").close()
    deadline = time.monotonic() + MEET_TIMEOUT_S
    while len(os.listdir(here)) < 2 and time.monotonic() < deadline:
        time.sleep(0.02)


def sample_where(i: int) -> Iterator[dict[str, Any]]:
    """``sample``, noting which Ray node ran it (once both of the job's worker processes have started)."""
    folder = os.environ.get(NODE_LOG_ENV)
    if folder:
        import ray

        _meet_the_other_worker(folder)
        with open(os.path.join(folder, ray.get_runtime_context().get_node_id()), "a") as f:
            f.write(f"{i}\n")
    yield from sample(i)
