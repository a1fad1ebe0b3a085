"""Multi-node optimize()/map() by environment: every node a real process (``_node_script``), one shared output_dir.

The reference of every check is the same job on one machine with the same total number of workers.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from streamscope._core.errors import NodeConfigError
from streamscope.processing import functions
from streamscope.processing.nodes import NODE_VARIABLES, detect_node
from tests.processing import _node_fns as fns
from tests.processing.conftest import read_dataset, visible_files

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
N = 40
KW: dict[str, Any] = {"chunk_size": 4, "verbose": False, "start_method": "fork"}
FAST_CLAIMS = {  # the claim protocol's waits, shortened for tests
    "STREAMSCOPE_OPTIMIZE_NODE_CLAIM_SETTLE": "0.1",
    "STREAMSCOPE_OPTIMIZE_NODE_HEARTBEAT": "0.2",
    "STREAMSCOPE_OPTIMIZE_NODE_STALE_AFTER": "5",
}


@pytest.fixture(autouse=True)
def _single_node_here(monkeypatch: pytest.MonkeyPatch) -> None:
    """The test process itself is one machine, whatever the CI runner's environment says."""
    for pair in NODE_VARIABLES:
        for var in pair:
            monkeypatch.delenv(var, raising=False)


class Node:
    """One node: ``python -m tests.processing._node_script`` with its node variables."""

    def __init__(
        self,
        tmp_path: Any,
        rank: int,
        num_nodes: int,
        fn: str,
        inputs: list[Any],
        out: str,
        env: dict[str, str] | None = None,
        call: str = "optimize",
        key_fn: str | None = None,
        **kwargs: Any,
    ) -> None:
        tag = f"{call}-{rank}-{num_nodes}-{time.monotonic_ns()}"
        self.result = str(tmp_path / f"{tag}.result.json")
        spec = {
            "call": call,
            "fn": f"tests.processing._node_fns:{fn}",
            "inputs": inputs,
            "output_dir": out,
            "kwargs": kwargs,
            "key_fn": key_fn and f"tests.processing._node_fns:{key_fn}",
            "result": self.result,
        }
        path = tmp_path / f"{tag}.spec.json"
        path.write_text(json.dumps(spec))
        full = {k: v for k, v in os.environ.items() if not any(k in pair for pair in NODE_VARIABLES)}
        full.update(FAST_CLAIMS)
        full.update({"DATA_OPTIMIZER_NUM_NODES": str(num_nodes), "DATA_OPTIMIZER_NODE_RANK": str(rank)})
        full.update(env or {})
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.processing._node_script", str(path)], cwd=ROOT, env=full
        )

    def outcome(self, timeout: float = 120) -> dict[str, Any]:
        code = self.proc.wait(timeout=timeout)
        if not os.path.exists(self.result):
            return {"exit": code}
        with open(self.result) as f:
            return json.load(f)


def _wait_for(path: str, proc: subprocess.Popen, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not os.path.exists(path):
        assert proc.poll() is None, f"the node exited ({proc.returncode}) before {path} appeared"
        assert time.monotonic() < deadline, f"{path} did not appear"
        time.sleep(0.02)


def _keys(path: str) -> dict[str, bytes]:
    folder = os.path.join(path, "keys")
    return {n: Path(os.path.join(folder, n)).read_bytes() for n in sorted(os.listdir(folder))}


# --- the node variables -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({}, (1, 0)),
        ({"DATA_OPTIMIZER_NUM_NODES": "3", "DATA_OPTIMIZER_NODE_RANK": "2"}, (3, 2)),
        ({"DATA_OPTIMIZER_NUM_NODES": "1"}, (1, 0)),
        ({"NNODES": "4", "NODE_RANK": "1"}, (4, 1)),
        ({"NNODES": "4"}, (1, 0)),  # torchrun's pair counts only when both are set
        ({"SLURM_NNODES": "2", "SLURM_NODEID": "1"}, (2, 1)),
        (
            {
                "DATA_OPTIMIZER_NUM_NODES": "2",
                "DATA_OPTIMIZER_NODE_RANK": "0",
                "SLURM_NNODES": "8",
                "SLURM_NODEID": "5",
            },
            (2, 0),
        ),
    ],
)
def test_node_variables(env, expected):
    node = detect_node(env)
    assert (node.num_nodes, node.node_rank) == expected


