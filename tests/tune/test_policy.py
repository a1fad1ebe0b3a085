"""The policy's moves for raw files: the raw-file governor owns raw_concurrency while it is on (the two never
move the same knob); the look-ahead is the tuner's."""

from __future__ import annotations

from streamscope.tune import Budgets, Policy, Resources, TargetInfo, Window


def _window(cause: str) -> Window:
    stages = {"download": 0.0, "decompress": 0.0, "read": 0.0, "decode": 0.0, "idle": 0.0}
    stages[cause] = 1.0
    return Window(0.0, 2.0, 100, 1.0, stages, 50, 5.0)


def _moves(governed: bool, values: dict, pinned: set[str] = frozenset()):
    info = TargetInfo(kind="raw", raw_governed=governed, raw_prefetch=8)
    p = Policy(info, Budgets(10**12, "test", 4, 4))
    return p.candidates(_window("download"), values, set(pinned), 2, Resources())


def test_governed_raw_concurrency_is_left_to_the_governor():
    moves = _moves(True, {"raw_prefetch": -1, "raw_concurrency": 0})
    knobs = {k for m in moves for k, _o, _n in m.changes}
    assert knobs == {"raw_prefetch"}
    assert moves[0].changes == (("raw_prefetch", -1, 16),)  # the dataset's own look-ahead (8), doubled


def test_without_the_governor_the_tuner_doubles_raw_concurrency_unless_pinned():
    moves = _moves(False, {"raw_prefetch": 4, "raw_concurrency": 6})
    assert (("raw_concurrency", 6, 12),) in [m.changes for m in moves]
    assert (("raw_prefetch", 4, 8),) in [m.changes for m in moves]
    pinned = _moves(False, {"raw_prefetch": 4, "raw_concurrency": 6}, {"raw_concurrency", "raw_prefetch"})
    assert pinned == []
