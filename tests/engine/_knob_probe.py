"""A StreamingDataset whose samples carry what their DataLoader worker's reader used while reading them (a module
of its own: spawned workers import it)."""

from __future__ import annotations

import os
import time
from typing import Any

from streamscope.cache.prefetch import live_concurrency
from streamscope.engine.dataset import StreamingDataset

DELAY_S = 0.004  # per sample: the epoch lasts long enough for the main process to move knobs inside it


class ProbeDataset(StreamingDataset):
    """Each sample: its index, when and where it was read, and the live values its reader's prefetcher and cache
    used then (read through the very functions they call), with the prefetcher's state."""

    def __getitem__(self, index: Any) -> Any:
        sample = super().__getitem__(index)
        time.sleep(DELAY_S)
        reader = self._reader
        pf = reader._prefetcher
        t0 = time.monotonic_ns()  # the values below are read between t0 and t
        probe = {
            "index": sample["index"],
            "t0": t0,
            "pid": os.getpid(),
            "depth": pf._depth(),
            "concurrency": live_concurrency(pf._concurrency),
            "head_first": int(pf._head_first()),
            "budget": reader.cache.max_cache_size,
            "ahead": pf._next - 1 - pf._want,  # chunks fetched (or being fetched) beyond the one read now
            "threads": len(pf._threads),
        }
        probe["t"] = time.monotonic_ns()
        return probe
