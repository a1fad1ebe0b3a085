"""Span hand-over from a process that writes its own events to its rank's main process, through the run directory.

DataLoader workers that live one epoch hand their events to the main process in a parcel (``recording.handover``),
and the main process's span exporter gets them with its own. A worker that writes its own events instead
(persistent workers, a share of more than ``trace_handover_max_events`` events, an optimize worker) must not
export: no OTLP connection and no exporter thread per worker (OpenTelemetry's SDK threads do not survive a fork,
and a worker's partial view would be sent as the rank's). Its span exporter is a :class:`SpoolSink`: it appends
the events that may become spans (:func:`~streamscope.telemetry.spans.selected`: a few per chunk) to
``otel-spans-<pid>.bin`` in the run directory, one length-prefixed pickle per flush, and the main process
reads every such file at each of its flushes (:class:`SpoolReader`) and exports what it finds.

Bounded: a worker stops appending after :data:`MAX_BYTES` (counted as dropped); the main process removes a file
once its process is gone and the file is read to its end.
"""

from __future__ import annotations

import os
import pickle
import struct
from typing import Any

from streamscope._core.procs import pid_alive
from streamscope.events import instruments
from streamscope.events.bus import events_represented
from streamscope.events.exporters import FLUSH_TIMEOUT_MILLIS, EventBatch, ExportResult
from streamscope.events.registry import M
from streamscope.telemetry.spans import selected

__all__ = ["MAX_BYTES", "PREFIX", "SUFFIX", "SpoolReader", "SpoolSink", "spool_path"]


PREFIX = "otel-spans-"
SUFFIX = ".bin"
#: Most bytes one process appends to its spool (beyond: its events are dropped and counted).
MAX_BYTES = 64 << 20
_LEN = struct.Struct("<I")


def spool_path(directory: str, pid: int) -> str:
    return os.path.join(directory, f"{PREFIX}{pid}{SUFFIX}")


class SpoolSink:
    """The span exporter of a process that is not its rank's main process (see the module doc).

    Args:
        directory: the run directory (``STREAMSCOPE_METRICS_DIR``); None: nothing is spooled (counted as dropped).
    """

    mixed_batches = True

    def __init__(self, directory: str | None) -> None:
        self.directory = directory
        self.fd: int | None = None
        self.pid = os.getpid()
        self.written = 0
        self.dropped = 0
        self.closed = False

    def export(self, batch: EventBatch) -> ExportResult:
        if self.closed:  # OpenTelemetry's exporter contract: nothing after shutdown (the file is not reopened)
            return ExportResult.FAILURE
        events = [e for e in batch.events if selected(e)]
        if not events:
            return ExportResult.SUCCESS
        if self.directory is None or os.getpid() != self.pid:
            self._drop(events)
            return ExportResult.SUCCESS
        payload = pickle.dumps((batch.epoch_offset_ns, batch.env, batch.envs, events), protocol=pickle.HIGHEST_PROTOCOL)
        record = _LEN.pack(len(payload)) + payload
        if self.written + len(record) > MAX_BYTES:
            self._drop(events)
            return ExportResult.SUCCESS
        if self.fd is None:
            self.fd = os.open(spool_path(self.directory, self.pid), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        size = os.fstat(self.fd).st_size
        try:
            n = os.write(self.fd, record)
        except OSError:
            n = -1
        if n != len(record):  # a full disk: no cut record may stay behind (the reader would stop at it)
            try:
                os.ftruncate(self.fd, size)
            except OSError:
                pass
            self._drop(events)
            return ExportResult.FAILURE
        self.written += n
        return ExportResult.SUCCESS

    def _drop(self, events: list[Any]) -> None:
        n = events_represented(events)
        self.dropped += n
        instruments.add_key(M.EXPORT_DROPPED.name, n)

    def force_flush(self, timeout_millis: int = FLUSH_TIMEOUT_MILLIS) -> bool:
        """Every export is written at once."""
        return True

    def shutdown(self) -> None:
        self.closed = True
        fd, self.fd = self.fd, None
        if fd is not None and os.getpid() == self.pid:
            try:
                os.close(fd)
            except OSError:
                pass


class SpoolReader:
    """What the run's other processes spooled, read by its main process (each record once)."""

    def __init__(self) -> None:
        self.offsets: dict[str, int] = {}

    def collect(self, directory: str | None) -> list[EventBatch]:
        """The batches appended since the last call, file by file in write order."""
        if not directory:
            return []
        try:
            names = [n for n in os.listdir(directory) if n.startswith(PREFIX) and n.endswith(SUFFIX)]
        except OSError:
            return []
        me = os.getpid()
        out: list[EventBatch] = []
        for name in names:
            try:
                pid = int(name[len(PREFIX) : -len(SUFFIX)])
            except ValueError:
                continue
            if pid == me:
                continue
            path = os.path.join(directory, name)
            alive = pid_alive(pid)  # asked before reading: a process gone now wrote its last record already
            off = self.offsets.get(path, 0)
            try:
                with open(path, "rb") as f:
                    f.seek(off)
                    data = f.read()
            except OSError:
                self.offsets.pop(path, None)
                continue
            pos = 0
            while pos + _LEN.size <= len(data):
                (n,) = _LEN.unpack_from(data, pos)
                if pos + _LEN.size + n > len(data):
                    break  # being written
                try:
                    offset_ns, env, envs, events = pickle.loads(data[pos + _LEN.size : pos + _LEN.size + n])
                    out.append(EventBatch(events, offset_ns, env, envs))
                except Exception:
                    pass  # a damaged record is skipped, the ones after it are read
                pos += _LEN.size + n
            off += pos
            if not alive and pos == len(data):
                try:
                    os.remove(path)
                except OSError:
                    pass
                self.offsets.pop(path, None)
            else:
                self.offsets[path] = off
        return out
