"""Multi-node optimize()/map(): which node this process is, and how the nodes of one job agree with no coordinator.

Every node runs the same script with the same arguments; the environment says how many nodes there are and
which one this is (:func:`detect_node`: LitData's ``DATA_OPTIMIZER_NUM_NODES`` / ``DATA_OPTIMIZER_NODE_RANK``,
else torchrun launch scripts' ``NNODES`` / ``NODE_RANK``, else SLURM's ``SLURM_NNODES`` / ``SLURM_NODEID``). The
inputs are split over ``num_nodes x num_workers`` global workers exactly as one machine with that many workers
splits them; node ``r`` runs global workers ``r*W .. r*W+W-1`` (LitData's numbering), so chunk names never
collide and the merged dataset is the one machine's, byte for byte.

The nodes meet only in the shared ``output_dir`` (local folder or object store). Each node keeps a claim there,
``.nodes/node-{rank}.json``::

    {"node_rank": r, "num_nodes": N, "job": {...}, "job_sha256": "...", "token": "<uuid4>", "host": "...",
     "pid": 123, "state": "running" | "done" | "failed", "beat": <unix s>, "beats": k}

* Before it writes any chunk, a node reads the claim of its rank (a live one with another token: two nodes were
  given one rank, :class:`NodeRankClaimedError`), writes its own, waits ``optimize_node_claim_settle`` and reads
  it back (a node that claimed the same rank at the same moment overwrote it: one of the two stops), then checks
  every other live or finished claim: another node count or another job (workers, inputs, chunk settings)
  raises :class:`NodeConfigError`.
* While it works, a thread rewrites the claim every ``optimize_node_heartbeat`` seconds. A claim not rewritten
  for ``optimize_node_stale_after`` seconds, marked ``failed``, or naming a dead process on this host belongs
  to a dead node: a rerun of that rank takes it over (and resumes with ``use_checkpoint=True``).
* A node that finishes writes its chunk list to ``{rank}-index.json`` (LitData's per-node file), marks its claim
  ``done`` and lists the claims: the node that sees all ``N`` of them done merges ``index.json``. No node waits
  for another, so a node that dies never blocks the others, and until the last one is done no ``index.json``
  is published. Two nodes finishing at the same moment may both merge: they write the same index.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import threading
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from streamscope._core import config as cfg
from streamscope._core.errors import NodeConfigError, NodeRankClaimedError, StorageError
from streamscope._core.procs import pid_alive
from streamscope._core.protocols import ObjectStore

__all__ = [
    "NODES_DIR",
    "NODE_VARIABLES",
    "NodeEnv",
    "NodeGroup",
    "claim_key",
    "detect_node",
    "job_sha256",
    "node_index_key",
]


NODES_DIR = ".nodes"

#: The variable pairs naming (node count, node rank), in the order they are looked for.
NODE_VARIABLES: tuple[tuple[str, str], ...] = (
    ("DATA_OPTIMIZER_NUM_NODES", "DATA_OPTIMIZER_NODE_RANK"),
    ("NNODES", "NODE_RANK"),
    ("SLURM_NNODES", "SLURM_NODEID"),
)


@dataclass(frozen=True)
class NodeEnv:
    """This process's node: ``num_nodes`` and ``node_rank``, and the variables they came from (for messages)."""

    num_nodes: int = 1
    node_rank: int = 0
    source: str = ""

    @property
    def multi(self) -> bool:
        return self.num_nodes > 1

    def describe(self) -> str:
        where = f" per {self.source}" if self.source else ""
        return f"node {self.node_rank} of {self.num_nodes}{where}"


_OFF_HINT = "(knob optimize_node_env, STREAMSCOPE_OPTIMIZE_NODE_ENV=off, ignores the node variables)"


def _int_var(env: Mapping[str, str], name: str) -> int:
    raw = env[name]
    try:
        return int(raw.strip())
    except ValueError:
        raise NodeConfigError(f"{name}={raw!r} is not a whole number {_OFF_HINT}") from None


