"""The one batch loop (engine/batch_loop.py): a worker's batches of any plan, its chunk reads scheduled, each chunk
released after the last batch that reads it, the reads stopped when the consumer stops or a batch fails."""

from __future__ import annotations

from typing import Any

import pytest

from streamscope.engine.batch_loop import iter_batches
from tests.engine._data import small_plan


class _Reader:
    """A cached chunk reader that records what the loop asks of it."""

    def __init__(self) -> None:
        self.cache = object()
        self.iteration = 0
        self.calls: list[tuple[str, Any]] = []

    def start(self, schedule: list[int]) -> None:
        self.iteration += 1
        self.calls.append(("start", schedule))

    def finished_with(self, chunk: int) -> None:
        self.calls.append(("finished_with", chunk))

    def stop(self) -> None:
        self.calls.append(("stop", None))


def test_each_worker_builds_its_batches_and_releases_chunks_after_their_last_use():
    plan = small_plan([4, 4, 4, 4], batch_size=4)  # batch j reads chunk j
    reader = _Reader()
    built: list[tuple[int, int]] = []
    ended: list[bool] = []

    def build(n: int, j: int) -> str:
        built.append((n, j))
        return f"batch{j}"

    def schedules(ids: Any) -> list[list[tuple[int, int, int]]]:
        return [[(int(j), n, n) for n, j in enumerate(ids)]]

    got = list(iter_batches(plan, 1, 2, 0, build, [reader], schedules, done=lambda: ended.append(True)))
    assert got == [(1, "batch1"), (3, "batch3")]
    assert built == [(0, 1), (1, 3)]
    assert reader.calls == [("start", [1, 3]), ("finished_with", 1), ("finished_with", 3), ("stop", None)]
    assert ended == [True]


def test_a_resumed_worker_starts_at_the_start_batch():
    plan = small_plan([4] * 6, batch_size=4)
    got = [j for j, _ in iter_batches(plan, 0, 2, 3, lambda n, j: None)]
    assert got == [3, 5]
    assert [j for j, _ in iter_batches(plan, 0, 0, 4, lambda n, j: None)] == [4, 5]  # 0 workers: the main process


def test_stopping_early_or_a_failing_batch_stops_the_reads_and_skips_done():
    plan = small_plan([4, 4, 4], batch_size=4)
    reader = _Reader()
    ended: list[bool] = []
    it = iter_batches(plan, 0, 1, 0, lambda n, j: j, [reader], lambda ids: [[]], done=lambda: ended.append(True))
    assert next(it) == (0, 0)
    it.close()
    assert reader.calls[-1] == ("stop", None) and ended == []

    def fail(n: int, j: int) -> int:
        if j == 1:
            raise ValueError("bad sample")
        return j

    reader = _Reader()
    with pytest.raises(ValueError, match="bad sample"):
        list(iter_batches(plan, 0, 1, 0, fail, [reader], lambda ids: [[]], done=lambda: ended.append(True)))
    assert reader.calls[-1] == ("stop", None) and ended == []
