"""Problems of the tracer said once per process on stderr: the data path never sees them."""

from __future__ import annotations

import sys

__all__ = ["Reporter"]


class Reporter:
    """``report(key, message)`` writes ``message`` the first time ``key`` comes up in this process (never raises)."""

    __slots__ = ("said",)

    def __init__(self) -> None:
        self.said: set[str] = set()

    def __call__(self, key: str, message: str) -> None:
        if key in self.said:
            return
        self.said.add(key)
        try:
            sys.stderr.write(f"streamscope tracer: {message}\n")
        except Exception:
            pass
