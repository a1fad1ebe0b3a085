"""What the OTLP pipeline reports: counts of exported, failed and dropped items (:class:`Stats`, also added to the
registry's ``streamscope.events.export.*`` counters), each fault said once on stderr (:func:`say_once`), and the
OpenTelemetry SDK's own repeated log lines cut to their first (:func:`quiet_sdk_logs`)."""

from __future__ import annotations

import logging
import sys
import threading
from typing import Any

from streamscope.events import instruments
from streamscope.events.registry import M

__all__ = ["GAVE_UP", "Stats", "quiet_sdk_logs", "say_once"]


_said: set[str] = set()
#: Why an export failed when the exporter returned FAILURE (the SDK logged the cause).
GAVE_UP = "the exporter gave up, see the OpenTelemetry log line above"


def say_once(key: str, message: str) -> None:
    """``message`` on stderr the first time ``key`` comes up in this process (never raises)."""
    if key in _said:
        return
    _said.add(key)
    try:
        sys.stderr.write(f"streamscope telemetry: {message}\n")
    except Exception:
        pass


class _OnceFilter(logging.Filter):
    """Lets each message template of the OpenTelemetry exporters' loggers through once: an endpoint that stays down
    would otherwise log every batch and every retry."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: set[tuple[str, Any]] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        key = (record.name, record.msg)
        if key in self.seen:
            return False
        self.seen.add(key)
        return True


_FILTER = _OnceFilter()
_QUIETED = ("opentelemetry.exporter", "opentelemetry.sdk.metrics", "opentelemetry.sdk.trace")


def quiet_sdk_logs() -> None:
    """Let each message of the OpenTelemetry SDK's and exporters' loggers through once (see :class:`_OnceFilter`)."""
    for name in list(logging.root.manager.loggerDict):
        if name.startswith(_QUIETED):
            lg = logging.getLogger(name)
            if _FILTER not in lg.filters:
                lg.addFilter(_FILTER)


class Stats:
    """Counts of one pipeline (also added to the registry's ``streamscope.events.export.*`` counters)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.said: set[str] = set()
        self.exported = {"traces": 0, "metrics": 0}
        self.failed = {"traces": 0, "metrics": 0}
        self.dropped = {"traces": 0, "metrics": 0}
        #: items an export holds right now (see :meth:`sending`, :meth:`abandon`)
        self.in_flight = {"traces": 0, "metrics": 0}
        self.abandoned = False

    def sending(self, signal: str, n: int) -> None:
        """An export of ``n`` items begins; :meth:`sent` ends it."""
        with self.lock:
            self.in_flight[signal] += n

    def sent(self, signal: str, n: int, where: str, why: str | None) -> None:
        """The export of :meth:`sending` returned: its items exported (``why`` None) or failed (``why`` says why).
        Not counted again when shutdown has already counted them as dropped (:meth:`abandon`)."""
        with self.lock:
            if self.abandoned:
                return
            self.in_flight[signal] -= n
            if why is None:
                self.exported[signal] += n
                return
        self.fail(signal, n, where, why)

    def abandon(self) -> dict[str, int]:
        """Shutdown gives up on the exports still running: their items, per signal (counted as dropped by the
        caller); the outcomes they report later are ignored."""
        with self.lock:
            self.abandoned = True
            left = {k: v for k, v in self.in_flight.items() if v > 0}
            self.in_flight = {k: 0 for k in self.in_flight}
            return left

    def fail(self, signal: str, n: int, where: str, why: str) -> None:
        with self.lock:
            self.failed[signal] += 1
            self.dropped[signal] += n
        instruments.add_key(M.EXPORT_ERRORS.name, 1)
        if n:
            instruments.add_key(M.EXPORT_DROPPED.name, n)
        self.say(
            f"fail:{signal}",
            f"OTLP {signal} export to {where} failed ({why}); the training loop carries on, what cannot be sent is "
            f"dropped and counted in {M.EXPORT_DROPPED.name} (said once)",
        )

    def drop(self, signal: str, n: int, why: str) -> None:
        with self.lock:
            self.dropped[signal] += n
        instruments.add_key(M.EXPORT_DROPPED.name, n)
        self.say(f"drop:{signal}", f"{why}; what was dropped is counted in {M.EXPORT_DROPPED.name} (said once)")

    def say(self, key: str, message: str) -> None:
        """``message`` on stderr the first time ``key`` comes up for this pipeline."""
        with self.lock:
            if key in self.said:
                return
            self.said.add(key)
        say_once(f"{id(self)}:{key}", message)
