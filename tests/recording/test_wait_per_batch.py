"""The wait histogram (``streamscope.loader.wait.duration``) holds one wait per batch the loop was handed.

Issue 31: its count was the number of waits in the loader's ``next()``, so the batches that came in a group with
the one before them (zero wait) were not in it, and "wait per batch p50/p99" described only the batches that
waited. Read here as a user reads it: ``streamscope.events.metrics_view()`` and a scrape of the Prometheus
endpoint, on real DataLoader runs in this process and with two forked workers (three epochs, with a short
training step, so the flusher takes the loop's events in pieces and workers start between epochs).
"""

from __future__ import annotations

import os
import time
import urllib.request

import pytest

from streamscope import events as ev
from streamscope import recording
from streamscope.engine.dataloader import StreamingDataLoader
from streamscope.engine.dataset import StreamingDataset
from streamscope.events.registry import M, prometheus_name
from streamscope.telemetry import prometheus as prom
from tests.engine._data import image_sample, write_dataset
from tests.support.tracing import clean_tracer  # noqa: F401

pytest.importorskip("prometheus_client")
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

pytestmark = pytest.mark.usefixtures("clean_tracer")

N, BATCH, EPOCHS = 240, 4, 3


def _scrape(port: int) -> dict[str, float]:
    """The wait histogram's samples in one scrape: ``_count``, ``_sum`` and the ``+Inf`` bucket."""
    name = prometheus_name(M.LOADER_WAIT_DURATION)
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        text = r.read().decode()
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name == f"{name}_count":
                out["count"] = s.value
            elif s.name == f"{name}_sum":
                out["sum"] = s.value
            elif s.name == f"{name}_bucket" and s.labels.get("le") == "+Inf":
                out["inf"] = s.value
            elif s.name == prometheus_name(M.LOADER_BATCHES):
                out["batches"] = out.get("batches", 0.0) + s.value
    return out


@pytest.mark.parametrize("workers", [0, 2])
def test_the_wait_histogram_counts_every_batch_handed_to_the_loop(tmp_path, workers):
    os.environ["STREAMSCOPE_METRICS_INTERVAL"] = "0.2"  # clean_tracer restores the environment
    data = write_dataset(str(tmp_path / "images"), N, image_sample, chunk_size=20)
    port = prom.start_endpoint(0)  # switches metrics on (the chunk level), as a training script's endpoint does
    assert port
    try:
        loader = StreamingDataLoader(StreamingDataset(data), batch_size=BATCH, num_workers=workers)
        delivered = 0
        for _ in range(EPOCHS):
            for batch in loader:
                delivered += 1
                assert len(batch["label"]) == BATCH
                time.sleep(0.002)  # a training step: the flusher's ticks take the loop's events mid-epoch
        assert delivered == EPOCHS * N // BATCH
        ev.flush()  # the loop's last batch events are taken at a flush (the flusher's tick would do it too)
        view = ev.metrics_view()
        h = view.histogram(M.LOADER_WAIT_DURATION)
        assert view.value(M.LOADER_BATCHES) == delivered
        assert h.count == delivered and sum(h.counts) == delivered
        # the waits in next() are not one per batch, which is why the histogram no longer counts them
        stalls = recording.RECORDER.read().spans["stall/stall"].count
        if workers:
            # the case of the issue: the workers send groups of batches, one wait each; the batches that were
            # ready are in the histogram as zero waits (its lowest bucket)
            assert stalls < delivered, stalls
            assert h.counts[0] >= delivered - stalls
        else:
            assert stalls == delivered + EPOCHS  # one wait per batch, and the one that found each epoch's end
        # its sum is the wait for the batches: the loop's whole wait in next() but for the waits that found the
        # end of an epoch (in-process; with workers the loop stops when the last batch is in); never the time
        # between epochs (the workers' start, the loop's own code)
        wait = view.value(M.LOADER_WAIT)
        if workers:
            assert h.sum == pytest.approx(wait, abs=1e-6)
        else:
            assert 0 < h.sum < wait
        # the Prometheus endpoint serves the same numbers (the flusher's tick may come between: read until equal)
        deadline = time.monotonic() + 10
        while True:
            got = _scrape(port)
            settled = all(got.get(k) == delivered for k in ("count", "inf", "batches"))
            if (settled and got.get("sum") == pytest.approx(h.sum, rel=1e-9)) or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert got["count"] == delivered and got["inf"] == delivered and got["batches"] == delivered, got
        assert got["sum"] == pytest.approx(h.sum, rel=1e-9), got
    finally:
        prom.stop_endpoint()
