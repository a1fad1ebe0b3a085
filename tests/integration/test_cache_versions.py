"""The local cache is keyed by dataset URL and the index's ``updated_at``: re-optimizing a dataset at the same URL
(same chunk names, same sizes, new content) must never serve the old version's cached chunks."""

from __future__ import annotations

import json
import os

from streamscope import StreamingDataset
from streamscope.storage import open_store
from tests.integration import _fns
from tests.integration.conftest import N, write_dataset


def _names(ds: StreamingDataset) -> list[str]:
    return sorted(s["name"] for s in ds)


def test_reoptimized_url_is_not_served_from_the_stale_cache(s3_server, tmp_path) -> None:
    opts = s3_server.storage_options()
    cache = str(tmp_path / "cache")
    url = write_dataset(s3_server, "versioned")
    v1 = StreamingDataset(url, cache_dir=cache, storage_options=opts)
    assert _names(v1) == sorted(_fns.sample(i)["name"] for i in range(N))
    v1_chunks = [c["filename"] for c in v1.chunks]
    cached_before = {os.path.join(r, f) for r, _, fs in os.walk(cache) for f in fs if f.startswith("chunk-")}
    assert len(cached_before) == len(v1_chunks)  # epoch 1 left every chunk in the cache (100GB budget)

    write_dataset(s3_server, "versioned", fn=_fns.sample_v2, mode="overwrite")
    index = json.loads(open_store(url, opts).get("index.json"))
    assert [c["filename"] for c in index["chunks"]] == v1_chunks  # same names: only the version tells them apart
    assert index["updated_at"] != v1.updated_at

    v2 = StreamingDataset(url, cache_dir=cache, storage_options=opts)
    assert _names(v2) == sorted(_fns.sample_v2(i)["name"] for i in range(N))
    assert v2[3]["name"] == _fns.sample_v2(3)["name"]
    # a different URL with the same bytes gets its own cache directory too
    other = write_dataset(s3_server, "versioned-copy", fn=_fns.sample_v2)
    v3 = StreamingDataset(other, cache_dir=cache, storage_options=opts)
    assert _names(v3) == _names(v2)
    dirs = {os.path.dirname(p) for p in cached_before}
    after = {r for r, _, fs in os.walk(cache) if any(f.startswith("chunk-") for f in fs)}
    assert len(after) == 3 and dirs < after
