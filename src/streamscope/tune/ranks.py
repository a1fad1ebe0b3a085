"""Ranks tune together: their model inputs shared through the process group's key-value store, the slowest rank's
kept values applied by every rank at one published step (see ``README.md``, "Ranks").

A side channel, never a collective: every ``autotune_rank_every`` tuner readings each rank writes its inputs (its
batch count, wait per batch, step, demand, W0, ... and the values its controller kept) under
``streamscope/tune/<epoch>/<rank>`` (one key per rank and epoch, overwritten: the store holds O(epochs x ranks)
keys, never one per batch). Rank 0 reads the others' without blocking (``check`` before ``get``), waits at most
:data:`STALE_ROUNDS` of its rounds for a rank with no entry, leaves out an entry whose sequence number has not moved
for that long (a slow or dead rank), picks the rank
that waits most per batch (lowest rank on ties) and, when that rank's kept values differ from the last plan's,
publishes a plan under ``streamscope/tune/plan``: the values, the decider and the step (the batch count) at which
they apply, a few rounds ahead of every rank's count. Each rank reads the plan key at every reading and, while a
plan is pending, polls its batch count every :data:`POLL_S`; it applies the values when its count reaches the step.

The decider changes only when another rank waits clearly more per batch (:data:`SWITCH` times the decider's) in
:data:`SWITCH_ROUNDS` rounds in a row, or when the decider is left out: each change restarts the new decider's
controller from a warm-up and abandons the old one's candidate, so ranks whose waits differ by noise must not take
turns. Every rank also writes its resident memory as a share of its RAM budget; rank 0 publishes the highest share
under ``streamscope/tune/ram`` and the decider's controller answers for it as for its own (a follower over its
budget makes the decider undo its newest move that added memory, for every rank).

Only the decider's controller runs once a plan exists (a follower's candidate under check is abandoned): one
controller moves knobs, the others follow it at the published step. A rank whose tuner never runs, or that dies,
blocks nobody: rank 0 decides from the entries it has, and without rank 0 no plan comes and each rank tunes alone.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from streamscope.tune.signals import Reading, Window, window

__all__ = [
    "PLAN_KEY",
    "POLL_S",
    "PREFIX",
    "RAM_KEY",
    "STALE_ROUNDS",
    "SWITCH",
    "SWITCH_ROUNDS",
    "Plan",
    "RankShare",
    "default_store",
]

#: Prefix of every key the tuner writes in the store.
PREFIX = "streamscope/tune"
#: The key of the published plan (one, overwritten).
PLAN_KEY = f"{PREFIX}/plan"
#: The key of the highest RAM share any rank reported (rank 0 writes it every round).
RAM_KEY = f"{PREFIX}/ram"
#: Another rank takes the decision over when it waits this many times the decider's wait per batch ...
SWITCH = 1.25
#: ... in this many of rank 0's rounds in a row.
SWITCH_ROUNDS = 2
#: Rounds (of rank 0) an entry's sequence number may stay unchanged before its rank is left out.
STALE_ROUNDS = 3
#: Seconds between two reads of the batch count while a plan is pending (the switch lands within this of the step).
POLL_S = 0.002
#: Rounds of readings ahead of the furthest rank the published step lies (every rank reads the plan in time).
AHEAD_ROUNDS = 2


def default_store() -> Any:
    """The default process group's store when ``torch.distributed`` is initialized with more than one rank, else
    None (torch is imported only if it already is: a run without it pays nothing)."""
    import sys

    if "torch" not in sys.modules:
        return None
    try:
        import torch.distributed as dist

        if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() < 2:
            return None
        from torch.distributed import distributed_c10d

        return distributed_c10d._get_default_store()
    except Exception:  # noqa: BLE001 - no store: each rank tunes alone
        return None


@dataclass(frozen=True)
class Plan:
    """A published plan: ``values`` apply on every rank at batch ``step``."""

    seq: int
    step: int
    decider: int
    values: dict[str, Any]
    inputs: dict[str, Any]

    def fields(self) -> dict[str, Any]:
        return {
            "plan": self.seq,
            "step": self.step,
            "decider": self.decider,
            "values": ",".join(f"{k}={v}" for k, v in sorted(self.values.items())),
            **{f"decider_{k}": v for k, v in self.inputs.items()},
        }


@dataclass
class RankShare:
    """One rank's side of the sharing (driven by the tuner's thread; see the module docstring).

    Args:
        store: a c10d store (``TCPStore``, ``FileStore``, the default group's ``PrefixStore``).
        rank, world: this rank and the number of ranks.
        every: tuner readings between two publications of this rank's inputs.
        tick: seconds between two readings (sizes how far ahead a plan's step lies).
    """

    store: Any
    rank: int
    world: int
    every: int = 5
    tick: float = 1.0
    emit: Callable[[str, dict[str, Any]], None] = lambda name, fields: None
    readings: int = 0
    rounds: int = 0
    published: int = 0  # plans rank 0 published
    plan: Plan | None = None  # the newest plan read
    pending: Plan | None = None  # read, its step not reached
    applied: list[tuple[int, int, int]] = field(default_factory=list)  # (plan, step, batch count it took effect at)
    _last: Reading | None = None
    _seen: dict[int, tuple[int, int]] = field(default_factory=dict)  # rank -> (its seq, rank 0's round seen at)
    _plan_raw: bytes = b""
    _epoch: int = 0  # the epoch of this rank's newest entry (rank 0 reads the others' of the same epoch)
    ram: float = 0.0  # this rank's resident memory as a share of its RAM budget (the runner sets it)
    _challenger: tuple[int, int] | None = None  # (rank, rounds in a row it waited SWITCH x the decider's)
    _ram_plan: int = -1  # the plan under which a rank's RAM over budget was last answered

    # --- what the tuner calls ---------------------------------------------------------------------

    def leads(self) -> bool:
        """This rank's controller may move knobs: no plan yet, or this rank decided the newest."""
        return self.plan is None or self.plan.decider == self.rank

    def next_wake(self, wake: float, now: float) -> float:
        """The tuner's next reading: ``wake``, or sooner while a plan waits for its step."""
        return min(wake, now + POLL_S) if self.pending is not None else wake

    def on_reading(self, reading: Reading, estimate: Callable[[Window], dict[str, Any]], kept: dict[str, Any]) -> None:
        """A tuner reading: every ``every`` readings publish this rank's inputs (and, on rank 0, decide); read the
        plan."""
        self.readings += 1
        if self.readings % self.every == 0:
            self._publish(reading, estimate, kept)
            if self.rank == 0:
                self._decide()
        self.read_plan()

    def due(self, batches: int) -> Plan | None:
        """The pending plan once ``batches`` reached its step (then it is no longer pending)."""
        p = self.pending
        if p is None or batches < p.step:
            return None
        self.pending = None
        self.applied.append((p.seq, p.step, batches))
        return p

    # --- the store ---------------------------------------------------------------------------------

    def _publish(self, reading: Reading, estimate: Callable[[Window], dict[str, Any]], kept: dict[str, Any]) -> None:
        last, self._last = self._last, reading
        rate = 0.0
        inputs: dict[str, Any] = {}
        if last is not None and reading.t > last.t and reading.batches > last.batches and reading.epoch == last.epoch:
            # the round's window: the model's inputs over it, and the wait per batch that picks the decider
            w = window(last, reading)
            rate = w.batches / w.seconds if w.seconds > 0 else 0.0
            inputs = {**estimate(w), "wait_per_batch_ms": round(w.wait_per_batch * 1e3, 3)}
        self.rounds += 1
        entry = {
            "rank": self.rank,
            "seq": self.rounds,
            "batches": reading.batches,
            "batches_per_s": rate,
            "inputs": inputs,
            "values": kept,
            "ram": round(self.ram, 4),
            "applied": self.applied[-1][0] if self.applied else 0,
        }
        self.store.set(f"{PREFIX}/{reading.epoch}/{self.rank}", json.dumps(entry, default=str))
        self._epoch = reading.epoch

    def _entries(self) -> list[dict[str, Any]] | None:
        """The ranks' newest entries with inputs (this epoch's, else the last one's: a rank a round behind at an
        epoch's start still counts); None while a rank's entry is missing or unchanged for fewer than
        :data:`STALE_ROUNDS` rounds (a rank a little behind is waited for, a slow or dead one is left out)."""
        got = []
        wait = False
        for r in range(self.world):
            entry = None
            for epoch in (self._epoch, self._epoch - 1):
                key = f"{PREFIX}/{epoch}/{r}"
                if epoch < 0 or not self.store.check([key]):  # not blocking: a rank that has not written is left out
                    continue
                e = json.loads(self.store.get(key))
                if "wait_per_batch_ms" in e["inputs"]:  # else an epoch's first entry: no window yet
                    entry = e
                    break
            seq = int(entry["seq"]) if entry is not None else -1
            prev = self._seen.get(r)
            if prev is None or prev[0] != seq:
                self._seen[r] = prev = (seq, self.rounds)
            fresh = entry is not None and (prev[1] == self.rounds or self.rounds - prev[1] < STALE_ROUNDS)
            if fresh and entry is not None:
                got.append(entry)
            elif self.rounds - prev[1] < STALE_ROUNDS:
                wait = True  # missing or unchanged for a round or two: waited for, a few rounds at most
        return None if wait else got

    def _decide(self) -> None:
        entries = self._entries()
        if entries:
            worst = max(entries, key=lambda e: (float(e.get("ram", 0.0)), -int(e["rank"])))
            # "plan": the newest plan every rank had applied when it wrote its share
            ram = {"share": float(worst.get("ram", 0.0)), "rank": int(worst["rank"])}
            ram["plan"] = min(int(e.get("applied", 0)) for e in entries)
            self.store.set(RAM_KEY, json.dumps(ram))
        if self.pending is not None:
            return  # the last plan's step not reached yet: it is not overwritten before every rank can apply it
        if not entries:  # None: a rank to wait for; []: nobody wrote
            return
        slow = self._decider(entries)
        values = dict(slow["values"])
        if self.plan is not None and self.plan.values == values and self.plan.decider == slow["rank"]:
            return  # nothing new to apply
        ahead = max(float(e["batches_per_s"]) for e in entries) * self.tick * self.every * AHEAD_ROUNDS
        step = max(int(e["batches"]) for e in entries) + max(1, math.ceil(ahead))
        self.published += 1
        inputs = {k: v for k, v in slow["inputs"].items() if isinstance(v, (int, float, str, bool))}
        plan = {"seq": self.published, "step": step, "decider": int(slow["rank"]), "values": values, "inputs": inputs}
        self.store.set(PLAN_KEY, json.dumps(plan, default=str))
        self.emit("ranks", {"published": self.published, "ranks_seen": len(entries), "decider": plan["decider"]})

    def _decider(self, entries: list[dict[str, Any]]) -> dict[str, Any]:
        """The entry of the rank that decides: the one that waits most per batch (lowest rank on ties), but the
        decider of the last plan keeps it until another waits :data:`SWITCH` times more for :data:`SWITCH_ROUNDS`
        rounds in a row (or it is left out)."""

        def wait(e: dict[str, Any]) -> float:
            return float(e["inputs"]["wait_per_batch_ms"])

        slow = max(entries, key=lambda e: (wait(e), -int(e["rank"])))
        cur = next((e for e in entries if self.plan is not None and int(e["rank"]) == self.plan.decider), None)
        if cur is None or int(slow["rank"]) == int(cur["rank"]):
            self._challenger = None
            return slow
        if wait(slow) < SWITCH * wait(cur):
            self._challenger = None
            return cur
        n = self._challenger[1] + 1 if self._challenger and self._challenger[0] == int(slow["rank"]) else 1
        self._challenger = (int(slow["rank"]), n)
        return slow if n >= SWITCH_ROUNDS else cur

    def worst_ram(self) -> tuple[float, int]:
        """The highest RAM share any rank reported, and that rank, when it is over 1 and every rank had applied
        the newest plan, once per plan (a share measured before the plan that carries an undo would undo a
        second move for the memory of the first); else ``(0.0, -1)``. Not blocking."""
        if not self.store.check([RAM_KEY]):
            return 0.0, -1
        d = json.loads(bytes(self.store.get(RAM_KEY)))
        plan = int(d.get("plan", 0))
        if self.pending is not None or plan < (self.plan.seq if self.plan is not None else 0):
            return 0.0, -1  # read again at the next reading
        if float(d["share"]) <= 1.0 or plan <= self._ram_plan:
            return 0.0, -1  # within budgets, or already answered under this plan: its undo travels in the next
        self._ram_plan = plan
        return float(d["share"]), int(d["rank"])

    def read_plan(self) -> None:
        """Read the published plan (not blocking); a newer one becomes pending."""
        if not self.store.check([PLAN_KEY]):
            return
        raw = bytes(self.store.get(PLAN_KEY))
        if raw == self._plan_raw:
            return
        self._plan_raw = raw
        d = json.loads(raw)
        p = Plan(int(d["seq"]), int(d["step"]), int(d["decider"]), dict(d["values"]), dict(d["inputs"]))
        if self.plan is None or p.seq > self.plan.seq:
            self.plan = self.pending = p
