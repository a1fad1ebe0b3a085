"""``breakpoint()``: a pdb prompt that works inside optimize/map/DataLoader worker processes.

A worker process started by ``multiprocessing`` has its ``sys.stdin`` replaced by ``/dev/null`` (or closed),
so the builtin ``breakpoint()`` returns at once there. This one reopens the terminal's stdin file descriptor
(inherited by the worker) and serialises prompts with a lock so two workers stopping at once do not read the
same keystrokes.
"""

from __future__ import annotations

import multiprocessing
import os
import pdb
import sys
from typing import IO, Any

__all__ = ["MultiprocessingPdb", "breakpoint"]


_LOCK = multiprocessing.Lock()  # created at import so forked workers share it with their parent
_reopened: list[IO[str]] = []


def _terminal_stdin() -> IO[str] | None:
    """File descriptor 0 reopened (once per process), or None when the process has none.

    ``multiprocessing`` points ``sys.stdin`` at ``/dev/null`` in its children but leaves descriptor 0 (the
    parent's stdin, inherited) open, so fd 0 is used rather than whatever ``sys.stdin`` is at import time
    (this module is often first imported inside the worker, after the swap).
    """
    if not _reopened:
        try:
            _reopened.append(os.fdopen(os.dup(0)))
        except OSError:
            return None
    return _reopened[0]


class MultiprocessingPdb(pdb.Pdb):
    """A ``pdb.Pdb`` that reads commands from the terminal's stdin even in a child process."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("nosigint", True)
        super().__init__(**kwargs)

    def _cmdloop(self) -> None:
        saved = sys.stdin
        with _LOCK:
            stdin = _terminal_stdin()
            if stdin is not None:
                sys.stdin = stdin
                self.stdin = stdin
            try:
                self.cmdloop()
            finally:
                sys.stdin = saved


def breakpoint() -> None:  # noqa: A001 - LitData's name
    """Stop in the debugger at the caller's line; safe in multiprocessing workers."""
    MultiprocessingPdb().set_trace(sys._getframe().f_back)
