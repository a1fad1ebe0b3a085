"""Level "sample" through the real read path: every sample of the epoch appears exactly once in the log."""

from __future__ import annotations

import collections

import pytest

from streamscope import StreamingDataLoader, StreamingDataset
from streamscope.api.tracing import enable_tracer, flush_tracer
from tests.engine._data import image_sample, write_dataset
from tests.support.litracer_parser import check_log, unmatched
from tests.support.tracing import clean_tracer  # noqa: F401

pytestmark = pytest.mark.usefixtures("clean_tracer")

N = 90


@pytest.fixture(scope="module")
def img_dir(tmp_path_factory):
    return write_dataset(str(tmp_path_factory.mktemp("img")), N, image_sample, chunk_size=16)


class _Doubling(StreamingDataset):
    def __getitem__(self, index):
        sample = super().__getitem__(index)
        sample["label"] = sample["label"] * 2
        return sample


def _epoch(ds, log, workers):
    enable_tracer("sample", log_file=str(log), flush_interval=0.05)
    labels = []
    for b in StreamingDataLoader(ds, batch_size=8, num_workers=workers):
        labels += b["label"].tolist() if hasattr(b["label"], "tolist") else list(b["label"])
    flush_tracer(wait_workers=30)  # workers exit (and write their last events) in the background
    evs = check_log(log.read_text())  # every line complete and parseable
    return labels, evs


def _samples(evs):
    return [e for e in evs if e["name"] == "sample" and e["cat"] == "sample"]


def _positions(ds):
    return collections.Counter((c, i) for c, size in enumerate(ds.chunk_sizes) for i in range(size))


@pytest.mark.parametrize("workers", [0, 2])
def test_batch_path_records_each_sample_once_with_the_batch_interval(img_dir, tmp_path, workers):
    ds = StreamingDataset(img_dir, shuffle=True, seed=3)
    labels, evs = _epoch(ds, tmp_path / "t.log", workers)
    assert sorted(labels) == list(range(N))
    samples = _samples(evs)
    got = collections.Counter((int(e["args"]["chunk"]), int(e["args"]["item"])) for e in samples)
    assert got == _positions(ds)  # every sample exactly once
    assert {e["ph"] for e in samples} == {"X"} and all(e.get("dur", 0) >= 0 for e in samples)
    # decoded together: the events say so, and a batch's events fit inside its decode_batch span
    by_batch = collections.defaultdict(list)
    for e in samples:
        by_batch[(e["pid"], int(e["args"]["batch"]))].append(e)
    assert all(int(e["args"]["batched"]) == len(v) for v in by_batch.values() for e in v)
    spans = {}
    for e in evs:
        if e["name"] == "decode_batch":  # one complete event per batch (a bulk-recorded series)
            assert e["ph"] == "X" and (e["pid"], int(e["args"]["batch"])) not in spans
            spans[(e["pid"], int(e["args"]["batch"]))] = (e["ts"], e["ts"] + e["dur"])
    for key, v in by_batch.items():
        begin, end = spans[key]
        assert begin - 1 <= min(e["ts"] for e in v) and max(e["ts"] + e.get("dur", 0) for e in v) <= end + 1
    assert not unmatched(evs)
    if workers:
        assert {e["args"]["worker_rank"] for e in samples} == {"0", "1"}


@pytest.mark.parametrize("kind", ["transform", "getitem"])
def test_per_sample_path_records_measured_spans(img_dir, tmp_path, kind):
    if kind == "transform":
        ds = StreamingDataset(img_dir, transform=lambda s: {**s, "label": s["label"] * 2})
    else:
        ds = _Doubling(img_dir)
    labels, evs = _epoch(ds, tmp_path / "t.log", 0)
    assert sorted(labels) == [2 * i for i in range(N)]
    samples = _samples(evs)
    got = collections.Counter((int(e["args"]["chunk"]), int(e["args"]["item"])) for e in samples)
    assert got == _positions(ds)
    assert not any("batched" in e["args"] for e in samples)  # each one timed on its own
    assert all(e.get("dur", 0) > 0 for e in samples)
