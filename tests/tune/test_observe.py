"""The capacity model's gauges, read as a user reads them: a scrape of the rank's Prometheus endpoint during a run.

* a local dataset and a slow step: the loop hardly waits, the speed-up is about 1, no storage traffic;
* a dataset on a store 100 ms away (``benchmarks/_latency_store.py``) and a fast step: the loop waits on the
  downloads, the speed-up is well above 1 and W0 is close to the injected latency;
* the same with the tuner on: its thread publishes the gauges from its own readings;
* metrics off: no observer starts.
"""

from __future__ import annotations

import os
import threading
import time
import urllib.request

import pytest

from benchmarks._latency_store import LatencyStore, Profile
from streamscope.api.observe import observer_of
from streamscope.cli.top import parse_exposition
from streamscope.engine.dataloader import StreamingDataLoader
from streamscope.engine.dataset import StreamingDataset
from streamscope.events.registry import M, Metric, prometheus_name
from tests.engine._data import image_sample, write_dataset
from tests.support.tracing import clean_tracer  # noqa: F401

pytestmark = [pytest.mark.usefixtures("clean_tracer"), pytest.mark.timeout(300)]

LATENCY = 0.1  # seconds the store adds to every request
GAUGES = (
    M.MODEL_SPEEDUP,
    M.STORAGE_IN_FLIGHT,
    M.STORAGE_LATENCY,
    M.STORAGE_UNLOADED_LATENCY,
    M.STORAGE_DELIVERED,
    M.STORAGE_SATURATION,
    M.STORAGE_SATURATED,
)


