"""Reference counts on cached chunk files that cannot drift.

Within one process a chunk's references are an in-memory counter. Across processes each process that holds
at least one reference owns one *lease file* next to the chunk: ``<chunk>.lease.<pid>``. A lease is
created before the process looks at the chunk file and removed when its count drops to zero. Whoever wants to
evict a chunk lists its lease files and checks each owner with ``os.kill(pid, 0)``: a lease whose owner has
died is stale and is removed; a live one protects the chunk. There is no shared counter that a crash or a
lock timeout could leave wrong (LitData's ``.cnt`` files, litdata-facts §8.13).

PID reuse can at worst keep a chunk longer than needed (a dead owner's pid reused by an unrelated process);
it can never delete a chunk someone still reads.
"""

from __future__ import annotations

import contextlib
import os
import threading

from streamscope._core.procs import pid_alive

__all__ = ["LEASE_MARK", "LeaseTable", "lease_path", "live_lease_owners", "process_leases"]


LEASE_MARK = ".lease."


def lease_path(path: str, pid: int | None = None) -> str:
    """The lease file of process ``pid`` (default: this one) on chunk ``path``."""
    return f"{path}{LEASE_MARK}{os.getpid() if pid is None else pid}"


def live_lease_owners(path: str) -> list[int]:
    """Pids of live processes holding a lease on ``path``; removes stale leases of dead processes."""
    directory, name = os.path.split(path)
    prefix = name + LEASE_MARK
    owners: list[int] = []
    try:
        entries = os.listdir(directory or ".")
    except FileNotFoundError:
        return owners
    for entry in entries:
        if not entry.startswith(prefix):
            continue
        try:
            pid = int(entry[len(prefix) :])
        except ValueError:
            continue
        if pid == os.getpid() or pid_alive(pid):
            owners.append(pid)
        else:
            with contextlib.suppress(FileNotFoundError):
                os.remove(os.path.join(directory, entry))
    return owners


class LeaseTable:
    """This process's references on chunk files (one lease file per chunk while the count is positive).

    Thread-safe: the prefetch thread acquires, the reader releases. After ``fork`` the child must build its
    own table (leases are per pid); :meth:`for_this_process` does that.
    """

    def __init__(self) -> None:
        self._counts: dict[str, int] = {}
        self._lock = threading.Lock()
        self._pid = os.getpid()

    def acquire(self, path: str) -> None:
        """Take one reference on ``path`` (creates this process's lease file on the first one)."""
        with self._lock:
            n = self._counts.get(path, 0)
            if n == 0:
                os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
                with open(lease_path(path, self._pid), "wb"):
                    pass
            self._counts[path] = n + 1

    def release(self, path: str) -> bool:
        """Drop one reference; return True when this process no longer holds ``path``."""
        with self._lock:
            n = self._counts.get(path, 0)
            if n <= 0:
                return True
            if n == 1:
                del self._counts[path]
                with contextlib.suppress(FileNotFoundError):
                    os.remove(lease_path(path, self._pid))
                return True
            self._counts[path] = n - 1
            return False

    def count(self, path: str) -> int:
        """This process's references on ``path``."""
        with self._lock:
            return self._counts.get(path, 0)

    def held(self) -> list[str]:
        """Paths this process holds at least one reference on."""
        with self._lock:
            return list(self._counts)


_PROCESS_TABLE: tuple[int, LeaseTable] | None = None


def process_leases() -> LeaseTable:
    """This process's lease table, shared by every cache of the process (rebuilt after fork: leases are per pid).

    Two tables in one process would share its lease files: the first to drop its count would remove a lease
    the other still counts on.
    """
    global _PROCESS_TABLE
    pid = os.getpid()
    if _PROCESS_TABLE is None or _PROCESS_TABLE[0] != pid:
        _PROCESS_TABLE = (pid, LeaseTable())
    return _PROCESS_TABLE[1]
