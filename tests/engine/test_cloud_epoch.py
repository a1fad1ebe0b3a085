"""One streaming epoch over ``gs://`` and ``azure://`` on real servers (the GCS emulator, Azurite).

For each: a dataset optimized locally and uploaded, and one that ``optimize`` writes straight to the bucket,
are streamed by a StreamingDataLoader with two workers; every sample arrives exactly once, with its bytes.
"""

from __future__ import annotations

import os
from collections import Counter
from typing import Any

import pytest

import streamscope as ss
from streamscope.storage import open_store


def _sample(i: int) -> dict[str, Any]:
    return {"index": i, "payload": bytes([i % 251]) * (200 + i % 13)}


@pytest.fixture(params=["gs", "azure"])
def cloud(request: pytest.FixtureRequest) -> Any:
    """An endpoint on the GCS emulator or Azurite (``url(prefix)``, ``storage_options()``)."""
    return request.getfixturevalue({"gs": "gcs_server", "azure": "azurite_server"}[request.param])


def _epoch(url: str, options: dict[str, Any], cache_dir: str, n: int) -> None:
    ds = ss.StreamingDataset(url, storage_options=options, cache_dir=cache_dir, shuffle=True)
    assert len(ds) == n
    loader = ss.StreamingDataLoader(ds, batch_size=8, num_workers=2)
    seen: Counter[int] = Counter()
    for batch in loader:
        for i, payload in zip(batch["index"].tolist(), batch["payload"]):
            seen[int(i)] += 1
            assert payload == _sample(int(i))["payload"]
    assert seen == Counter(range(n)), f"missing {sorted(set(range(n)) - set(seen))}"
    assert any(name.endswith(".bin") for _root, _dirs, files in os.walk(cache_dir) for name in files)


def test_epoch_over_uploaded_dataset(cloud: Any, tmp_path) -> None:
    n = 120
    local = tmp_path / "optimized"
    ss.optimize(fn=_sample, inputs=list(range(n)), output_dir=str(local), chunk_bytes="4KB", num_workers=1)
    url = cloud.url("datasets/uploaded")
    store = open_store(url, cloud.storage_options())
    names = sorted(os.listdir(local))
    assert "index.json" in names and sum(name.endswith(".bin") for name in names) > 3
    for name in names:
        store.upload_file(str(local / name), name)
    _epoch(url, cloud.storage_options(), str(tmp_path / "cache"), n)


def test_optimize_writes_to_the_bucket(cloud: Any, tmp_path) -> None:
    n = 60
    url = cloud.url("datasets/direct")
    ss.optimize(
        fn=_sample,
        inputs=list(range(n)),
        output_dir=url,
        chunk_bytes="4KB",
        num_workers=2,
        storage_options=cloud.storage_options(),
    )
    keys = [m.key for m in open_store(url, cloud.storage_options()).list()]
    assert "index.json" in keys and sum(k.endswith(".bin") for k in keys) > 2
    _epoch(url, cloud.storage_options(), str(tmp_path / "cache"), n)
