"""A dropped dataset or loader frees its mapped chunks at once: no reference cycle leaves them to the garbage
collector (whose pass would then unmap them at a random moment of a later epoch, stalling it)."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from streamscope.engine.dataloader import StreamingDataLoader
from streamscope.engine.dataset import StreamingDataset
from tests.engine._data import image_sample, write_dataset


@pytest.fixture
def no_gc() -> Iterator[None]:
    was = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


@pytest.mark.parametrize("compression", [None, "zstd"])
@pytest.mark.parametrize("how", ["loader", "iter", "getitem"])
def test_a_dropped_dataset_is_freed_without_a_collection(tmp_path, no_gc, compression, how):
    d = write_dataset(str(tmp_path / "ds"), 60, image_sample, chunk_size=10, compression=compression)
    ds = StreamingDataset(d, cache_dir=str(tmp_path / "cache"))
    if how == "loader":
        loader = StreamingDataLoader(ds, batch_size=8)
        assert sum(len(b["label"]) for b in loader) == 60
        del loader
    elif how == "iter":
        assert [s["label"] for s in ds] == list(range(60))
    else:
        assert ds[5]["label"] == 5 and ds[33]["label"] == 33
    reader = ds.chunk_reader()
    chunks = [weakref.ref(oc.file) for oc in reader._open.values()]
    refs = [weakref.ref(ds), weakref.ref(reader)]
    del ds, reader
    assert [r() for r in refs] == [None, None]
    assert all(c() is None for c in chunks)


@pytest.mark.parametrize("kind", ["combined", "parallel"])
def test_a_dropped_combination_is_freed_without_a_collection(tmp_path, no_gc, kind):
    from streamscope.engine.combined import CombinedStreamingDataset
    from streamscope.engine.parallel import ParallelStreamingDataset

    members = [
        StreamingDataset(write_dataset(str(tmp_path / f"ds{k}"), 30, image_sample, chunk_size=10)) for k in range(2)
    ]
    if kind == "combined":
        combo = CombinedStreamingDataset(members, seed=1)
    else:
        combo = ParallelStreamingDataset(members)
    loader = StreamingDataLoader(combo, batch_size=4)
    assert sum(1 for _ in loader) > 0
    refs = [weakref.ref(x) for x in (combo, loader, *members)]
    del combo, loader, members
    assert [r() for r in refs] == [None] * 4