@pytest.mark.parametrize(
    ("env", "match"),
    [
        (
            {"DATA_OPTIMIZER_NUM_NODES": "2", "DATA_OPTIMIZER_NODE_RANK": "2"},
            r"DATA_OPTIMIZER_NODE_RANK=2 is out of range",
        ),
        ({"DATA_OPTIMIZER_NUM_NODES": "2", "DATA_OPTIMIZER_NODE_RANK": "-1"}, r"out of range .*ranks are 0..1"),
        (
            {"DATA_OPTIMIZER_NUM_NODES": "two", "DATA_OPTIMIZER_NODE_RANK": "0"},
            r"DATA_OPTIMIZER_NUM_NODES='two' is not",
        ),
        ({"DATA_OPTIMIZER_NUM_NODES": "2"}, r"DATA_OPTIMIZER_NODE_RANK is not set"),
        ({"DATA_OPTIMIZER_NUM_NODES": "0", "DATA_OPTIMIZER_NODE_RANK": "0"}, r"must be >= 1"),
        ({"SLURM_NNODES": "2", "SLURM_NODEID": "7"}, r"SLURM_NODEID=7 is out of range for SLURM_NNODES=2"),
    ],
)
def test_bad_node_variables_are_refused(env, match):
    with pytest.raises(NodeConfigError, match=match):
        detect_node(env)


def test_node_env_knob_turns_detection_off(monkeypatch):
    from streamscope._core import config

    monkeypatch.setenv("STREAMSCOPE_OPTIMIZE_NODE_ENV", "litdata")
    assert detect_node({"SLURM_NNODES": "2", "SLURM_NODEID": "1"}).num_nodes == 1
    monkeypatch.setenv("STREAMSCOPE_OPTIMIZE_NODE_ENV", "off")
    assert detect_node({"DATA_OPTIMIZER_NUM_NODES": "2", "DATA_OPTIMIZER_NODE_RANK": "1"}).num_nodes == 1
    assert config.get("optimize_node_env") == "off"


def test_rank_out_of_range_fails_before_anything_is_written(tmp_path, monkeypatch):
    out = tmp_path / "out"
    monkeypatch.setenv("DATA_OPTIMIZER_NUM_NODES", "2")
    monkeypatch.setenv("DATA_OPTIMIZER_NODE_RANK", "2")
    with pytest.raises(NodeConfigError, match="out of range"):
        functions.optimize(fns.sample, list(range(N)), str(out), num_workers=1, **KW)
    with pytest.raises(NodeConfigError, match="out of range"):
        functions.map(fns.write_files, list(range(N)), str(out), num_workers=1)
    assert not out.exists()


def test_platform_arguments_point_to_the_node_variables(tmp_path):
    from streamscope._core.errors import OptimizeInputError

    with pytest.raises(OptimizeInputError, match="DATA_OPTIMIZER_NUM_NODES"):
        functions.optimize(fns.sample, [1], str(tmp_path / "o"), num_nodes=2, **KW)


# --- two nodes, real processes ------------------------------------------------------------------------


@pytest.mark.slow
def test_two_nodes_equal_one_machine_with_the_same_workers_then_append(tmp_path):
    ref, out = str(tmp_path / "ref"), str(tmp_path / "out")
    functions.optimize(fns.sample, list(range(N)), ref, num_workers=2, key_fn=fns.key_of, **KW)
    nodes = [Node(tmp_path, r, 2, "sample", list(range(N)), out, num_workers=1, key_fn="key_of", **KW) for r in (0, 1)]
    assert [n.outcome() for n in nodes] == [{"ok": True}, {"ok": True}]
    assert read_dataset(out) == read_dataset(ref)
    assert _keys(out) == _keys(ref)
    assert visible_files(out) == visible_files(ref)  # no claims, per-node indexes, checkpoints or staging left

    # append: the existing chunks once (LitData 0.2.68 repeats them once per node), the new ones after
    more = list(range(N, N + 25))
    functions.optimize(fns.sample, more, ref, num_workers=2, key_fn=fns.key_of, mode="append", **KW)
    nodes = [
        Node(tmp_path, r, 2, "sample", more, out, num_workers=1, key_fn="key_of", mode="append", **KW) for r in (0, 1)
    ]
    assert [n.outcome() for n in nodes] == [{"ok": True}, {"ok": True}]
    assert read_dataset(out) == read_dataset(ref)
    assert _keys(out) == _keys(ref)
    assert visible_files(out) == visible_files(ref)