def detect_node(environ: Mapping[str, str] | None = None) -> NodeEnv:
    """This process's node, from the environment (see the module doc and the ``optimize_node_env`` knob).

    A pair counts when its node-count variable is set; LitData's rank defaults to 0 when it is the only node,
    the other pairs count only when both are set.

    Raises:
        NodeConfigError: a variable is not a whole number, the node count is < 1, the rank is out of range, or
            ``DATA_OPTIMIZER_NUM_NODES`` > 1 without ``DATA_OPTIMIZER_NODE_RANK``.
    """
    env = os.environ if environ is None else environ
    mode = str(cfg.get("optimize_node_env")).strip().lower()
    if mode not in cfg.NODE_ENV_CHOICES:
        raise NodeConfigError(
            f"knob optimize_node_env: expected one of {', '.join(cfg.NODE_ENV_CHOICES)}, got {mode!r}"
        )
    if mode == "off":
        return NodeEnv()
    pairs = NODE_VARIABLES[:1] if mode == "litdata" else NODE_VARIABLES
    for k, (count_var, rank_var) in enumerate(pairs):
        if not env.get(count_var, "").strip():
            continue
        if k > 0 and not env.get(rank_var, "").strip():
            continue
        num = _int_var(env, count_var)
        if num < 1:
            raise NodeConfigError(f"{count_var}={num} must be >= 1 {_OFF_HINT}")
        if env.get(rank_var, "").strip():
            rank = _int_var(env, rank_var)
        elif num == 1:
            rank = 0
        else:
            raise NodeConfigError(f"{count_var}={num} but {rank_var} is not set: each node needs its rank {_OFF_HINT}")
        if not 0 <= rank < num:
            raise NodeConfigError(
                f"{rank_var}={rank} is out of range for {count_var}={num}: node ranks are 0..{num - 1} {_OFF_HINT}"
            )
        return NodeEnv(num, rank, f"{count_var}/{rank_var}")
    return NodeEnv()


def job_sha256(job: Mapping[str, Any]) -> str:
    """A fingerprint of what the nodes must agree on (sorted JSON)."""
    return hashlib.sha256(json.dumps(job, sort_keys=True, default=str).encode()).hexdigest()


def claim_key(rank: int) -> str:
    return f"{NODES_DIR}/node-{rank}.json"


def node_index_key(rank: int) -> str:
    """LitData's per-node index file."""
    return f"{rank}-index.json"


#: Groups whose heartbeat runs in this process: a fork (the node's worker processes) waits for a beat in progress,
#: so no child starts with a store client or lock caught half-way through a request.
_BEATING: set[NodeGroup] = set()
_BEATING_LOCK = threading.Lock()


def _before_fork() -> None:
    with _BEATING_LOCK:
        groups = list(_BEATING)
    for g in groups:
        g._lock.acquire()
    _forking.extend(groups)


def _after_fork() -> None:
    while _forking:
        _forking.pop()._lock.release()


_forking: list[NodeGroup] = []
os.register_at_fork(before=_before_fork, after_in_parent=_after_fork, after_in_child=_after_fork)


def _diff(a: Mapping[str, Any], b: Mapping[str, Any]) -> str:
    keys = sorted(set(a) | set(b))
    return ", ".join(f"{k}: {a.get(k)!r} here, {b.get(k)!r} there" for k in keys if a.get(k) != b.get(k))[:400]