def _scrape(port: int, dataset: str) -> dict[str, float]:
    """Each gauge of this rank's loader of ``dataset`` from the endpoint's text exposition (absent ones left out):
    the gauges of loaders that earlier tests of this process ran stay in the registry under their own names."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as r:
        series = parse_exposition(r.read().decode())
    out: dict[str, float] = {}
    for m in GAUGES:
        for labels, value in series.get(prometheus_name(m), ()):
            assert labels["rank"] == "0" and labels["dataset"], labels
            if labels["dataset"] == dataset:
                out[m.name] = value
    return out


def _run(loader: StreamingDataLoader, step_s: float, port: int, want: Metric, seconds: float) -> dict[str, float]:
    """Iterate epoch after epoch (``step_s`` per batch) until the endpoint has served ``want`` for a while (three
    scrapes after its first), or ``seconds`` passed; the last scrape."""
    stop, errors = threading.Event(), []

    def feed() -> None:
        try:
            while not stop.is_set():
                for _ in loader:
                    if stop.wait(step_s):
                        break
        except BaseException as e:  # handed to the test
            errors.append(e)

    th = threading.Thread(target=feed, daemon=True)
    th.start()
    seen, got = 0, {}
    deadline = time.monotonic() + seconds
    try:
        while time.monotonic() < deadline and seen < 4:
            time.sleep(0.5)
            got = _scrape(port, loader._observer.dataset_name)
            seen += want.name in got
    finally:
        stop.set()
        th.join(60)
    assert not errors, errors
    assert not th.is_alive()
    print("SCRAPED", {k.split(".", 1)[1]: round(v, 4) for k, v in got.items()})
    return got


@pytest.fixture
def endpoint():
    from streamscope.telemetry import prometheus

    os.environ["STREAMSCOPE_METRICS_INTERVAL"] = "0.25"  # clean_tracer restores the environment
    port = prometheus.start_endpoint(0)
    assert port
    try:
        yield port
    finally:
        prometheus.stop_endpoint()


def test_a_step_bound_loop_would_gain_nothing(tmp_path, endpoint):
    ds = StreamingDataset(write_dataset(str(tmp_path / "steps"), 400, image_sample, chunk_size=20))
    loader = StreamingDataLoader(ds, batch_size=4, num_workers=1)
    got = _run(loader, 0.05, endpoint, M.MODEL_SPEEDUP, 120)
    assert M.MODEL_SPEEDUP.name in got, got
    assert 1.0 <= got[M.MODEL_SPEEDUP.name] < 1.3, got  # a 50 ms step, batches of 4 tiny local samples ready
    assert got[M.STORAGE_IN_FLIGHT.name] == 0 and got[M.STORAGE_DELIVERED.name] == 0, got  # nothing downloaded
    assert got[M.STORAGE_SATURATED.name] == 0, got
    obs = observer_of(loader)
    assert obs is not None and obs.running and obs.gauges.windows >= 2 and obs.costs
    costs = sorted(obs.costs)
    print(f"TICK CPU best {costs[0] * 1e6:.0f} us median {costs[len(costs) // 2] * 1e6:.0f} us over {len(costs)} ticks")
    del loader
    deadline = time.monotonic() + 30
    while obs.running and time.monotonic() < deadline:  # stopped with its loader
        import gc

        gc.collect()
        time.sleep(0.1)
    assert not obs.running


def _slow_store_loader(tmp_path, store: LatencyStore, name: str, **kw) -> StreamingDataLoader:
    ds = StreamingDataset(
        f"s3://bench/{name}",
        cache_dir=str(tmp_path / "cache"),
        storage_options=store.storage_options(),
        max_cache_size=1 << 20,
    )
    return StreamingDataLoader(ds, batch_size=8, num_workers=1, **kw)


@pytest.mark.parametrize("autotune", [False, True], ids=["observer", "tuner"])
def test_a_loop_waiting_on_a_slow_store_would_gain_and_w0_is_its_latency(tmp_path, endpoint, autotune):
    local = write_dataset(str(tmp_path / "ds"), 600, image_sample, chunk_size=10)
    name = f"slow-{'tuner' if autotune else 'observer'}"  # its own gauges' dataset label
    with LatencyStore({local: f"bench/{name}"}, [Profile(latency_ms=LATENCY * 1e3)]) as store:
        loader = _slow_store_loader(tmp_path, store, name, autotune=autotune)
        got = _run(loader, 0.002, endpoint, M.STORAGE_UNLOADED_LATENCY, 180)
    # the loop waits for chunks 100 ms away, a batch needs most of one: it would run several times faster
    assert got.get(M.MODEL_SPEEDUP.name, 0) > 1.5, got
    w0 = got[M.STORAGE_UNLOADED_LATENCY.name]
    assert LATENCY <= w0 < LATENCY * 1.6, got  # the store's latency, and what the client adds to it
    assert got[M.STORAGE_LATENCY.name] >= w0, got
    assert got[M.STORAGE_IN_FLIGHT.name] > 0 and got[M.STORAGE_DELIVERED.name] > 0, got
    assert got[M.STORAGE_SATURATION.name] > 0, got
    assert (observer_of(loader) is None) == autotune  # the tuner publishes them itself


def test_metrics_off_start_no_observer(tmp_path):
    ds = StreamingDataset(write_dataset(str(tmp_path / "ds"), 40, image_sample, chunk_size=10))
    loader = StreamingDataLoader(ds, batch_size=4, num_workers=0)
    assert sum(1 for _ in loader) == 10
    assert observer_of(loader) is None
    assert not any(t.name == "streamscope-model" for t in threading.enumerate())


def test_no_observer_in_a_dataloader_worker(tmp_path, endpoint, monkeypatch):
    """The hook refuses where torch says this is a DataLoader worker (a loader iterated inside a worker's dataset):
    only a rank's main process publishes the model's gauges."""
    import torch.utils.data

    from streamscope.api import observe

    ds = StreamingDataset(write_dataset(str(tmp_path / "ds"), 40, image_sample, chunk_size=10))
    loader = StreamingDataLoader(ds, batch_size=4, num_workers=0)
    # a context of its own: monkeypatch.undo() would also undo the interop guard's PYTHONPATH (the same
    # monkeypatch), and clean_tracer's restore would then leave the LitData stub on every later test's path
    with monkeypatch.context() as m:
        m.setattr(torch.utils.data, "get_worker_info", lambda: object())
        assert observe.before_epoch(loader) is None and observer_of(loader) is None
    obs = observe.before_epoch(loader)  # the main process: started (metrics are on: the endpoint)
    assert obs is not None and obs.running and observer_of(loader) is obs
    obs.stop()
