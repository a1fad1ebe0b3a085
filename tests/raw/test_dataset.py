from __future__ import annotations

import os
import threading
from collections import Counter
from pathlib import Path

import pytest
import torch
from torch.utils.data import DataLoader

from streamscope import events as ev
from streamscope._core import config
from streamscope._core.errors import ConfigError, RawFileSizeError, RawSetupError, RawSourceNotFoundError
from streamscope.raw import FileMetadata, StreamingRawDataset
from tests.raw.conftest import content, file_id, make_folder


class PairDataset(StreamingRawDataset):
    """Groups files two by two (like image + mask)."""

    def setup(self, files: list[FileMetadata]) -> list[list[FileMetadata]]:
        return [files[i : i + 2] for i in range(0, len(files) - 1, 2)]


class EvenDataset(StreamingRawDataset):
    def setup(self, files: list[FileMetadata]) -> list[FileMetadata]:
        return [f for i, f in enumerate(files) if i % 2 == 0]


class BadSetup(StreamingRawDataset):
    def setup(self, files):  # type: ignore[override]
        return [[files[0]], "not a file"]


def ids(batch) -> list[int]:
    return [file_id(b) for b in batch]


def identity(x):
    return x


def test_items_are_file_bytes(folder: Path, cache_root: str):
    ds = StreamingRawDataset(str(folder), cache_dir=cache_root)
    assert len(ds) == 40
    assert ds[3] == content(3, 64)
    assert ds[-1] == content(39, 64)
    assert ids(ds.__getitems__([5, 1, 5, 30])) == [5, 1, 5, 30]
    with pytest.raises(IndexError, match="40"):
        ds[40]


def test_grouping_filtering_and_transform(folder: Path, cache_root: str):
    pairs = PairDataset(str(folder), cache_dir=cache_root, transform=lambda parts: tuple(map(file_id, parts)))
    assert len(pairs) == 20
    assert pairs[7] == (14, 15)
    assert pairs.__getitems__([0, 19]) == [(0, 1), (38, 39)]
    even = EvenDataset(str(folder), cache_dir=cache_root, transform=file_id)
    assert [even[i] for i in range(len(even))] == list(range(0, 40, 2))
    raw_pairs = PairDataset(str(folder), cache_dir=cache_root)
    assert raw_pairs[2] == [content(4, 64), content(5, 64)]


def test_setup_wrong_shape(folder: Path, cache_root: str):
    with pytest.raises(RawSetupError, match=r"BadSetup.setup.*item 1"):
        BadSetup(str(folder), cache_dir=cache_root)

    class NotAList(StreamingRawDataset):
        def setup(self, files):  # type: ignore[override]
            return tuple(files)

    with pytest.raises(RawSetupError, match="must return a list"):
        NotAList(str(folder), cache_dir=cache_root)


def test_item_type_path(folder: Path, cache_root: str):
    with pytest.raises(ConfigError, match="cache_files"):
        StreamingRawDataset(str(folder), cache_dir=cache_root, item_type="path")
    with pytest.raises(ConfigError, match="item_type"):
        StreamingRawDataset(str(folder), cache_dir=cache_root, item_type="json")  # type: ignore[arg-type]
    ds = StreamingRawDataset(str(folder), cache_dir=cache_root, item_type="path", cache_files=True)
    p = ds[9]
    assert os.path.isfile(p) and Path(p).read_bytes() == content(9, 64)
    assert os.path.dirname(p) == str(folder.resolve())  # a local source is read in place, not copied


def test_file_disappears_after_indexing(folder: Path, cache_root: str):
    ds = StreamingRawDataset(str(folder), cache_dir=cache_root, max_prefetch=0)
    victim = ds.files[12].path
    os.remove(victim)
    with pytest.raises(RawSourceNotFoundError, match="f00012.bin"):
        ds[12]
    assert ds[13] == content(13, 64)


def test_file_smaller_than_indexed(folder: Path, cache_root: str):
    ds = StreamingRawDataset(str(folder), cache_dir=cache_root, max_prefetch=0)
    Path(ds.files[4].path).write_bytes(b"short")
    with pytest.raises(RawFileSizeError, match="f00004.bin"):
        ds.__getitems__([3, 4])
    path_ds = StreamingRawDataset(str(folder), cache_dir=cache_root, item_type="path", cache_files=True)
    with pytest.raises(RawFileSizeError, match="f00004.bin"):
        path_ds[4]


def test_prefetch_hits_sequential_batches(folder: Path, cache_root: str):
    ds = StreamingRawDataset(str(folder), cache_dir=cache_root, max_prefetch=8)
    ev.ACTIVE.add("prefetch")
    try:
        for s in range(0, 40, 8):
            assert ids(ds.__getitems__(list(range(s, s + 8)))) == list(range(s, s + 8))
        events = ev.drain()
    finally:
        ev.ACTIVE.discard("prefetch")
    assert ds.prefetch_hits == 32 and ds.prefetch_misses == 8
    hit_events = [e for e in events if e[1] == "prefetch" and e[0] == "I"]
    assert sum(e[6]["hits"] for e in hit_events) == 32


