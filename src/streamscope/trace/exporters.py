"""Exporters of the event bus in this layer: an encoder paired with a transport.

:class:`LitracerFileSink` is the Litracer encoder (:mod:`.litracer`) over the file transport (:mod:`.files`). It
has the exporter interface of :mod:`streamscope.events.exporters` (``export(batch) -> ExportResult``,
``force_flush(timeout_millis) -> bool``, ``shutdown()``); the Chrome, Perfetto and OTLP exporters sit beside it.
"""

from __future__ import annotations

import re

from streamscope._core import config
from streamscope.events import EventBatch, ExportResult
from streamscope.events.bus import events_represented
from streamscope.events.exporters import FLUSH_TIMEOUT_MILLIS
from streamscope.trace.files import AppendFile
from streamscope.trace.litracer import encode_pieces

__all__ = ["LITRACER_READABLE_CUT", "LitracerFileSink"]


#: The end of a Litracer line cut after its ``ph`` value (only the final ``;`` or newline missing): parsers take
#: it whole (``ph`` is every line's last field, see :mod:`.litracer`).
LITRACER_READABLE_CUT = re.compile(rb"; ph: *[^;\s]+ *;?$")


class LitracerFileSink:
    """Appends Litracer lines to a file: the encoder's pieces, one ``os.writev`` per batch (see :mod:`.files`).

    Several processes may share the file. A failed or short write (full disk) raises ``OSError`` after counting
    the events lost (the processor counts and reports the failure once); no line is ever merged with a cut one.

    Args:
        path: the log file; default: the ``trace_log_file`` knob (``STREAMSCOPE_LOG_FILE``).
    """

    #: Batches may hold the events of several processes (see ``EventBatch``): one encoding, one write.
    mixed_batches = True

    def __init__(self, path: str | None = None) -> None:
        self.file = AppendFile(path or config.get("trace_log_file"), LITRACER_READABLE_CUT)

    @property
    def path(self) -> str:
        return self.file.path

    @property
    def fd(self) -> int | None:
        return self.file.fd

    @fd.setter
    def fd(self, value: int | None) -> None:
        self.file.fd = value

    @property
    def written_events(self) -> int:
        return self.file.written_events

    @property
    def written_bytes(self) -> int:
        return self.file.written_bytes

    @property
    def dropped_events(self) -> int:
        return self.file.dropped_events

    def export(self, batch: EventBatch) -> ExportResult:
        """Encode and append ``batch``; raises OSError after counting what was lost."""
        self.file.write(encode_pieces(batch), events_represented(batch.events))
        return ExportResult.SUCCESS

    def force_flush(self, timeout_millis: int = FLUSH_TIMEOUT_MILLIS) -> bool:
        """Nothing is held back: every export is written immediately."""
        return True

    def shutdown(self) -> None:
        """Close the file."""
        self.file.close()

    def __del__(self) -> None:
        file = getattr(self, "file", None)
        if file is not None:
            file.close()
