"""From the model's plan to a move: raw-file knobs (the governor owns raw_concurrency while it runs), pins, the
cache budget's cap on the depth, workers within the budgets."""

from __future__ import annotations

from streamscope.tune import Budgets, Plan, Policy, Resources, TargetInfo


def _policy(**info) -> Policy:
    return Policy(TargetInfo(**info), Budgets(10**12, "test", 4, 4))


def _knobs(moves) -> list[str]:
    return [k for m in moves for k, _o, _n in m.changes]


PLAN = Plan(in_flight=12, depth=18, workers=2, bound="download", why="test")


def test_governed_raw_concurrency_is_left_to_the_governor():
    p = _policy(kind="raw", raw_governed=True, raw_prefetch=8)
    moves = p.move(PLAN, {"raw_prefetch": -1, "raw_concurrency": 0}, set(), 2, Resources(10**6, 10**6))
    assert _knobs(moves) == ["raw_prefetch"] and moves[0].changes == (("raw_prefetch", -1, 18),)


def test_without_the_governor_the_tuner_moves_raw_concurrency_unless_pinned():
    p = _policy(kind="raw", raw_governed=False, raw_prefetch=8, raw_concurrency=4)
    moves = p.move(PLAN, {"raw_prefetch": 4, "raw_concurrency": 6}, set(), 2, Resources(10**6, 10**6))
    assert ("raw_concurrency", 6, 12) in moves[0].changes and ("raw_prefetch", 4, 18) in moves[0].changes
    pinned = p.move(
        PLAN, {"raw_prefetch": 4, "raw_concurrency": 6}, {"raw_prefetch", "raw_concurrency"}, 2, Resources()
    )
    # the user's knobs stay; fewer in flight than the plan wants per reader: one more reader fetches more at once
    assert [m.changes for m in pinned] == [(("num_workers", 2, 3),)] and pinned[0].cause == "download"


def test_chunks_the_depth_stays_inside_the_cache_budget_and_concurrency_inside_the_depth():
    p = _policy(uses_cache=True, chunk_bytes=1_000_000, dataset_bytes=10**10)
    values = {"download_concurrency": 4, "prefetch_depth": 2, "max_cache_size": 20_000_000}
    moves = p.move(PLAN, values, set(), 2, Resources(10**6, 10**6))
    ch = dict((k, n) for k, _o, n in moves[0].changes)
    assert ch["prefetch_depth"] == int(20_000_000 * 0.9) // (1_000_000 * 2) - 2 == 7
    assert ch["download_concurrency"] == 8  # at most one more than the depth


def test_a_decode_bound_plan_asks_for_workers_within_the_cores_and_ram():
    p = _policy()
    plan = Plan(in_flight=None, depth=None, workers=9, bound="cpu", why="", why_workers="decode")
    moves = p.move(plan, {}, set(), 1, Resources(tree=10**9, own=5 * 10**8, children=1))
    assert moves[0].workers == 4 and moves[0].cause == "cpu"