@pytest.mark.slow
def test_two_nodes_to_s3_equal_one_machine(tmp_path, s3_server):
    from streamscope.storage import open_store

    ref = str(tmp_path / "ref")
    functions.optimize(fns.sample, list(range(N)), ref, num_workers=4, **KW)
    url, opts = s3_server.url("nodes"), s3_server.storage_options()
    nodes = [
        Node(tmp_path, r, 2, "sample", list(range(N)), url, num_workers=2, storage_options=opts, **KW) for r in (0, 1)
    ]
    assert [n.outcome() for n in nodes] == [{"ok": True}, {"ok": True}]
    store = open_store(url, opts)
    index = json.loads(store.get("index.json"))
    index.pop("updated_at")
    ref_index, ref_chunks = read_dataset(ref)
    assert index == ref_index
    assert {c["filename"]: store.get(c["filename"]) for c in index["chunks"]} == ref_chunks
    assert sorted(m.key for m in store.list("")) == sorted(["index.json", *ref_chunks])


@pytest.mark.slow
def test_two_map_nodes_publish_what_one_machine_does(tmp_path):
    ref, out = str(tmp_path / "ref"), str(tmp_path / "out")
    functions.map(fns.write_files, list(range(N)), ref, num_workers=2)
    nodes = [Node(tmp_path, r, 2, "write_files", list(range(N)), out, call="map", num_workers=1) for r in (0, 1)]
    assert [n.outcome() for n in nodes] == [{"ok": True}, {"ok": True}]
    assert visible_files(out) == visible_files(ref)
    for rel in visible_files(ref):  # the same files, written by the same global worker
        assert Path(os.path.join(out, rel)).read_text() == Path(os.path.join(ref, rel)).read_text()


@pytest.mark.slow
def test_disagreeing_nodes_stop_before_writing_a_chunk(tmp_path):
    """A live node 0; then a second node 0, a node with another node count, and a node with other inputs."""
    out = str(tmp_path / "out")
    gate = str(tmp_path / "gate")
    first = Node(tmp_path, 0, 2, "gated", list(range(N)), out, num_workers=1, env={fns.GATE_ENV: gate}, **KW)
    try:
        _wait_for(os.path.join(out, ".nodes", "node-0.json"), first.proc)
        mark = str(tmp_path / "mark")
        bad = {
            "NodeRankClaimedError": Node(
                tmp_path, 0, 2, "marked", list(range(N)), out, num_workers=1, env={fns.MARK_ENV: mark}, **KW
            ),
            "NodeConfigError": Node(
                tmp_path, 1, 3, "marked", list(range(N)), out, num_workers=1, env={fns.MARK_ENV: mark}, **KW
            ),
        }
        got = {k: n.outcome() for k, n in bad.items()}
        other_inputs = Node(
            tmp_path, 1, 2, "marked", list(range(N + 1)), out, num_workers=1, env={fns.MARK_ENV: mark}, **KW
        ).outcome()
    finally:
        open(gate, "w").close()
    assert got["NodeRankClaimedError"]["error"] == "NodeRankClaimedError"
    assert (
        "node rank 0" in got["NodeRankClaimedError"]["message"]
        and "same rank" in got["NodeRankClaimedError"]["message"]
    )
    assert got["NodeConfigError"]["error"] == "NodeConfigError"
    assert "2 nodes" in got["NodeConfigError"]["message"] and "with 3" in got["NodeConfigError"]["message"]
    assert other_inputs["error"] == "NodeConfigError"
    assert "num_inputs: 41 here, 40 there" in other_inputs["message"]
    assert not os.path.exists(mark)  # none of them ran fn
    assert first.outcome() == {"ok": True}
    # node 0 wrote only its own workers' chunks (rank 0) and no index.json: node 1 never ran
    names = os.listdir(out)
    assert "index.json" not in names and "0-index.json" in names
    assert {n.split("-")[1] for n in names if n.startswith("chunk-")} == {"0"}


