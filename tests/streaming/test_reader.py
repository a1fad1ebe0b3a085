"""``streaming.reader.BinaryReader`` over the engine's chunk cache: one download per chunk for every process
reading a cache_dir, leases that keep a chunk in use from any reader's eviction, no litter left behind."""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import pickle
import shutil
from typing import Any

import pytest

from streamscope.cache.leases import LEASE_MARK
from streamscope.streaming.reader import BinaryReader, ChunkedIndex
from tests.engine._data import write_dataset

N, PER_CHUNK = 40, 10  # four chunks


def _indexes(reader: BinaryReader) -> list[ChunkedIndex]:
    return [
        ChunkedIndex(g, c, is_last_index=g == iv.chunk_end - 1 and c == len(reader.get_chunk_intervals()) - 1)
        for c, iv in enumerate(reader.get_chunk_intervals())
        for g in range(iv.chunk_start, iv.chunk_end)
    ]


def _read_all(reader: BinaryReader) -> list[int]:
    return [reader.read(i)["index"] for i in _indexes(reader)]


@pytest.fixture
def data(tmp_path: Any) -> str:
    return write_dataset(str(tmp_path / "data"), N, chunk_size=PER_CHUNK)


def _reader_process(cache: str, url: str, options: dict[str, Any], barrier: Any, out: Any) -> None:
    reader = BinaryReader(cache, remote_input_dir=url, storage_options=options)
    barrier.wait(30)
    out.put(_read_all(reader))


def test_two_processes_on_one_remote_cache_dir_fetch_each_chunk_once(
    data: str, tmp_path: Any, fault_proxy: Any
) -> None:
    client = fault_proxy.s3.boto3_client()
    for name in os.listdir(data):
        client.upload_file(os.path.join(data, name), fault_proxy.s3.bucket, f"ds/{name}")
    fault_proxy.fixed_delay_s = 0.3  # a slow link: both processes find each chunk missing before it arrives
    url, options = fault_proxy.s3.url("ds"), fault_proxy.s3.storage_options()
    gets: dict[str, int] = {}
    for run, procs in (("one", 1), ("two", 2)):
        cache = tmp_path / run
        cache.mkdir()
        shutil.copy(os.path.join(data, "index.json"), cache)  # only chunk downloads are counted
        before = fault_proxy.counts["requests_GET"]
        ctx = mp.get_context("fork")
        barrier, out = ctx.Barrier(procs), ctx.SimpleQueue()
        ps = [ctx.Process(target=_reader_process, args=(str(cache), url, options, barrier, out)) for _ in range(procs)]
        for p in ps:
            p.start()
        for p in ps:
            p.join(60)
        assert [p.exitcode for p in ps] == [0] * procs
        assert [out.get() for _ in ps] == [list(range(N))] * procs
        gets[run] = fault_proxy.counts["requests_GET"] - before
        assert sorted(os.listdir(cache)) == [f"chunk-0-{i}.bin" for i in range(4)] + ["index.json"]
    assert gets["one"] >= 4 and gets["two"] == gets["one"]  # the second process waited for the first's downloads


def _read_everything(cache: str, url: str) -> None:
    reader = BinaryReader(cache, remote_input_dir=url, max_cache_size=1)
    assert _read_all(reader) == list(range(N))


@pytest.mark.parametrize("where", ["this process", "another process"])
def test_a_chunk_a_reader_holds_is_not_evicted_by_another_readers_budget(data: str, tmp_path: Any, where: str) -> None:
    cache = str(tmp_path / "cache")
    os.mkdir(cache)
    holder = BinaryReader(cache, remote_input_dir="local:" + data)
    assert holder.read(ChunkedIndex(3, 0))["index"] == 3  # chunk 0 open: leased
    if where == "this process":
        _read_everything(cache, "local:" + data)
    else:
        p = mp.get_context("fork").Process(target=_read_everything, args=(cache, "local:" + data))
        p.start()
        p.join(60)
        assert p.exitcode == 0
    assert sorted(n for n in os.listdir(cache) if LEASE_MARK not in n) == ["chunk-0-0.bin", "index.json"]
    assert holder.read(ChunkedIndex(4, 0))["index"] == 4
    holder.close()
    # released: the next reader's budget evicts it
    _read_everything(cache, "local:" + data)
    assert os.listdir(cache) == ["index.json"]


def test_a_read_leaves_no_lease_or_lock_behind(data: str, tmp_path: Any) -> None:
    cache = str(tmp_path / "cache")
    os.mkdir(cache)
    reader = BinaryReader(cache, remote_input_dir="local:" + data)
    reader.read(ChunkedIndex(0, 0))
    assert [n for n in os.listdir(cache) if LEASE_MARK in n] == [f"chunk-0-0.bin{LEASE_MARK}{os.getpid()}"]
    copy = pickle.loads(pickle.dumps(reader))  # a copy holds no lease: closing it keeps the original's
    assert copy.read(ChunkedIndex(15, 1))["index"] == 15
    copy.close()
    assert [n for n in os.listdir(cache) if LEASE_MARK in n] == [f"chunk-0-0.bin{LEASE_MARK}{os.getpid()}"]
    assert _read_all(reader) == list(range(N))  # the last index closes the reader
    assert sorted(os.listdir(cache)) == [f"chunk-0-{i}.bin" for i in range(4)] + ["index.json"]


def test_a_missing_remote_chunk_is_a_file_not_found_error_naming_it(data: str, tmp_path: Any) -> None:
    os.remove(os.path.join(data, "chunk-0-2.bin"))
    cache = str(tmp_path / "cache")
    os.mkdir(cache)
    reader = BinaryReader(cache, remote_input_dir="local:" + data)
    with pytest.raises(FileNotFoundError, match="chunk-0-2.bin"):
        reader.read(ChunkedIndex(20, 2))
    assert [n for n in os.listdir(cache) if LEASE_MARK in n] == []  # the failed fetch dropped its lease
    assert reader.read(ChunkedIndex(35, 3))["index"] == 35


def test_a_missing_local_chunk_is_a_file_not_found_error_naming_it(data: str) -> None:
    os.remove(os.path.join(data, "chunk-0-1.bin"))
    reader = BinaryReader(data)
    with pytest.raises(FileNotFoundError, match=r"chunk-0-1\.bin.*chunk 1 of index.json"):
        reader.read(ChunkedIndex(10, 1))
    os.chmod(data, 0o555)  # a local dataset is read in place: nothing is written beside it
    try:
        assert reader.read(ChunkedIndex(5, 0))["index"] == 5
    finally:
        os.chmod(data, 0o755)


def test_eviction_keeps_the_most_recently_read_chunks_within_the_budget(data: str, tmp_path: Any) -> None:
    """A behaviour of the cache (LitData's reader deletes the chunk it closes once over the limit, and so kept the
    first chunks read): the least recently released chunks go first, room is made before a download."""
    with open(os.path.join(data, "index.json")) as f:
        sizes = [int(c["chunk_bytes"]) for c in json.load(f)["chunks"]]
    cache = str(tmp_path / "cache")
    os.mkdir(cache)
    reader = BinaryReader(cache, remote_input_dir="local:" + data, max_cache_size=sizes[2] + sizes[3])
    assert _read_all(reader) == list(range(N))
    assert sorted(os.listdir(cache)) == ["chunk-0-2.bin", "chunk-0-3.bin", "index.json"]
