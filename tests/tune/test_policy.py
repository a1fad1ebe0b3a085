"""The policy's moves for raw files: the raw-file governor owns raw_concurrency while it is on (the two never
move the same knob); the look-ahead is the tuner's; more workers (next epoch) after the raw knobs."""

from __future__ import annotations

from streamscope.tune import Budgets, Policy, Resources, TargetInfo, Window


def _window(cause: str) -> Window:
    stages = {"download": 0.0, "decompress": 0.0, "read": 0.0, "decode": 0.0, "idle": 0.0}
    stages[cause] = 1.0
    return Window(0.0, 2.0, 100, 1.0, stages, 50, 5.0)


def _moves(governed: bool, values: dict, pinned: set[str] = frozenset(), cause: str = "download", conc: int = 0):
    info = TargetInfo(kind="raw", raw_governed=governed, raw_prefetch=8, raw_concurrency=conc)
    p = Policy(info, Budgets(10**12, "test", 4, 4))
    return p.candidates(_window(cause), values, set(pinned), 2, Resources(tree=10**6, own=10**6))


def _knobs(moves) -> list[str]:
    return [k for m in moves for k, _o, _n in m.changes]


def test_governed_raw_concurrency_is_left_to_the_governor():
    moves = _moves(True, {"raw_prefetch": -1, "raw_concurrency": 0})
    assert "raw_concurrency" not in _knobs(moves)
    assert _knobs(moves) == ["raw_prefetch", "num_workers"]  # the look-ahead first, then one more reader
    assert moves[0].changes == (("raw_prefetch", -1, 16),)  # the dataset's own look-ahead (8), doubled


def test_without_the_governor_the_tuner_doubles_raw_concurrency_unless_pinned():
    moves = _moves(False, {"raw_prefetch": 4, "raw_concurrency": 6})
    assert (("raw_concurrency", 6, 12),) in [m.changes for m in moves]
    assert (("raw_prefetch", 4, 8),) in [m.changes for m in moves]
    pinned = _moves(False, {"raw_prefetch": 4, "raw_concurrency": 6}, {"raw_concurrency", "raw_prefetch"})
    assert _knobs(pinned) == ["num_workers"]


def test_without_the_governor_an_unset_raw_concurrency_doubles_from_the_default_limit():
    """Board 0 = each process's size-based default (TargetInfo.raw_concurrency): the move starts from it."""
    moves = _moves(False, {"raw_prefetch": -1, "raw_concurrency": 0}, conc=8)
    assert (("raw_concurrency", 0, 16),) in [m.changes for m in moves]
    assert "raw_concurrency" not in _knobs(_moves(False, {"raw_concurrency": 0}, conc=0))  # no default known


def test_raw_decoding_asks_for_workers_not_raw_knobs():
    moves = _moves(True, {"raw_prefetch": -1, "raw_concurrency": 0}, cause="decode")
    assert moves and set(_knobs(moves)) == {"num_workers"} and moves[0].workers > 2