@pytest.mark.slow
def test_a_dead_node_leaves_no_index_and_its_rerun_resumes(tmp_path):
    ref, out = str(tmp_path / "ref"), str(tmp_path / "out")
    functions.optimize(fns.sample, list(range(N)), ref, num_workers=2, **KW)
    flag, calls = tmp_path / "kill", tmp_path / "calls"
    flag.touch()
    calls.mkdir()
    env = {fns.KILL_FLAG_ENV: str(flag), fns.KILL_AT_ENV: "33", fns.CALL_LOG_ENV: str(calls)}
    spec = ("kill_node", list(range(N)), out)
    kw = {"num_workers": 1, "use_checkpoint": True, **KW}
    nodes = [Node(tmp_path, r, 2, *spec, env=env, **kw) for r in (0, 1)]
    assert nodes[0].outcome() == {"ok": True}
    assert nodes[1].outcome() == {"exit": -9}  # node 1 died at input 33 of its 20..39
    assert not flag.exists()
    assert not os.path.exists(os.path.join(out, "index.json"))  # node 0 finished; nothing partial published
    before = sum(len(p.read_text().split()) for p in calls.iterdir())

    assert Node(tmp_path, 1, 2, *spec, env=env, **kw).outcome() == {"ok": True}
    redone = sum(len(p.read_text().split()) for p in calls.iterdir()) - before
    assert 0 < redone < 20  # resumed from its last closed chunk, not from input 20
    assert read_dataset(out) == read_dataset(ref)
    assert visible_files(out) == visible_files(ref)


# --- the claims, in process ---------------------------------------------------------------------------


def _group(store, rank: int, num_nodes: int = 2, job: dict[str, Any] | None = None):
    from streamscope.processing.nodes import NodeEnv, NodeGroup

    return NodeGroup(store, NodeEnv(num_nodes, rank, "test"), job or {"n": 1})


def _foreign_claim(store, rank: int, beat_age: float, state: str = "running", job: dict[str, Any] | None = None):
    from streamscope.processing.nodes import claim_key

    g = _group(store, rank, job=job)
    rec = {**g._record(), "host": "another-host", "pid": 1, "state": state, "beat": time.time() - beat_age}
    store.put(claim_key(rank), json.dumps(rec).encode())


@pytest.fixture
def store(tmp_path, monkeypatch):
    from streamscope.storage import open_store

    for k, v in FAST_CLAIMS.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("STREAMSCOPE_OPTIMIZE_NODE_CLAIM_SETTLE", "0")
    return open_store(str(tmp_path / "out"), {})


def test_a_live_claim_on_another_host_keeps_its_rank(store):
    from streamscope._core.errors import NodeRankClaimedError

    _foreign_claim(store, 0, beat_age=1.0)
    with pytest.raises(NodeRankClaimedError, match="another-host"):
        _group(store, 0).join()


def test_a_stale_or_failed_claim_is_taken_over(store):
    _foreign_claim(store, 0, beat_age=60.0)  # older than optimize_node_stale_after (5 s here)
    g = _group(store, 0)
    g.join()
    assert json.loads(store.get(".nodes/node-0.json"))["token"] == g.token
    _foreign_claim(store, 1, beat_age=0.0, state="failed")
    _group(store, 1).join()


def test_a_claim_with_this_pid_on_this_host_is_an_earlier_life(store):
    """A restarted container runs its script as pid 1 again: the claim its first life left is not a live node."""
    import socket

    from streamscope.processing.nodes import claim_key

    g = _group(store, 0)
    old = {**g._record(), "token": "earlier-life", "host": socket.gethostname(), "pid": os.getpid()}
    store.put(claim_key(0), json.dumps(old).encode())
    g.join()
    assert json.loads(store.get(claim_key(0)))["token"] == g.token


def test_a_finished_node_of_another_job_is_reported(store):
    _foreign_claim(store, 1, beat_age=0.0, state="done", job={"n": 2})
    with pytest.raises(NodeConfigError, match=r"different job .*n: 1 here, 2 there.*delete .*\.nodes/"):
        _group(store, 0).join()
    assert not store.exists(".nodes/node-0.json")  # the refused node leaves no claim behind


def test_last_node_to_finish_is_told_to_merge(store):
    a, b = _group(store, 0), _group(store, 1)
    a.join()
    b.join()
    assert b.finish({"chunks": [], "config": None}) is False and b.pending() == [0]
    assert a.finish({"chunks": [], "config": None}) is True
    assert store.exists("0-index.json") and store.exists("1-index.json")


def test_a_node_whose_rank_was_taken_over_does_not_publish(store):
    from streamscope._core.errors import NodeRankClaimedError

    a = _group(store, 0)
    a.join()
    _foreign_claim(store, 0, beat_age=0.0)  # another node overwrote the claim (a simultaneous start)
    with pytest.raises(NodeRankClaimedError):
        a.finish({"chunks": [], "config": None})
    assert not store.exists("0-index.json")
