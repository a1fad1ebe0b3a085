"""``StreamingDataLoader(profile_cprofile=True)``: stdlib cProfile of the main process and of worker 0.

LitData 0.2.76's files and names: ``{profile_dir}/cprofile_main.prof`` and ``cprofile_worker0.prof`` (read
with ``python -m pstats``), each with a ``.txt`` summary beside it (top functions by self time, then by
cumulative time). ``profile_dir`` defaults to the working directory. With ``num_workers=0`` only the main
file is written.
"""

from __future__ import annotations

import cProfile
import io
import multiprocessing.util
import os
import pstats
from collections.abc import Callable
from typing import Any

__all__ = ["MAIN_STEM", "WORKER_STEM", "WorkerInit", "dump", "output_dir"]


MAIN_STEM = "cprofile_main"
WORKER_STEM = "cprofile_worker0"
_TOP = 40


def output_dir(profile_dir: str | None) -> str:
    """The folder the profiles go to (created)."""
    path = os.path.abspath(profile_dir or os.getcwd())
    os.makedirs(path, exist_ok=True)
    return path


def dump(profiler: cProfile.Profile, stem: str) -> None:
    """Stop ``profiler``; write ``{stem}.prof`` and ``{stem}.txt`` (self time first: cumulative time of a
    worker mixes its threads and counts waits)."""
    profiler.disable()
    profiler.dump_stats(f"{stem}.prof")
    text = io.StringIO()
    stats = pstats.Stats(profiler, stream=text).strip_dirs()
    text.write("--- by self time (tottime) ---\n")
    stats.sort_stats("tottime").print_stats(_TOP)
    text.write("--- by cumulative time (cumtime) ---\n")
    stats.sort_stats("cumulative").print_stats(_TOP)
    with open(f"{stem}.txt", "w", encoding="utf-8") as f:
        f.write(text.getvalue())


class WorkerInit:
    """A ``worker_init_fn`` that profiles worker 0 until it exits, then runs the user's own initializer.

    The profile is written by a multiprocessing finalizer: DataLoader workers leave through
    ``os._exit``, which skips ``atexit`` but runs multiprocessing's exit finalizers.
    """

    def __init__(self, profile_dir: str, user_fn: Callable[[int], Any] | None) -> None:
        self.profile_dir = profile_dir
        self.user_fn = user_fn

    def __call__(self, worker_id: int) -> None:
        if worker_id == 0:
            profiler = cProfile.Profile()
            stem = os.path.join(self.profile_dir, WORKER_STEM)
            multiprocessing.util.Finalize(None, dump, args=(profiler, stem), exitpriority=100)
            profiler.enable()
        if self.user_fn is not None:
            self.user_fn(worker_id)
