"""A StreamingRawDataset whose batches carry what their DataLoader worker used to fetch them (a module of its
own: spawned workers import it)."""

from __future__ import annotations

import os
import time
from typing import Any

from streamscope.raw.dataset import StreamingRawDataset
from streamscope.raw.runtime import runtime

DELAY_S = 0.015  # per batch: the epoch lasts long enough for the main process to move knobs inside it


class ProbeRaw(StreamingRawDataset):
    """Each item: ``(file bytes, what this worker used for the batch)``: the GET limit (as its I/O runtime
    holds it), the look-ahead depth and the look-ahead point, read through the functions ``__getitems__`` uses."""

    def __getitems__(self, indices: list[int]) -> list[Any]:
        t0 = time.monotonic_ns()  # the batch reads its knobs from here on
        items = super().__getitems__(indices)
        time.sleep(DELAY_S)
        probe = {
            "t0": t0,
            "t": time.monotonic_ns(),
            "pid": os.getpid(),
            "concurrency": self.concurrency(),
            "limit": runtime().limit,
            "prefetch": self.prefetch_depth(),
            "when_left": int(self.knobs.value("raw_lookahead_when_left")),
        }
        return [(item, probe) for item in items]


def as_list(batch: list[Any]) -> list[Any]:
    """The DataLoader's collate_fn: the batch as it is."""
    return batch
