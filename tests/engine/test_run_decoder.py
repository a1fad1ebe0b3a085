"""engine/run_decoder.py and the one-iteration-at-a-time rule of engine/read_schedule.py."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from streamscope.engine.read_schedule import ScheduledReads
from streamscope.engine.run_decoder import RunDecoder


def test_runs_are_decoded_when_the_batch_reading_their_first_sample_comes():
    ci = np.array([4, 4, 4, 1, 1, 7, 7, 7, 7], dtype=np.int64)
    ii = np.arange(len(ci), dtype=np.int64) * 10
    calls: list[tuple[int, list[int]]] = []

    def decode(chunk: int, items: np.ndarray) -> list[Any]:
        calls.append((chunk, items.tolist()))
        return [(chunk, int(i)) for i in items.tolist()]

    dec = RunDecoder(ci, ii, decode)
    assert calls == []  # nothing opened before a batch asks
    assert dec.take(2) == [(4, 0), (4, 10)]
    assert calls == [(4, [0, 10, 20])]  # the first run only
    assert dec.take(2) == [(4, 20), (1, 30)]  # a batch across two runs opens the second as it needs it
    assert calls[1:] == [(1, [30, 40])]
    assert dec.take(1) == [(1, 40)]
    assert len(calls) == 2  # chunk 7's run waits for its batch
    assert dec.take(4) == [(7, 50), (7, 60), (7, 70), (7, 80)]
    assert [c for c, _ in calls] == [4, 1, 7]
    with pytest.raises(IndexError):
        dec.take(1)


class _Reader:
    """A cached chunk reader's calls, with the iteration counter ChunkReader keeps."""

    def __init__(self) -> None:
        self.cache = object()
        self.iteration = 0
        self.log: list[object] = []

    def start(self, order: list[int]) -> None:
        self.iteration += 1
        self.log.append(("start", order))

    def finished_with(self, chunk: int) -> None:
        self.log.append(("release", chunk))

    def stop(self) -> None:
        self.log.append("stop")


def test_an_ended_iteration_no_longer_acts_on_its_reader():
    reader = _Reader()
    old = ScheduledReads([reader], [[(3, 0, 0), (5, 1, 1)]])
    old.batch_done(0)
    new = ScheduledReads([reader], [[(3, 0, 0), (5, 0, 2)]])  # a new iteration on the same reader ends the old
    assert reader.log == [("start", [3, 5]), ("release", 3), ("start", [3, 5])]
    old.batch_done(1)  # the old iterator resumed, or collected: neither releases nor stops the new one's chunks
    old.stop()
    assert reader.log[3:] == []
    new.batch_done(0)
    new.stop()
    assert reader.log[3:] == [("release", 3), "stop"]
