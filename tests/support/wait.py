"""Wait for a condition with a deadline: how a test waits for another thread or process, on any machine.

A fixed ``time.sleep(0.3)`` before an assertion is a timed test: on a busy machine the other thread has not got
there yet (issue 31, item 6). Poll instead, with a deadline of seconds that only a hang reaches.
"""

from __future__ import annotations

import time
from collections.abc import Callable

__all__ = ["until"]


def until(what: Callable[[], object], seconds: float = 20.0, every: float = 0.01) -> bool:
    """Poll ``what()`` every ``every`` seconds until it is true (True) or ``seconds`` have passed (False)."""
    deadline = time.monotonic() + seconds
    while not what():
        if time.monotonic() > deadline:
            return False
        time.sleep(every)
    return True
