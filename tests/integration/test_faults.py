"""10% of S3 requests faulted (500/503, TCP resets, truncated bodies) while StreamingDataset reads through a
fault proxy: every sample arrives exactly once per epoch, byte for byte, with ``num_workers`` 0 and 2 under
fork and spawn, after the parent process touched S3 (index read, a random-access chunk download, a listing)."""

from __future__ import annotations

import os
from collections import Counter

import numpy as np
import pytest

from streamscope import StreamingDataLoader, StreamingDataset
from streamscope.api.tracing import enable_tracer, flush_tracer
from streamscope.storage import obstore_backend as ob
from streamscope.storage import open_store
from tests.integration import _fns
from tests.integration.conftest import N, write_dataset
from tests.support.litracer_parser import check_log
from tests.support.tracing import clean_tracer  # noqa: F401

pytestmark = pytest.mark.usefixtures("clean_tracer")

CASES = [
    pytest.param(0, None, "auto", id="w0"),
    pytest.param(2, "fork", "auto", id="w2-fork", marks=pytest.mark.slow),
    pytest.param(2, "spawn", "auto", id="w2-spawn", marks=pytest.mark.slow),
    pytest.param(2, "fork", "obstore", id="w2-fork-obstore-in-parent", marks=pytest.mark.slow),
]


def _check_epoch(loader: StreamingDataLoader, epoch: int) -> None:
    seen: Counter[int] = Counter()
    for batch in loader:
        for k, i in enumerate(batch["index"].tolist()):
            want = _fns.sample(i)
            assert batch["name"][k] == want["name"], f"epoch {epoch} sample {i}"
            np.testing.assert_array_equal(batch["image"][k].numpy(), want["image"])
            seen[i] += 1
    missing = sorted(set(range(N)) - set(seen))
    repeated = sorted(i for i, c in seen.items() if c != 1)
    assert not missing and not repeated, f"epoch {epoch}: missing {missing}, repeated {repeated}"


@pytest.mark.parametrize("workers, start_method, backend", CASES)
def test_exactly_once_per_epoch_under_faults(
    s3_server, fault_proxy, fast_retries, tmp_path, workers, start_method, backend
) -> None:
    write_dataset(s3_server, "faulty")  # written without faults
    log = tmp_path / "trace.log"
    enable_tracer(categories=["download", "crash"], log_file=str(log), flush_interval=0.2)
    ep = fault_proxy.s3
    opts = ep.storage_options(backend=backend)
    url = ep.url("faulty")
    fault_proxy.configure(seed=7, error_rate=0.04, reset_rate=0.03, truncate_rate=0.03)
    # the parent touches S3 before any worker starts: listing, index.json, and a whole chunk (random access)
    assert any(m.key == "index.json" for m in open_store(url, opts).list())
    ds = StreamingDataset(url, cache_dir=str(tmp_path / "cache"), storage_options=opts, shuffle=True, max_cache_size=1)
    assert ds[5]["name"] == _fns.sample(5)["name"]
    kw = {"multiprocessing_context": start_method} if start_method else {}
    loader = StreamingDataLoader(ds, batch_size=7, num_workers=workers, **kw)
    # obstore's runtime runs in this (pytest) process when asked for, or when an earlier test iterated an S3
    # dataset here with num_workers=0 (knob storage_s3_streaming_backend): forked workers cannot use it then
    parent_ran_obstore = backend == "obstore" or ob.runtime_pid() == os.getpid()
    epochs = 1 if start_method == "spawn" else 2  # spawn start-up is slow on a shared 2-core machine
    for epoch in range(epochs):  # max_cache_size=1: released chunks are evicted, so epoch 2 downloads again
        _check_epoch(loader, epoch)
    assert fault_proxy.faults() >= 3, fault_proxy.counts
    assert fault_proxy.counts["requests_GET"] >= epochs * 12, fault_proxy.counts  # 12 chunks per epoch at least
    flush_tracer()
    events = check_log(log.read_text())
    retried_in = {e["pid"] for e in events if e["name"] == "retry"}
    fallbacks = [e for e in events if e["name"] == "backend_fallback"]
    downloads_in = {e["pid"] for e in events if e["name"] == "download" and e["ph"] == "B"}
    if workers:
        assert len(downloads_in) >= 2, "the workers' download spans are missing from the trace"
    assert retried_in, "no retry event: the faults were not recovered by the storage layer"
    if parent_ran_obstore and start_method == "fork":
        # the parent ran obstore, so forked workers cannot: they switch to boto3, and the trace says so
        assert fallbacks and all(e["args"].get("backend") == "boto3" for e in fallbacks)
    else:
        assert not fallbacks  # no downgrade at all


@pytest.mark.parametrize("workers", [0, pytest.param(2, marks=pytest.mark.slow)])
def test_storage_down_mid_epoch_is_a_clear_error_not_a_hang(s3_server, fault_proxy, tmp_path, workers, monkeypatch):
    write_dataset(s3_server, "down")
    monkeypatch.setenv("STREAMSCOPE_STORAGE_RETRY_BASE_DELAY", "0.01")
    monkeypatch.setenv("STREAMSCOPE_STORAGE_MAX_ATTEMPTS", "3")
    ds = StreamingDataset(
        fault_proxy.s3.url("down"), cache_dir=str(tmp_path / "c"), storage_options=fault_proxy.s3.storage_options()
    )
    fault_proxy.configure(error_rate=1.0)  # every request now answers 500/503
    with pytest.raises(Exception) as info:
        for _ in StreamingDataLoader(ds, batch_size=8, num_workers=workers, timeout=60 if workers else 0):
            pass
    text = str(info.value)
    assert "chunk-" in text and "s3://" in text, text[-1500:]  # names the chunk and its URL
    assert "3 attempt" in text, text[-1500:]  # retried as configured, then gave up
    assert s3_server.secret_key not in text
