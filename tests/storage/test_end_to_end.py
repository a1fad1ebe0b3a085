"""End to end over the real (moto) S3 server: optimize() writes to s3://, StreamingDataset streams it back
through DataLoader workers while the fault proxy breaks 10% of requests; every sample arrives exactly once
per epoch. (Issue #5, items 2 and 6.)"""

from __future__ import annotations

import os
from collections import Counter

import pytest

from streamscope.storage import open_store


def _sample(i: int) -> dict:
    return {"index": i, "payload": bytes([i % 251]) * (300 + i % 7)}


@pytest.mark.slow
def test_optimize_to_s3_then_stream_under_faults(s3_server, fault_proxy, tmp_path) -> None:
    import streamscope as ss

    n = 200
    url = s3_server.url("datasets/e2e")
    ss.optimize(
        fn=_sample,
        inputs=list(range(n)),
        output_dir=url,
        chunk_bytes="8KB",
        num_workers=1,
        storage_options=s3_server.storage_options(),
    )
    keys = [m.key for m in open_store(url, s3_server.storage_options()).list()]
    assert "index.json" in keys and sum(k.endswith(".bin") for k in keys) > 3

    os.environ["STREAMSCOPE_STORAGE_RETRY_BASE_DELAY"] = "0.01"
    os.environ["STREAMSCOPE_STORAGE_MAX_ATTEMPTS"] = "8"
    try:
        fault_proxy.configure(seed=7, error_rate=0.04, reset_rate=0.03, truncate_rate=0.03)
        ds = ss.StreamingDataset(
            fault_proxy.s3.url("datasets/e2e"),
            storage_options=fault_proxy.s3.storage_options(),
            cache_dir=str(tmp_path / "cache"),
            shuffle=True,
        )
        loader = ss.StreamingDataLoader(ds, batch_size=8, num_workers=2)
        for epoch in range(2):
            seen: Counter[int] = Counter()
            for batch in loader:
                for i, payload in zip(batch["index"].tolist(), batch["payload"]):
                    seen[int(i)] += 1
                    assert payload == _sample(int(i))["payload"]
            assert seen == Counter(range(n)), f"epoch {epoch}: missing {set(range(n)) - set(seen)}"
    finally:
        del os.environ["STREAMSCOPE_STORAGE_RETRY_BASE_DELAY"]
        del os.environ["STREAMSCOPE_STORAGE_MAX_ATTEMPTS"]
    injected = fault_proxy.counts["error"] + fault_proxy.counts["reset"] + fault_proxy.counts["truncate"]
    assert injected > 0, fault_proxy.counts
