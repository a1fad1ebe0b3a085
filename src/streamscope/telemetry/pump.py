"""The pumps of the OTLP pipeline: daemon threads of the rank's main process that export at an interval."""

from __future__ import annotations

import threading
from collections.abc import Callable

from streamscope.telemetry.export_stats import say_once

__all__ = ["Pump"]


class Pump:
    """A daemon thread of the rank's main process that runs ``step(final)`` every ``interval`` seconds (or when
    woken), and once more with ``final=True`` when stopped."""

    def __init__(self, name: str, interval: float, step: Callable[[bool], None], wake: threading.Event) -> None:
        self.interval = interval
        self.step = step
        self.wake = wake
        self.stopping = False
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stopping:
            self.wake.wait(self.interval)
            self.wake.clear()
            if self.stopping:
                break
            self._step(False)
        self._step(True)

    def _step(self, final: bool) -> None:
        try:
            self.step(final)
        except Exception as exc:  # the pump must survive anything
            say_once(f"pump:{self.thread.name}", f"{self.thread.name} error: {type(exc).__name__}: {exc}")

    def stop(self, timeout: float) -> bool:
        """Ask for the final step and wait for it at most ``timeout`` seconds; True when it finished."""
        self.stopping = True
        self.wake.set()
        if threading.current_thread() is self.thread:
            return False
        self.thread.join(max(0.0, timeout))
        return not self.thread.is_alive()
