"""The model's gauges from readings (``tune/gauges.py``): the speed-up's arithmetic, the window that waits for a
batch, W0 from the min filter, and the fallback to the gauges' own model where the tuner's has seen no download."""

from __future__ import annotations

import pytest

from streamscope.events.registry import M
from streamscope.tune.gauges import ModelGauges
from streamscope.tune.model import Model
from streamscope.tune.signals import Reading, window


def _values(g: ModelGauges) -> dict[str, float]:
    return {m.name: v for m, attrs, v in g._observe() if attrs == {"dataset": "d"}}


def _r(t: float, batches: int, wait: float, downloads: int = 0, dl_s: float = 0.0, nbytes: float = 0.0) -> Reading:
    return Reading(t=t, batches=batches, wait_s=wait, downloads=downloads, download_s=dl_s, download_bytes=nbytes)


def test_speedup_in_flight_w0_and_the_saturation_point_of_windows():
    g = ModelGauges("d")
    assert not g.update(_r(0.0, 0, 0.0), True)  # the first reading starts the window
    assert not g.update(_r(1.0, 0, 0.9), True)  # no batch yet: the window grows
    # 2 s, 10 batches, 1.5 s waited: step 0.05 s, wait 0.15 s per batch -> x4; 20 downloads of 50 ms in 2 s
    assert g.update(_r(2.0, 10, 1.5, downloads=20, dl_s=1.0, nbytes=4e6), True, feed=True)
    v = _values(g)
    assert v[M.MODEL_SPEEDUP.name] == pytest.approx(4.0)
    assert v[M.STORAGE_LATENCY.name] == pytest.approx(0.05) and v[M.STORAGE_UNLOADED_LATENCY.name] == pytest.approx(
        0.05
    )
    assert v[M.STORAGE_IN_FLIGHT.name] == pytest.approx(10 * 0.05)  # 10 downloads/s x 50 ms
    assert v[M.STORAGE_DELIVERED.name] == pytest.approx(2e6)
    assert v[M.STORAGE_SATURATION.name] == pytest.approx(10 * 0.05) and v[M.STORAGE_SATURATED.name] == 0
    # the store queues: 10 downloads/s at 150 ms, more in flight than the saturation point -> saturated, W0 kept
    assert g.update(_r(3.0, 20, 1.5, downloads=30, dl_s=2.5, nbytes=6e6), True, feed=True)
    v = _values(g)
    assert v[M.STORAGE_UNLOADED_LATENCY.name] == pytest.approx(0.05) and v[M.STORAGE_LATENCY.name] == pytest.approx(
        0.15
    )
    assert v[M.STORAGE_SATURATED.name] == 1 and v[M.MODEL_SPEEDUP.name] == pytest.approx(1.0)  # no wait: x1
    assert not g.update(None, False) and _values(g) == v  # between epochs: the window starts again, values kept


def test_a_tuner_model_without_downloads_falls_back_to_the_gauges_own():
    unfed = Model()
    g = ModelGauges("d", unfed)
    g.update(_r(0.0, 0, 0.0), True)
    g.update(_r(1.0, 5, 0.5, downloads=10, dl_s=0.3), True)
    g.update(_r(2.0, 10, 1.0, downloads=20, dl_s=1.3), True)  # 100 ms now; the own filter saw 30 ms
    assert _values(g)[M.STORAGE_UNLOADED_LATENCY.name] == pytest.approx(0.03)
    fed = Model()
    fed.observe(window(_r(0, 0, 0), _r(1, 1, 0, 10, 0.2)), 0)
    g2 = ModelGauges("d", fed)  # the tuner's model, fed by its controller: its W0 (20 ms) is the one shown
    g2.update(_r(0.0, 0, 0.0), True)
    g2.update(_r(1.0, 5, 0.5, downloads=10, dl_s=0.3), True)
    assert _values(g2)[M.STORAGE_UNLOADED_LATENCY.name] == pytest.approx(0.02)


def test_an_observer_whose_loader_is_gone_takes_its_gauges_from_the_collection():
    """Read through the process's metric collection (what Prometheus and OTLP export): the gauges are there while
    the observer publishes, and gone once its thread found the loader gone, while the observer object lives on."""
    import time

    from streamscope.events import instruments
    from streamscope.tune.observe import Observer

    class _Gone:
        def iterating(self) -> bool:
            raise ReferenceError("the loader was collected")

    obs = Observer(_Gone(), tick=0.01)  # type: ignore[arg-type]
    obs.gauges.attrs["dataset"] = "gone-loader"
    obs.gauges.update(_r(0.0, 0, 0.0), True)
    obs.gauges.update(_r(1.0, 10, 0.5, downloads=10, dl_s=0.5), True, feed=True)

    def mine() -> list[str]:
        return [k for k in instruments.collect() if "gone-loader" in k]

    assert mine()  # published
    obs.start()
    deadline = time.monotonic() + 60
    while obs.running and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not obs.running and mine() == [] and obs.error is None
