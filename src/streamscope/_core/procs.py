"""Facts about other processes, asked cheaply (stdlib only)."""

from __future__ import annotations

import os

__all__ = ["pid_alive"]


def pid_alive(pid: int) -> bool:
    """True when a process with this pid runs and is not a zombie (it may belong to another user)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return True  # no procfs: existence is all we can tell
    end = stat.rfind(b")")
    return stat[end + 2 : end + 3] != b"Z"
