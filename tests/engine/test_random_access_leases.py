"""``ds[i]`` leases the chunk it reads from the cache (another process's eviction must not delete it under the
read); a dataset that is dropped gives its leases back, so its chunks become evictable again (before, the lease file
and the process's count stayed until the process exited, and the chunks it named could never be evicted)."""

from __future__ import annotations

import os
from typing import Any

from streamscope import StreamingDataset
from streamscope.cache.leases import LEASE_MARK, process_leases
from tests.engine._data import write_dataset


def _sample(i: int) -> dict[str, Any]:
    return {"index": i, "payload": bytes([i % 251]) * 400}


def _my_leases(cache_dir: str) -> list[str]:
    mark = f"{LEASE_MARK}{os.getpid()}"
    return [f for _root, _dirs, files in os.walk(cache_dir) for f in files if f.endswith(mark)]


def _held(cache_dir: str) -> list[str]:
    return [p for p in process_leases().held() if p.startswith(cache_dir)]


def test_a_dropped_dataset_gives_its_random_access_leases_back(tmp_path: Any) -> None:
    src, cache_dir = str(tmp_path / "src"), str(tmp_path / "cache")
    write_dataset(src, 100, make=_sample, chunk_size=20)
    ds = StreamingDataset(f"local:{src}", cache_dir=cache_dir)
    assert [ds[i]["index"] for i in (0, 25, 99)] == [0, 25, 99]
    assert len(_my_leases(cache_dir)) == 3 and len(_held(cache_dir)) == 3  # chunks 0, 1 and 4, in use
    del ds  # no collection needed: the dataset holds no reference cycle, so it goes at once
    assert _my_leases(cache_dir) == [] and _held(cache_dir) == []
    # their chunks are evictable again: a dataset with a budget of one chunk over the same cache keeps to it
    ds2 = StreamingDataset(f"local:{src}", cache_dir=cache_dir, max_cache_size="9KB")
    assert sorted(s["index"] for s in ds2) == list(range(100))
    chunks = [f for _r, _d, fs in os.walk(cache_dir) for f in fs if f.startswith("chunk-") and f.endswith(".bin")]
    assert len(chunks) <= 1 + 2 + 1, chunks  # the budget, plus the chunk being read and max_pre_download ahead


def test_a_reset_dataset_gives_them_back_too(tmp_path: Any) -> None:
    src, cache_dir = str(tmp_path / "src"), str(tmp_path / "cache")
    write_dataset(src, 40, make=_sample, chunk_size=20)
    ds = StreamingDataset(f"local:{src}", cache_dir=cache_dir)
    assert ds[30]["index"] == 30 and len(_held(cache_dir)) == 1
    ds.reset()
    assert _my_leases(cache_dir) == [] and _held(cache_dir) == []
