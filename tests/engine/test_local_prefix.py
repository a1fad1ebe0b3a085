"""``local:/path`` is LitData's "a local folder read as remote storage": chunks are copied into ``cache_dir``
(traced as ``download`` spans), evicted under ``max_cache_size`` and released after use, as for ``s3://``."""

from __future__ import annotations

import hashlib
import os

import pytest

from streamscope._core.errors import IndexNotFoundError
from streamscope.api.tracing import enable_tracer, flush_tracer
from streamscope.cache.chunk_cache import dataset_cache_dir
from streamscope.engine.dataloader import StreamingDataLoader
from streamscope.engine.dataset import StreamingDataset
from tests.engine._data import write_dataset
from tests.support.litracer_parser import check_log
from tests.support.tracing import clean_tracer  # noqa: F401


def _tree(root: str) -> dict[str, str]:
    """Every file under ``root`` with the sha256 of its bytes (proves the source folder is left alone)."""
    out = {}
    for dirpath, _, names in os.walk(root):
        for n in names:
            p = os.path.join(dirpath, n)
            with open(p, "rb") as f:
                out[os.path.relpath(p, root)] = hashlib.sha256(f.read()).hexdigest()
    return out


def _cached_chunks(cache_root: str) -> dict[str, int]:
    """Size of every published chunk under ``cache_root``, by path relative to it."""
    out = {}
    for dirpath, _, names in os.walk(cache_root):
        for n in names:
            if n.startswith("chunk-") and n.endswith(".bin") and ".lease." not in n:
                p = os.path.join(dirpath, n)
                try:
                    out[os.path.relpath(p, cache_root)] = os.path.getsize(p)
                except FileNotFoundError:  # evicted by a worker between the listing and here: not cached any more
                    pass
    return out


@pytest.mark.usefixtures("clean_tracer")
@pytest.mark.parametrize("compression", [None, "zstd"])
def test_chunks_are_copied_into_the_cache_and_traced_as_downloads(tmp_path, compression):
    src = write_dataset(str(tmp_path / "src"), 30, chunk_size=10, compression=compression)
    before = _tree(src)
    cache = tmp_path / "cache"
    log = tmp_path / "t.log"
    enable_tracer("chunk", log_file=str(log))
    ds = StreamingDataset(f"local:{src}", cache_dir=str(cache))
    assert ds.remote and ds.input_dir == f"local:{src}"
    got = [s["index"] for s in ds]
    flush_tracer()
    assert got == list(range(30))
    assert sorted(map(os.path.basename, _cached_chunks(str(cache)))) == [f"chunk-0-{i}.bin" for i in range(3)]
    cdir = dataset_cache_dir(str(cache), f"local:{src}", ds.updated_at)
    assert os.path.isfile(os.path.join(cdir, "index.json"))  # the index is read through the store too
    assert _tree(src) == before  # the source folder is only read
    events = check_log(log.read_text())
    downloads = [e for e in events if e.get("name") == "download" and e["ph"] == "B" and "chunk" in e.get("args", {})]
    assert sorted(int(e["args"]["chunk"]) for e in downloads) == [0, 1, 2]
    assert all(str(e["args"]["url"]).startswith(f"local:{src}/chunk-0-") for e in downloads)


def test_relative_local_url_is_made_absolute(tmp_path, monkeypatch):
    write_dataset(str(tmp_path / "src"), 12, chunk_size=5)
    monkeypatch.chdir(tmp_path)
    ds = StreamingDataset("local:src", cache_dir=str(tmp_path / "cache"))
    assert ds.input_dir == f"local:{tmp_path / 'src'}"
    assert ds[11]["index"] == 11 and _cached_chunks(str(tmp_path / "cache"))


