"""The model's gauges without the tuner: a light observer thread in a rank's main process.

When metrics are on (``STREAMSCOPE_PROMETHEUS_PORT``, ``enable_metrics``, ``enable_telemetry``) and the tuner is
off, a loader's iteration starts an :class:`Observer` (``api/observe.py``, through the loader's ``observer``
hook): every ``metrics_interval`` it takes the tuner's reading (:class:`~streamscope.tune.runner.Sensors`: the
loop's batches and wait, the merged metrics' downloads) and publishes the model's outputs
(:class:`~streamscope.tune.gauges.ModelGauges`); it moves no knob. With the tuner on, the tuner's own thread
publishes them from its readings and model instead. Never in a DataLoader worker, never with metrics off; it
stops with its loader (when the loader is collected, or its thread finds it gone), and its gauges go with it.

What a tick costs is kept (:attr:`Observer.costs`, seconds of this thread's CPU per tick): a reading is the
tuner's (``benchmarks/bench_tune_read.py``: about 0.2 ms), the gauges a few divisions.
"""

from __future__ import annotations

import threading
import time
from collections import deque

from streamscope._core import config
from streamscope.tune.gauges import ModelGauges, dataset_of
from streamscope.tune.runner import Sensors
from streamscope.tune.target import Target

__all__ = ["Observer"]


class Observer:
    """Publishes the model's gauges of one target every ``tick`` seconds from a daemon thread (see the module
    docstring).

    Args:
        target: the loader, adapted (``api.autotune.LoaderTarget``).
        tick: seconds between two readings (default: ``metrics_interval``).
        sensors: what is read (default: the metrics view and the loader's live counters).
    """

    def __init__(self, target: Target, tick: float | None = None, sensors: Sensors | None = None) -> None:
        self.target = target
        self.tick = float(tick if tick is not None else config.get("metrics_interval"))
        self.sensors = sensors or Sensors()
        self.gauges = ModelGauges(dataset_of(target))
        self.costs: deque[float] = deque(maxlen=1000)  # thread CPU seconds of each tick
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.error: BaseException | None = None

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> None:
        """Start the thread (once; a stopped observer stays stopped)."""
        if self._thread is not None or self._stop.is_set():
            return
        self._thread = threading.Thread(target=self._run, name="streamscope-model", daemon=True)
        self._thread.start()

    def step(self) -> bool:
        """One tick: a reading and the gauges (True when a window was published)."""
        t = self.target
        iterating = t.iterating()
        reading = self.sensors.read(time.monotonic(), t) if iterating else None
        return self.gauges.update(reading, iterating, feed=True)

    def _run(self) -> None:
        try:
            while not self._stop.wait(self.tick):
                c0 = time.thread_time()
                try:
                    self.step()
                except ReferenceError:  # the loader is gone
                    break
                except Exception as exc:  # noqa: BLE001 - the gauges stop; the loader must go on
                    self.error = exc
                    break
                self.costs.append(time.thread_time() - c0)
        finally:
            self.gauges.close()

    def stop(self, timeout: float = 2.0) -> None:
        self._stop.set()
        self.gauges.close()
        th = self._thread
        if th is not None and th.is_alive() and th is not threading.current_thread():
            th.join(timeout)
