"""The tuner on a chunked dataset read from S3 (moto) behind the fault proxy adding latency to every GET: the wait is
on the chunk downloads, so the capacity model raises the downloads in flight (Little's law on the measured unloaded
latency) and the paired check keeps it; every sample arrives once per epoch in the untuned loader's order."""

from __future__ import annotations

import os
import time

import pytest

from streamscope.engine.dataloader import StreamingDataLoader
from streamscope.engine.dataset import StreamingDataset
from tests.engine._data import write_dataset
from tests.support.tracing import clean_tracer  # noqa: F401

pytestmark = pytest.mark.slow  # S3 through a delaying proxy, a few epochs of 750 batches: about a minute

STEP_S = 0.004


def _order(dl: StreamingDataLoader) -> list[int]:
    got = []
    for batch in dl:
        got.extend(batch["index"].tolist())
        time.sleep(STEP_S)  # the training step
    return got


@pytest.mark.filterwarnings("ignore:This DataLoader will create")
def test_a_latency_bound_s3_dataset_gets_more_downloads_in_flight(
    tmp_path,
    s3_server,
    fault_proxy,
    monkeypatch,
    clean_tracer,  # noqa: F811
):
    local = write_dataset(str(tmp_path / "ds"), 6000, chunk_size=10)
    client = s3_server.boto3_client()
    for name in os.listdir(local):
        client.upload_file(os.path.join(local, name), s3_server.bucket, f"ds/{name}")
    ep = fault_proxy.s3
    fault_proxy.delay_s = 0.1
    fault_proxy.configure(delay_rate=1.0, methods=("GET",))  # every chunk download takes 100 ms more (S3 far away)
    monkeypatch.setenv("STREAMSCOPE_METRICS_INTERVAL", "0.5")
    monkeypatch.setenv("STREAMSCOPE_AUTOTUNE_MAX_WORKERS", "2")

    def loader(cache: str, tune: bool) -> StreamingDataLoader:
        ds = StreamingDataset(
            ep.url("ds"),
            cache_dir=cache,
            storage_options=ep.storage_options(),
            shuffle=True,
            seed=3,
            max_cache_size="100KB",  # the cache evicts: every epoch downloads
        )
        return StreamingDataLoader(ds, batch_size=8, num_workers=2, autotune=tune)

    want = [_order(loader(str(tmp_path / "ref"), False)) for _ in range(1)]
    dl = loader(str(tmp_path / "c"), True)
    first = _order(dl)
    assert first == want[0] and sorted(first) == list(range(6000))
    for _ in range(15):
        got = _order(dl)
        assert sorted(got) == list(range(6000))
        if any(d.outcome == "kept" for d in dl.tuner.decisions):
            break
    kept = [d for d in dl.tuner.decisions if d.outcome == "kept"]
    assert kept, [(d.move.key, d.outcome, d.note) for d in dl.tuner.decisions]
    f = kept[0].fields()[0]
    assert f["knob"] in ("download_concurrency", "prefetch_depth") and f["new"] > f["old"]
    assert f["w0_ms"] >= 100 and f["check"] == "A-B-B-A windows" and f["gain_lo"] > 0
    dl.tuner.close()
