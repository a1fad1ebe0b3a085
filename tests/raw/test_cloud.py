"""StreamingRawDataset over ``gs://`` and ``azure://`` on real servers (the GCS emulator, Azurite): raw files
in a bucket, indexed and read through a DataLoader with two workers, every file once with its bytes."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from torch.utils.data import DataLoader

from streamscope.raw import INDEX_FILENAME, StreamingRawDataset
from streamscope.storage import open_store
from tests.raw.conftest import content, file_id


def identity(x: Any) -> Any:
    return x


@pytest.fixture(params=["gs", "azure"])
def cloud(request: pytest.FixtureRequest) -> Any:
    """An endpoint on the GCS emulator or Azurite (``url(prefix)``, ``storage_options()``, ``put(key, data)``)."""
    return request.getfixturevalue({"gs": "gcs_server", "azure": "azurite_server"}[request.param])


def test_raw_epoch_with_workers(cloud: Any, tmp_path: Path) -> None:
    n, size = 24, 700
    for i in range(n):
        cloud.put(f"raw/s{i % 3}/f{i:05d}.bin", content(i, size))  # uploaded by the server's own API
    url = cloud.url("raw")
    ds = StreamingRawDataset(url, cache_dir=str(tmp_path / "c"), storage_options=cloud.storage_options())
    assert len(ds) == n
    assert all(f.path.startswith(url + "/") for f in ds.files)
    assert open_store(url, cloud.storage_options()).exists(INDEX_FILENAME)  # the index is written next to the data
    _ = ds[0]  # the parent touched storage (its client exists) before the workers fork
    loader = DataLoader(ds, batch_size=4, num_workers=2, collate_fn=identity, multiprocessing_context="fork")
    seen: Counter[int] = Counter()
    for batch in loader:
        for data in batch:
            i = file_id(data)
            assert data == content(i, size)
            seen[i] += 1
    assert seen == Counter(range(n))
