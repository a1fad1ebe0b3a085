"""The file transport: appends runs of whole lines to a file shared by the processes of a run.

Encoding-agnostic: it gets the encoder's pieces (byte buffers, each a run of whole newline-terminated lines) and
how many events they stand for. Each write is one ``os.writev`` of the pieces (no joined copy) on an ``O_APPEND``
descriptor, so several processes may share the file: each write lands whole at its end and lines never
interleave. A failed or short write (full disk) counts the events it lost, removes a line cut short when nobody
wrote after it, and makes the next write start with a newline, so no line is ever merged with a cut one.
"""

from __future__ import annotations

import errno
import os
import re
from typing import Any

from streamscope._core.errors import TraceConfigError

__all__ = ["AppendFile", "open_log"]


#: Larger batches are written in runs of whole lines of at most this many bytes.
_MAX_WRITE = 1 << 20
#: ``os.writev`` where the system has it (POSIX), and the most buffers one call takes (IOV_MAX, 1024 on Linux).
_WRITEV = getattr(os, "writev", None)
_IOV_MAX = min(1024, os.sysconf("SC_IOV_MAX")) if hasattr(os, "sysconf") else 0


def open_log(path: str) -> int:
    """Open ``path`` for appending (created if missing, with its directory) and return the fd.

    Raises:
        TraceConfigError: naming the path when it cannot be opened for writing.
    """
    try:
        parent = os.path.dirname(os.path.abspath(path))
        if parent and not os.path.isdir(parent):
            os.makedirs(parent, exist_ok=True)
        return os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
    except OSError as exc:
        raise TraceConfigError(
            f"trace log file {path!r} cannot be opened for appending: {exc.strerror or exc}"
        ) from None


class AppendFile:
    """Whole lines appended to ``path`` (see module doc).

    Args:
        path: the file, opened for appending at once.
        readable_cut: matches the end of a line cut short that readers still take whole (e.g. a Litracer line cut
            after its last field's value); such a line counts as written.

    Attributes:
        fd: the open descriptor (None once closed).
        written_events, written_bytes, dropped_events: what went to the file and what was lost.
    """

    def __init__(self, path: str, readable_cut: re.Pattern[bytes] | None = None) -> None:
        self.path = path
        self.readable_cut = readable_cut
        self.fd: int | None = open_log(path)
        self.written_events = 0
        self.written_bytes = 0
        self.dropped_events = 0
        self._broken_line = False

    def write(self, pieces: list[Any], n_events: int) -> None:
        """Append ``pieces`` (runs of whole lines, standing for ``n_events`` events); raises OSError after counting
        what was lost.

        Usually one ``os.writev`` of the pieces (no joined copy); a batch over ``_MAX_WRITE`` bytes is written in
        runs of whole lines of at most that size, and after a cut line the next write starts with a newline.
        """
        if self.fd is None:
            raise OSError(errno.EBADF, f"trace log {self.path!r} is closed")
        total = sum(map(len, pieces))
        if _WRITEV is not None and not self._broken_line and total <= _MAX_WRITE and len(pieces) <= _IOV_MAX:
            try:
                n = _WRITEV(self.fd, pieces) if total else 0
            except OSError:
                self._lost(b"".join(pieces), 0, n_events)
                raise
            if n < total:
                self._short_write(b"".join(pieces), 0, n, total, n_events, 0)
            self.written_events += n_events
            self.written_bytes += total
            return
        data = b"".join(pieces)
        lead = 0
        if self._broken_line:
            data = b"\n" + data
            lead = 1
        view = memoryview(data)
        pos = 0
        while pos < len(data):
            end = len(data) if len(data) - pos <= _MAX_WRITE else data.rfind(b"\n", pos, pos + _MAX_WRITE) + 1
            if end <= pos:
                end = min(len(data), pos + _MAX_WRITE)
            try:
                n = os.write(self.fd, view[pos:end])
            except OSError:
                self._lost(data, pos, n_events, lead)
                raise
            if n < end - pos:
                self._short_write(data, pos, n, end, n_events, lead)
            pos = end
            self._broken_line = False
        self.written_events += n_events
        self.written_bytes += len(data)

    def _short_write(self, data: bytes, pos: int, n: int, end: int, n_events: int, lead: int) -> None:
        """Account for a write of ``data[pos:end]`` that wrote only ``n`` bytes (full disk) and raise."""
        done = pos + n
        partial = done - (data.rfind(b"\n", 0, done) + 1)
        if partial and self._remove_tail(partial):
            done -= partial
        self._lost(data, done, n_events, lead)
        raise OSError(errno.ENOSPC, f"short write to trace log {self.path!r} ({n} of {end - pos} bytes)")

    def _remove_tail(self, length: int) -> bool:
        """Cut the last ``length`` bytes (a line cut short by a full disk) off the file, if they are ours.

        Only when the file still ends where our write ended (nobody appended since); best effort.
        """
        try:
            assert self.fd is not None
            end = os.lseek(self.fd, 0, os.SEEK_CUR)
            if os.fstat(self.fd).st_size != end or length > end:
                return False
            os.ftruncate(self.fd, end - length)
            return True
        except (OSError, AssertionError):
            return False

    def _lost(self, data: bytes, pos: int, n_events: int, lead: int = 0) -> None:
        """Count what of ``data`` (``pos`` bytes of it in the file) was written and what was lost."""
        lost = data.count(b"\n", max(pos, lead))
        cut = data[data.rfind(b"\n", 0, pos) + 1 : pos]
        if lost and self.readable_cut is not None and self.readable_cut.search(cut):
            lost -= 1  # readers take this cut line whole, so it was written
        lost = min(n_events, lost)
        self.dropped_events += lost
        self.written_events += max(0, n_events - lost)
        self.written_bytes += pos
        self._broken_line = pos > 0 and data[pos - 1 : pos] != b"\n"

    def close(self) -> None:
        """Close the file (idempotent)."""
        fd, self.fd = self.fd, None
        if fd is not None:
            try:
                os.close(fd)
            except OSError:
                pass
