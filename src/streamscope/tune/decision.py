"""A candidate and its verdict (:class:`Decision`), and the state of its paired check while it runs."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from streamscope.tune.paired import Paired
from streamscope.tune.policy import Move
from streamscope.tune.signals import Window

__all__ = ["Arm", "Decision", "Emit", "Trial"]

#: How the controller reports: ``emit(kind, fields)`` (a ``tune`` event of that kind).
Emit = Callable[[str, dict[str, Any]], None]


@dataclass
class Decision:
    """One candidate and its verdict, with the model's inputs and prediction and the paired check's result."""

    number: int
    move: Move
    t: float
    epoch: int
    wait_before: float
    wait_after: float | None = None
    outcome: str = "trying"  # trying | kept | rolled back | abandoned
    note: str = ""
    inputs: dict[str, Any] = field(default_factory=dict)
    predicted: float = 0.0  # the model's relative gain in throughput
    check: dict[str, Any] = field(default_factory=dict)  # the paired check: kind, blocks, gain, lower, upper

    def checked(self, kind: str, blocks: int, gain: float, lo: float, hi: float) -> None:
        """Record the paired check's result: its kind, blocks, the gain and its interval."""
        self.check = {
            "check": kind,
            "blocks": blocks,
            "gain": round(gain, 4),
            "gain_lo": round(lo, 4),
            "gain_hi": round(hi, 4),
        }

    def fields(self) -> list[dict[str, Any]]:
        """The ``tune`` event fields of this decision, one per knob it moved."""
        out = []
        for knob, old, new in self.move.changes:
            f: dict[str, Any] = {
                "decision": self.number,
                "knob": knob,
                "old": old,
                "new": new,
                "reason": self.move.reason + (f" - {self.note}" if self.note else ""),
                "cause": self.move.cause,
                "outcome": self.outcome,
                "wait_before_ms": round(self.wait_before * 1e3, 3),
                "epoch": self.epoch,
                "predicted_gain": round(self.predicted, 4),
                **self.check,
                **self.inputs,
            }
            if self.wait_after is not None:
                f["wait_after_ms"] = round(self.wait_after * 1e3, 3)
            out.append(f)
        return out


@dataclass
class Arm:
    """One arm of an A-B-B-A block: the incumbent ("A") or the candidate ("B"), its windows. With short epochs the
    arm measures whole epochs instead, from ``epoch`` on (-1: windows)."""

    name: str
    skip: int  # windows to skip (after a switch)
    parts: list[Window] = field(default_factory=list)
    skipped_s: float = 0.0
    epoch: int = -1


@dataclass
class Trial:
    """A candidate under check: live trials run blocks of windows (``test``), epoch trials whole epochs."""

    decision: Decision
    test: Paired | None = None  # live trials
    arms: list[Arm] = field(default_factory=list)  # the block under way
    first_epoch: int = 0  # epoch trials: the incumbent's epoch (A0)
    by_epoch: bool = False  # a live trial whose arms measure whole epochs (epochs of a few windows)
    next_epoch: int = -1  # by_epoch: the epoch after the last arm's (where an arm that switches nothing begins)