def test_live_knobs_drive_concurrency_and_prefetch(folder: Path, cache_root: str):
    ds = StreamingRawDataset(str(folder), cache_dir=cache_root, max_concurrent_downloads=3)
    assert ds.concurrency() == 3
    config.set_value("raw_concurrency", 7)
    config.set_value("raw_prefetch", 0)
    assert ds.concurrency() == 7
    ds.__getitems__([0, 1])
    from streamscope.raw.runtime import runtime

    assert runtime().limit == 7
    ds.__getitems__([2, 3])
    ds.__getitems__([4, 5])
    assert ds.prefetch_hits == 0
    assert StreamingRawDataset(str(folder), cache_dir=cache_root).concurrency() == 7
    config.reset("raw_concurrency")
    assert StreamingRawDataset(str(folder), cache_dir=cache_root).concurrency() == 128  # adaptive, tiny files


def test_download_spans_traced(folder: Path, cache_root: str):
    ds = StreamingRawDataset(str(folder), cache_dir=cache_root, max_prefetch=0)
    ev.ACTIVE.add("download")
    try:
        ds.__getitems__([0, 1, 2])
        events = ev.drain()
    finally:
        ev.ACTIVE.discard("download")
    begins = [e for e in events if e[1] == "download" and e[0] == "B"]
    assert sorted(os.path.basename(e[6]["path"]) for e in begins) == ["f00000.bin", "f00001.bin", "f00002.bin"]
    assert all(e[6]["attempt"] == 1 and e[6]["bytes"] == 64 for e in begins)


def test_threads_bounded_by_concurrency(tmp_path: Path, cache_root: str):
    data = make_folder(tmp_path, 64)
    active = [0, 0]
    lock = threading.Lock()

    def slow(b: bytes) -> int:
        with lock:
            active[0] += 1
            active[1] = max(active[1], active[0])
        threading.Event().wait(0.01)
        with lock:
            active[0] -= 1
        return file_id(b)

    ds = StreamingRawDataset(
        str(data), cache_dir=cache_root, transform=slow, max_concurrent_downloads=4, max_prefetch=0
    )
    assert ds.__getitems__(list(range(32))) == list(range(32))
    assert 1 < active[1] <= 4


@pytest.mark.parametrize(
    ("workers", "ctx"),
    [(0, None), (2, "fork"), pytest.param(2, "spawn", marks=pytest.mark.slow)],
)
def test_dataloader_every_file_exactly_once(tmp_path: Path, cache_root: str, workers: int, ctx: str | None):
    data = make_folder(tmp_path, 101, size=300, nested=True)
    ds = StreamingRawDataset(str(data), cache_dir=cache_root, max_prefetch=8)
    _ = ds[0]  # the parent touches storage (and starts its I/O threads) before workers fork
    loader = DataLoader(
        ds,
        batch_size=8,
        num_workers=workers,
        multiprocessing_context=ctx,
        collate_fn=identity,
        persistent_workers=ctx == "spawn",  # spawn once for both epochs (import cost)
    )
    for _epoch in range(2):
        seen = Counter(file_id(b) for batch in loader for b in batch)
        assert seen == Counter(range(101))


def test_dataloader_shuffled_with_transform(tmp_path: Path, cache_root: str):
    data = make_folder(tmp_path, 50)
    ds = StreamingRawDataset(str(data), cache_dir=cache_root, transform=file_id)
    loader = DataLoader(ds, batch_size=7, shuffle=True, num_workers=2, multiprocessing_context="fork")
    got = torch.cat(list(loader)).tolist()
    assert sorted(got) == list(range(50)) and got != list(range(50))


def test_input_dir_as_dir_or_pathlike(folder: Path, cache_root: str):
    from streamscope import Dir

    assert len(StreamingRawDataset(Dir(path=str(folder)), cache_dir=cache_root)) == 40
    assert StreamingRawDataset(folder, cache_dir=cache_root)[0] == content(0, 64)


@pytest.mark.parametrize("workers", [0, 2])
def test_inline_local_reads(tmp_path: Path, cache_root: str, workers: int):
    """Fast local files are read in the calling thread; a slow average switches to the pooled path."""
    config.reset("raw_local_inline_s")
    data = make_folder(tmp_path, 30)
    ds = PairDataset(str(data), cache_dir=cache_root, transform=lambda parts: [file_id(p) for p in parts])
    assert ds.fetcher.inline_ok()
    loader = DataLoader(
        ds, batch_size=4, num_workers=workers, collate_fn=identity, multiprocessing_context="fork" if workers else None
    )
    assert [pair for batch in loader for pair in batch] == [[i, i + 1] for i in range(0, 30, 2)]
    if workers == 0:
        from streamscope.raw.runtime import runtime

        before = runtime().started
        ds.__getitems__([0, 1])
        assert runtime().started == before  # no pool task for inline reads
        ds.fetcher.local_read_s = 1.0  # as if the folder were a slow network mount
        assert not ds.fetcher.inline_ok()
        assert ds.__getitems__([2, 3]) == [[4, 5], [6, 7]]
        assert runtime().started > before
