"""optimize() → S3 → StreamingDataset / StreamingDataLoader, and walk() on S3, against a real moto server."""

from __future__ import annotations

import json

import numpy as np
import pytest

from streamscope import StreamingDataLoader, StreamingDataset
from streamscope.storage import open_store, walk
from tests.integration import _fns
from tests.integration.conftest import CHUNK, N, write_dataset


def _expected(i: int, fn=_fns.sample) -> dict:
    return fn(i)


def test_stream_from_s3_every_sample_exact(s3_server, tmp_path) -> None:
    url = write_dataset(s3_server, "ds")
    ds = StreamingDataset(url, cache_dir=str(tmp_path / "cache"), storage_options=s3_server.storage_options())
    assert len(ds) == N
    seen = []
    for s in ds:
        want = _expected(int(s["index"]))
        assert s["name"] == want["name"]
        np.testing.assert_array_equal(np.asarray(s["image"]), want["image"])
        seen.append(int(s["index"]))
    assert sorted(seen) == list(range(N))
    # random access too (after iteration, from the cache or the store)
    assert ds[N - 1]["name"] == _expected(N - 1)["name"]


@pytest.mark.slow
@pytest.mark.parametrize("workers", [0, 2])
def test_dataloader_from_s3_batches(s3_server, tmp_path, workers) -> None:
    url = write_dataset(s3_server, f"dl{workers}")
    ds = StreamingDataset(
        url, cache_dir=str(tmp_path / "cache"), storage_options=s3_server.storage_options(), shuffle=True
    )
    loader = StreamingDataLoader(ds, batch_size=10, num_workers=workers)
    for epoch in range(2):
        got = []
        for batch in loader:
            idx = batch["index"].tolist()
            for k, i in enumerate(idx):
                assert batch["name"][k] == _expected(i)["name"]
                np.testing.assert_array_equal(batch["image"][k].numpy(), _expected(i)["image"])
            got += idx
        assert sorted(got) == list(range(N)), f"epoch {epoch}"


def test_walk_lists_the_optimized_dataset(s3_server) -> None:
    url = write_dataset(s3_server, "walked/ds", n=24)
    opts = s3_server.storage_options()
    index = json.loads(open_store(url, opts).get("index.json"))
    want = sorted(["index.json", *(c["filename"] for c in index["chunks"])])
    assert len(index["chunks"]) == 24 // CHUNK
    got = list(walk(url, opts))
    assert [m.key for m in got] == want
    assert all(m.size > 0 for m in got)
    # from the bucket root the same objects appear under their prefix
    root = [m.key for m in walk(s3_server.url(), opts)]
    assert root == [f"walked/ds/{k}" for k in want]


def test_map_writes_to_s3_and_walk_lists_it(s3_server) -> None:
    from streamscope import map as ss_map

    url, opts = s3_server.url("mapped"), s3_server.storage_options()
    ss_map(_fns.write_files, list(range(10)), url, num_workers=2, storage_options=opts)
    store = open_store(url, opts)
    got = {m.key: m.size for m in walk(url, opts)}
    want = {f"part-{i:03d}.txt": len(f"item {i}\n") * (i + 1) for i in range(10)}
    want.update({f"even/{i:03d}.bin": 100 for i in range(0, 10, 2)})
    assert got == want
    assert store.get("part-003.txt") == b"item 3\n" * 4
    assert store.get("even/004.bin") == bytes([4]) * 100


def test_missing_index_on_s3_names_the_url(s3_server, tmp_path) -> None:
    from streamscope._core.errors import IndexNotFoundError

    url = s3_server.url("nothing-here")
    with pytest.raises(IndexNotFoundError, match="nothing-here/index.json"):
        StreamingDataset(url, cache_dir=str(tmp_path / "c"), storage_options=s3_server.storage_options())


@pytest.mark.slow
def test_resume_mid_epoch_from_s3_exactly_once(s3_server, tmp_path) -> None:
    url = write_dataset(s3_server, "resume")
    opts = s3_server.storage_options()

    def loader(cache: str, workers: int) -> StreamingDataLoader:
        ds = StreamingDataset(url, cache_dir=str(tmp_path / cache), storage_options=opts, shuffle=True)
        return StreamingDataLoader(ds, batch_size=5, num_workers=workers)

    first = loader("a", 2)
    seen: list[int] = []
    for k, batch in enumerate(first):
        seen += batch["index"].tolist()
        if k == 6:
            state = first.state_dict()
            break
    second = loader("b", 0)  # a fresh cache and another worker count
    second.load_state_dict(state)
    for batch in second:
        seen += batch["index"].tolist()
    assert sorted(seen) == list(range(N))


@pytest.mark.slow
def test_https_endpoint_with_private_ca_end_to_end(s3_https_server, tmp_path) -> None:
    """TLS with a private CA (``verify=<ca file>``): optimize writes, forked workers (obstore) and the main
    process (boto3) read."""
    url = write_dataset(s3_https_server, "tls", n=40)
    ds = StreamingDataset(url, cache_dir=str(tmp_path / "c"), storage_options=s3_https_server.storage_options())
    got = sorted(i for b in StreamingDataLoader(ds, batch_size=6, num_workers=2) for i in b["index"].tolist())
    assert got == list(range(40))
    assert ds[39]["name"] == _expected(39)["name"]
