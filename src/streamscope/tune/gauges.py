"""The capacity model made visible: its outputs as registry gauges, from the readings the tuner (or the observer,
``observe.py``) takes each tick.

What no other loader shows (issue 32, deliverable 10), per rank and loader (``dataset``):

* ``streamscope.model.speedup``: (step + wait) / step per batch over the last window, the speed-up the loop would
  get if it never waited (1: it does not wait);
* ``streamscope.storage.in_flight`` (requests under way, Little's law), ``.latency`` (the window's mean),
  ``.unloaded_latency`` (W0, the model's min filter), ``.delivered`` (bytes per second), ``.saturation`` (the BDP:
  max requests/s x W0, the in-flight beyond which the latency only rises) and ``.saturated`` (0/1).

Side by side, they say whose the wait is: a speed-up well above 1 with the in-flight below the saturation point and
the latency near W0 is the loader's to fix (more in flight, more workers: what the tuner does); in flight at the
saturation point with the latency above W0 is the storage's (more requests only queue).

A window runs between two readings of a loop that iterates, and grows until it holds a batch (a long wait is in
the window of the batch it waited for). The gauges are observed when the metrics are read (``events.observe``),
so they cost nothing on the loop's path; before the first window they are absent, not 0.
"""

from __future__ import annotations

from typing import Any

from streamscope import events as ev
from streamscope.events.registry import M, Metric
from streamscope.tune.model import Estimates, Model
from streamscope.tune.signals import Reading, window

__all__ = ["ModelGauges", "dataset_of"]


def dataset_of(target: Any) -> str:
    """The short name of the dataset a target's loader reads (the ``dataset`` attribute of the loader's own
    metrics); "" when the target adapts no loader (``api.autotune.LoaderTarget`` holds its loader weakly)."""
    ref = getattr(target, "_loader", None)
    loader = ref() if callable(ref) else None
    return str(getattr(getattr(loader, "_observer", None), "dataset_name", "") or "")  # the loader observer's


class ModelGauges:
    """The model's outputs of one loader, as the gauges of the module docstring.

    Args:
        dataset: the ``dataset`` attribute of the gauges.
        model: the model whose filters (W0, max rate) the gauges read; the tuner passes its controller's, which
            it feeds itself; the observer's own is fed here (``feed=True`` in :meth:`update`).

    The gauges also feed a model of their own with every window: read where the given one has seen no download
    yet (its warm-up, a rank that follows another's plan and runs no controller, ``tune/ranks.py``).
    """

    def __init__(self, dataset: str = "", model: Model | None = None) -> None:
        self._own = Model()
        self.model = model if model is not None else self._own
        self.attrs = {"dataset": dataset}
        self.estimates: Estimates | None = None  # of the last window
        self.speedup = 0.0  # of the last window with a step (0: none yet)
        self.windows = 0  # windows published
        self._last: Reading | None = None
        self._values: list[tuple[Metric, dict[str, Any], float]] = []
        ev.observe(self._observe)

    def _observe(self) -> list[tuple[Metric, dict[str, Any], float]]:
        return self._values

    def close(self) -> None:
        """The loader is gone or its tuner/observer stopped: the gauges vanish from the next collection at once
        (they did only once this object was collected)."""
        self._values = []

    def update(self, reading: Reading | None, iterating: bool, model: Model | None = None, feed: bool = False) -> bool:
        """One reading (None or ``iterating`` False between epochs: time no batch's, the window starts again);
        True when a window was published. ``model``: the tuner's model (default: this one's); ``feed``: feed it
        the window first (the observer's model; the tuner's controller feeds its own)."""
        m = model if model is not None else self.model
        if reading is None or not iterating:
            self._last = None
            return False
        last = self._last
        if last is None or reading.batches < last.batches or reading.wait_s < last.wait_s - 1e-9:
            self._last = reading  # the first reading, or the counters went back (a new iteration's ring)
            return False
        w = window(last, reading)
        if w.batches == 0:
            return False  # the window grows until a batch comes: a long wait belongs to the batch it waited for
        self._last = reading
        if feed:
            m.observe(w, w.retries)
        if m is not self._own:
            self._own.observe(w, w.retries)
            if not m._lat:  # the given model has no latency sample (same package: its filters are ours to read)
                m = self._own
        e = m.estimates(w, w.retries, w.workers)
        if e.step > 0:
            self.speedup = (e.step + e.wait) / e.step
        self.estimates = e
        self.windows += 1
        a = self.attrs
        values = [
            (M.STORAGE_IN_FLIGHT, a, e.in_flight),
            (M.STORAGE_LATENCY, a, e.latency),
            (M.STORAGE_UNLOADED_LATENCY, a, e.w0),
            (M.STORAGE_DELIVERED, a, w.download_bytes / w.seconds if w.seconds > 0 else 0.0),
            (M.STORAGE_SATURATION, a, e.bdp),
            (M.STORAGE_SATURATED, a, 1.0 if e.saturated else 0.0),
        ]
        if self.speedup > 0:
            values.insert(0, (M.MODEL_SPEEDUP, a, self.speedup))
        self._values = values  # one assignment: the metrics' reader sees the old list or the new
        return True
