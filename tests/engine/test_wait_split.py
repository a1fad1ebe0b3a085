"""The live wait split on real DataLoader runs: the dominant stage is the one made slow.

Metrics only (no trace log), two forked workers: a slow transform makes the workers' decoding what the loop
waits for; a slow S3 (a proxy delaying every GET) makes it the downloads. The stages always sum to the wait.
"""

from __future__ import annotations

import os
import time

import pytest

from streamscope import events as ev
from streamscope.api.tracing import enable_metrics
from streamscope.engine.dataloader import StreamingDataLoader
from streamscope.engine.dataset import StreamingDataset
from streamscope.events.registry import STAGES, M
from tests.engine._data import image_sample, write_dataset
from tests.support.tracing import clean_tracer  # noqa: F401

pytestmark = pytest.mark.usefixtures("clean_tracer")


def _slow(sample):
    time.sleep(0.004)
    return sample


def _split(loader: StreamingDataLoader, log_dir) -> tuple[dict[str, float], float]:
    os.environ["STREAMSCOPE_METRICS_INTERVAL"] = "0.25"  # clean_tracer restores the environment
    os.environ["STREAMSCOPE_LOG_FILE"] = str(log_dir / "never.log")
    enable_metrics("chunk")
    n = sum(1 for _ in loader)
    assert n == len(loader)
    ev.flush()  # the loop's own waits and the parcels the workers sent are taken at a flush
    view = ev.metrics_view()
    split = {s: view.value(M.LOADER_WAIT_STAGE, stage=s) for s in STAGES}
    assert not (log_dir / "never.log").exists()  # metrics only
    return split, view.value(M.LOADER_WAIT)


def _dominant(split: dict[str, float]) -> str:
    return max(split, key=lambda s: split[s])


def test_a_slow_transform_makes_the_wait_decoding(tmp_path):
    d = write_dataset(str(tmp_path / "ds"), 160, image_sample, chunk_size=20)
    loader = StreamingDataLoader(StreamingDataset(d, transform=_slow), batch_size=8, num_workers=2)
    split, wait = _split(loader, tmp_path)
    assert wait > 0.1, split
    assert sum(split.values()) == pytest.approx(wait, rel=1e-6)
    # the workers' start (fork, first chunk open) is "idle" and can outlast the decoding on a busy 2-core machine
    # (CI: idle above decode's 0.49 s): the slow stage must lead the stages that worked
    working = {s: v for s, v in split.items() if s != "idle"}
    assert _dominant(working) == "decode" and split["decode"] > 0.5 * (wait - split["idle"]), split
    assert split["download"] == 0.0  # a local dataset downloads nothing


def test_the_split_counters_never_go_down_and_sum_to_the_wait_across_epochs(tmp_path):
    """Three epochs, workers forked anew each, one persistent-less loader; the metrics read after every batch
    (each read is the run as of its processes' last flush): no stage and no wait total ever goes down, and once
    everything is flushed the five stages, idle included, sum to the wait."""
    d = write_dataset(str(tmp_path / "ds"), 96, image_sample, chunk_size=12)
    loader = StreamingDataLoader(StreamingDataset(d, transform=_slow), batch_size=8, num_workers=2)
    os.environ["STREAMSCOPE_METRICS_INTERVAL"] = "0.05"
    os.environ["STREAMSCOPE_LOG_FILE"] = str(tmp_path / "never.log")
    enable_metrics("chunk")
    seen: list[list[float]] = []

    def read() -> None:
        view = ev.metrics_view()
        seen.append([view.value(M.LOADER_WAIT)] + [view.value(M.LOADER_WAIT_STAGE, stage=s) for s in STAGES])

    for _ in range(3):
        for _batch in loader:
            read()
        ev.flush()
        read()
    for a, b in zip(seen, seen[1:]):
        assert all(y >= x for x, y in zip(a, b)), (a, b)  # counters: never down, not even by a rounding bit
    wait, *stages = seen[-1]
    assert wait > 0.1 and sum(stages) == pytest.approx(wait, rel=1e-6), seen[-1]
    assert len({tuple(r) for r in seen}) > 6  # the reads saw the counters move during the epochs


@pytest.mark.slow
def test_a_slow_download_makes_the_wait_downloading(tmp_path, s3_server, fault_proxy):
    local = write_dataset(str(tmp_path / "ds"), 160, image_sample, chunk_size=10)
    client = s3_server.boto3_client()
    for name in os.listdir(local):
        client.upload_file(os.path.join(local, name), s3_server.bucket, f"ds/{name}")
    ep = fault_proxy.s3
    ds = StreamingDataset(ep.url("ds"), cache_dir=str(tmp_path / "cache"), storage_options=ep.storage_options())
    fault_proxy.delay_s = 0.25
    fault_proxy.configure(delay_rate=1.0, methods=("GET",))  # every chunk download takes a quarter second more
    loader = StreamingDataLoader(ds, batch_size=8, num_workers=2)
    split, wait = _split(loader, tmp_path)
    assert wait > 0.5, split
    assert sum(split.values()) == pytest.approx(wait, rel=1e-6)
    assert _dominant(split) == "download" and split["download"] > 0.5 * wait, split
    view = ev.metrics_view()
    assert view.value(M.LOADER_BATCHES) == 20 and view.value(M.LOADER_SAMPLES) == 160
    assert view.histogram(M.DOWNLOAD_DURATION).count == 16 and view.value(M.CACHE_MISSES) == 16


def test_the_dataset_attribute_is_short_and_never_holds_a_credential():
    from streamscope.recording.loader_observer import dataset_name as _dataset_name

    class _Ds:
        def __init__(self, url: str) -> None:
            self.input_dir = url

    assert _dataset_name(_Ds("s3://AKIA:s3cr3t@bucket")) == "bucket"
    assert _dataset_name(_Ds("s3://AKIA:s3cr3t@bucket/data/train/")) == "train"
    assert _dataset_name(_Ds("/data/imgs")) == "imgs"
    assert _dataset_name(object()) == "object"