@pytest.mark.parametrize("workers", [0, 2])
def test_small_budget_evicts_and_an_epoch_reads_every_sample_once(tmp_path, workers):
    src = write_dataset(str(tmp_path / "src"), 80, chunk_size=10)
    chunk = os.path.getsize(os.path.join(src, "chunk-0-0.bin"))
    budget = 2 * chunk
    cache = str(tmp_path / "cache")
    ds = StreamingDataset(f"local:{src}", cache_dir=cache, shuffle=True, max_cache_size=budget, max_pre_download=1)
    peak = 0
    got = []
    for batch in StreamingDataLoader(ds, batch_size=5, num_workers=workers):
        got.extend(batch["index"].tolist())
        peak = max(peak, sum(_cached_chunks(cache).values()))
    assert sorted(got) == list(range(80))
    # what is leased (the chunk being read and the one prefetched, per worker) may sit above the budget
    assert peak <= budget + 2 * max(workers, 1) * chunk
    left = _cached_chunks(cache)
    assert sum(left.values()) <= budget and len(left) < 8  # released chunks went
    cdir = dataset_cache_dir(cache, f"local:{src}", ds.updated_at)
    assert not [f for f in os.listdir(cdir) if ".lease." in f]  # every lease released


def test_missing_index_names_the_local_url(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(IndexNotFoundError, match=f"local:{tmp_path / 'empty'}/index.json"):
        StreamingDataset(f"local:{tmp_path / 'empty'}", cache_dir=str(tmp_path / "c"))


def test_plain_path_is_still_read_in_place(tmp_path):
    src = write_dataset(str(tmp_path / "src"), 12, chunk_size=5)
    ds = StreamingDataset(src, cache_dir=str(tmp_path / "cache"))
    assert [s["index"] for s in ds] == list(range(12))
    assert not (tmp_path / "cache").exists()


def test_state_dict_names_the_url_as_litdata_does(tmp_path):
    src = write_dataset(str(tmp_path / "src"), 12, chunk_size=5)
    state = StreamingDataset(f"local:{src}", cache_dir=str(tmp_path / "c")).checkpoint_identity()
    assert state["input_dir_url"] == f"local:{src}" and state["input_dir_path"] is None


def test_get_by_key_reads_the_sidecar_through_the_store(tmp_path):
    pytest.importorskip("pyarrow")
    from streamscope.engine.key_lookup import build_keys_index

    src = write_dataset(str(tmp_path / "src"), 25, make=lambda i: {"id": f"k{i}", "index": i}, chunk_size=10)
    build_keys_index(src, lambda s: s["id"], verbose=False)
    ds = StreamingDataset(f"local:{src}", cache_dir=str(tmp_path / "c"))
    assert ds.get_by_key("k17")["index"] == 17
    assert [os.path.basename(p) for p in _cached_chunks(str(tmp_path / "c"))] == ["chunk-0-1.bin"]


def _sample(i):
    return {"index": i, "name": f"s{i}"}


def test_optimize_writes_a_local_url_into_the_folder(tmp_path, monkeypatch):
    """optimize/map upload into the folder of a ``local:`` output_dir (LitData refuses the scheme on write)."""
    from streamscope.processing.functions import optimize

    monkeypatch.chdir(tmp_path)
    optimize(
        fn=_sample,
        inputs=list(range(12)),
        output_dir=f"local:{tmp_path / 'out'}",
        chunk_size=5,
        num_workers=1,
        verbose=False,
    )
    assert sorted(os.listdir(tmp_path / "out")) == ["chunk-0-0.bin", "chunk-0-1.bin", "chunk-0-2.bin", "index.json"]
    assert not any(p.name.startswith("local") for p in tmp_path.iterdir())
    ds = StreamingDataset(f"local:{tmp_path / 'out'}", cache_dir=str(tmp_path / "cache"))
    assert [s["index"] for s in ds] == list(range(12)) and len(_cached_chunks(str(tmp_path / "cache"))) == 3


def test_combined_members_read_through_the_cache(tmp_path):
    from streamscope.engine.combined import CombinedStreamingDataset

    a = write_dataset(str(tmp_path / "a"), 10, chunk_size=5)
    b = write_dataset(str(tmp_path / "b"), 10, chunk_size=5, make=lambda i: {"index": 100 + i, "name": "b"})
    cache = str(tmp_path / "cache")
    members = [StreamingDataset(f"local:{d}", cache_dir=cache) for d in (a, b)]
    got = [s["index"] for s in CombinedStreamingDataset(members, iterate_over_all=True, batching_method="per_stream")]
    assert sorted(got) == [*range(10), *range(100, 110)]
    assert len(_cached_chunks(cache)) == 4  # two chunks of each member, copied