class NodeGroup:
    """This node's membership in a multi-node job writing to ``store`` (see the module doc).

    ``job``: what every node must agree on (a JSON-able dict without the node rank). ``what``: ``"optimize"``
    or ``"map"``, for messages.
    """

    def __init__(self, store: ObjectStore, node: NodeEnv, job: Mapping[str, Any], what: str = "optimize") -> None:
        self.store = store
        self.node = node
        self.job = dict(job)
        self.sha = job_sha256({**self.job, "num_nodes": node.num_nodes})
        self.what = what
        self.token = uuid.uuid4().hex
        self.host = socket.gethostname()
        self.beats = 0
        self.conflict: dict[str, Any] | None = None
        self._state = "running"
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.RLock()  # a beat (read + write) is one step; forks wait for it (see _BEATING)

    # --- claims -------------------------------------------------------------------------------------

    def _record(self) -> dict[str, Any]:
        return {
            "node_rank": self.node.node_rank,
            "num_nodes": self.node.num_nodes,
            "job": self.job,
            "job_sha256": self.sha,
            "token": self.token,
            "host": self.host,
            "pid": os.getpid(),
            "state": self._state,
            "beat": time.time(),
            "beats": self.beats,
        }

    def _write(self) -> None:
        with self._lock:
            self.beats += 1
            self.store.put(claim_key(self.node.node_rank), json.dumps(self._record(), sort_keys=True).encode())

    def _read(self, rank: int) -> dict[str, Any] | None:
        try:
            raw = self.store.get(claim_key(rank))
        except FileNotFoundError:  # ObjectNotFoundError included
            return None
        try:
            rec = json.loads(raw)
        except ValueError:
            return None  # torn or foreign: treated as absent (the owner rewrites it at its next beat)
        return rec if isinstance(rec, dict) else None

    def claims(self) -> dict[int, dict[str, Any]]:
        """Every claim in ``.nodes/`` by rank (unreadable ones left out)."""
        out: dict[int, dict[str, Any]] = {}
        for meta in self.store.list(NODES_DIR + "/"):
            name = meta.key.rsplit("/", 1)[-1]
            if not (name.startswith("node-") and name.endswith(".json")):
                continue
            try:
                rank = int(name[len("node-") : -len(".json")])
            except ValueError:
                continue
            rec = self._read(rank)
            if rec is not None:
                out[rank] = rec
        return out

    def alive(self, rec: Mapping[str, Any]) -> bool:
        """The claim's node is running (not finished, not failed, beating, and not a dead process here)."""
        if rec.get("state") != "running":
            return False
        pid = rec.get("pid")
        if rec.get("host") == self.host and isinstance(pid, int):
            if pid == os.getpid():  # this very process, or an earlier life of its container (pid 1 again)
                return rec.get("token") == self.token
            if not pid_alive(pid):
                return False
        age = time.time() - float(rec.get("beat") or 0.0)
        return age <= float(cfg.get("optimize_node_stale_after"))

    def _who(self, rec: Mapping[str, Any]) -> str:
        age = time.time() - float(rec.get("beat") or 0.0)
        return f"pid {rec.get('pid')} on host {rec.get('host')!r}, state {rec.get('state')!r}, last heartbeat {age:.1f} s ago"

    def join(self) -> None:
        """Claim this node's rank and check the other nodes agree; raise before any chunk is written.

        Raises:
            NodeRankClaimedError: a live node holds this rank.
            NodeConfigError: a live or finished node of this output_dir has another node count or job.
        """
        rank = self.node.node_rank
        url = self.store.url
        mine = self._read(rank)
        if mine is not None and self.alive(mine):
            raise self._claimed_error(mine)
        self._write()
        settle = float(cfg.get("optimize_node_claim_settle"))
        if settle > 0:
            time.sleep(settle)
        back = self._read(rank)
        if back is None or back.get("token") != self.token:
            raise self._claimed_error(back or {})
        for other, rec in sorted(self.claims().items()):
            if other == rank or not (rec.get("state") == "done" or self.alive(rec)):
                continue  # a dead node's claim: it is rerun under this job or was left by another
            if int(rec.get("num_nodes", -1)) != self.node.num_nodes:
                self._give_up()
                raise NodeConfigError(
                    f"{self.what}(): node {other} of the job in {url} runs with {rec.get('num_nodes')} nodes, this "
                    f"node ({self.node.describe()}) with {self.node.num_nodes}: every node must be given the same "
                    f"node count ({self._who(rec)})"
                )
            if rec.get("job_sha256") != self.sha:
                self._give_up()
                job = rec.get("job")
                if not isinstance(job, dict):
                    job = {}
                raise NodeConfigError(
                    f"{self.what}(): node {other} in {url} runs a different job than this node "
                    f"({self.node.describe()}): {_diff(self.job, job) or 'job fingerprints differ'}. Every node "
                    f"must run the same script with the same arguments and inputs (in the same order); if node "
                    f"{other}'s claim is a leftover of an earlier job, delete {url}/{NODES_DIR}/ ({self._who(rec)})"
                )

    def _claimed_error(self, rec: Mapping[str, Any]) -> NodeRankClaimedError:
        return NodeRankClaimedError(
            f"{self.what}(): node rank {self.node.node_rank} ({self.node.describe()}) is already claimed in "
            f"{self.store.url}/{claim_key(self.node.node_rank)} by another node ({self._who(rec)}): two nodes "
            f"were given the same rank. If that node is dead, rerun after "
            f"{float(cfg.get('optimize_node_stale_after')):g} s (knob optimize_node_stale_after) or delete the claim"
        )

    def _give_up(self) -> None:
        """Remove this node's claim (it leaves the job before writing anything)."""
        try:
            back = self._read(self.node.node_rank)
            if back is not None and back.get("token") == self.token:
                self.store.delete(claim_key(self.node.node_rank))
        except Exception:
            pass

    # --- heartbeat ----------------------------------------------------------------------------------

    def start_heartbeat(self) -> None:
        with _BEATING_LOCK:
            _BEATING.add(self)
        self._thread = threading.Thread(target=self._beat, name="streamscope-node-heartbeat", daemon=True)
        self._thread.start()

    def _beat(self) -> None:
        period = float(cfg.get("optimize_node_heartbeat"))
        while not self._stop.wait(period):
            try:
                with self._lock:
                    rec = self._read(self.node.node_rank)
                    if rec is not None and rec.get("token") != self.token:
                        self.conflict = rec  # another node took this rank over: this one must not publish
                        return
                    self._write()
            except Exception:
                continue  # a failed beat is retried at the next one; staleness allows several

    def stop_heartbeat(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None
        with _BEATING_LOCK:
            _BEATING.discard(self)

    # --- end of this node's share -------------------------------------------------------------------

    def fail(self) -> None:
        """Mark the claim failed (this node stopped on an error): a rerun may take the rank over at once."""
        self.stop_heartbeat()
        try:
            back = self._read(self.node.node_rank)
            if back is None or back.get("token") == self.token:
                self._state = "failed"
                self._write()
        except Exception:
            pass

    def finish(self, node_index: dict[str, Any] | None) -> bool:
        """This node's share is published: write ``{rank}-index.json`` (optimize), mark the claim done; True when
        every node of the job is done (this node then merges).

        Raises:
            NodeRankClaimedError: another node took this rank over while this one ran.
        """
        self.stop_heartbeat()
        back = self._read(self.node.node_rank)
        if self.conflict is not None or (back is not None and back.get("token") != self.token):
            raise self._claimed_error(self.conflict or back or {})
        if node_index is not None:
            self.store.put(node_index_key(self.node.node_rank), json.dumps(node_index, sort_keys=True).encode())
        self._state = "done"
        self._write()
        return self.pending() == []

    def pending(self) -> list[int]:
        """Ranks of this job not done yet."""
        claims = self.claims()
        return [
            r
            for r in range(self.node.num_nodes)
            if not (claims.get(r, {}).get("state") == "done" and claims[r].get("job_sha256") == self.sha)
        ]

    def cleanup(self) -> None:
        """Remove every claim (after the merge: the job is over)."""
        for r in range(self.node.num_nodes):
            try:
                self.store.delete(claim_key(r))
            except (FileNotFoundError, StorageError):
                pass
        try:
            for meta in list(self.store.list(NODES_DIR + "/")):
                self.store.delete(meta.key)
        except (FileNotFoundError, StorageError):
            pass
