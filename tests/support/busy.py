"""Keep every core busy for a while: the busy machine on which timing-sensitive tests must still pass.

``./run.sh test`` on a machine shared with other work runs the suite with its cores taken (issue 31, item 6):
a unit test that asserts a wall-clock bound of tens of milliseconds, or compares a counter with one another thread
is still moving, passes alone and fails there. Run the test files you changed under this load::

    .venv/bin/python -m tests.support.busy --seconds 600 &
    .venv/bin/python -m pytest -q -p no:randomly -n 2 tests/telemetry/test_pipeline.py
    kill %1

or from code, ``with busy(seconds=60): ...``. One spinning process per core (``--procs``, default
``os.cpu_count()``), each a pure-Python loop without sleeps at nice 0, so it competes with the tests as other
users' work would. Bounded: every spinner stops after ``--seconds`` (default
300) and when this process ends (SIGTERM, SIGINT, or its parent dying), so a forgotten run cannot load the machine
for ever. Standard library only.
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing as mp
import os
import signal
import sys
import time
from collections.abc import Iterator

__all__ = ["busy", "main"]


def _spin(until: float, parent: int) -> None:
    """Burn CPU until ``until`` (monotonic) or until the parent is gone (checked every ~50 ms of work)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    x = 0
    while time.monotonic() < until:
        for i in range(200_000):  # ~10-50 ms of pure-Python work between checks
            x = (x * 31 + i) & 0xFFFFFFFF
        if os.getppid() != parent:
            return


@contextlib.contextmanager
def busy(seconds: float = 300.0, procs: int | None = None) -> Iterator[list[mp.process.BaseProcess]]:
    """``procs`` spinning processes (default one per core) for at most ``seconds``; stopped on leaving."""
    n = procs if procs is not None else (os.cpu_count() or 1)
    ctx = mp.get_context("spawn")  # no copy of the caller's threads or locks
    until = time.monotonic() + seconds  # CLOCK_MONOTONIC is system-wide on Linux: the children share it
    workers = [ctx.Process(target=_spin, args=(until, os.getpid()), daemon=True) for _ in range(n)]
    for w in workers:
        w.start()
    try:
        yield workers
    finally:
        for w in workers:
            w.terminate()
        for w in workers:
            w.join(5)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.support.busy", description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=300.0, help="stop after this long (default 300)")
    ap.add_argument("--procs", type=int, default=None, help="spinning processes (default: one per core)")
    args = ap.parse_args(argv)
    stop = {"now": False}

    def _stop(signum: int, frame: object) -> None:
        stop["now"] = True

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    with busy(args.seconds, args.procs) as workers:
        print(f"busy: {len(workers)} spinning processes for at most {args.seconds:g} s (pid {os.getpid()})", flush=True)
        deadline = time.monotonic() + args.seconds
        while not stop["now"] and time.monotonic() < deadline and any(w.is_alive() for w in workers):
            time.sleep(0.2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
