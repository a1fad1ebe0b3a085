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

_LOCK = multiprocessing.Lock()  # created at import so forked workers share it with their parent
try:
    _STDIN_FD: int | None = sys.stdin.fileno()
except (AttributeError, OSError, ValueError):
    _STDIN_FD = None
_reopened: list[IO[str]] = []


def _terminal_stdin() -> IO[str] | None:
    """The original stdin reopened from its file descriptor (once per process), or None when there is none."""
    if _STDIN_FD is None:
        return None
    if not _reopened:
        try:
            _reopened.append(os.fdopen(os.dup(_STDIN_FD)))
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
