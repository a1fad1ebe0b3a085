"""StreamingRawDataset on a real S3 server (moto over http), directly and through the fault proxy."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from torch.utils.data import DataLoader

from streamscope._core import config
from streamscope.raw import INDEX_FILENAME, FileMetadata, StreamingRawDataset
from tests.raw.conftest import content, file_id
from tests.support.tracing import clean_tracer  # noqa: F401

pytest.importorskip("tests.support.s3server", reason="the storage fixtures are not on this branch yet")
pytest.importorskip("tests.support.faultproxy", reason="the storage fixtures are not on this branch yet")


def identity(x: Any) -> Any:
    return x


class PairDataset(StreamingRawDataset):
    def setup(self, files: list[FileMetadata]) -> list[list[FileMetadata]]:
        return [files[i : i + 2] for i in range(0, len(files) - 1, 2)]


def upload(endpoint: Any, n: int, size: int = 200, prefix: str = "ds") -> str:
    client = endpoint.boto3_client()
    for i in range(n):
        client.put_object(Bucket=endpoint.bucket, Key=f"{prefix}/s{i % 2}/f{i:05d}.bin", Body=content(i, size))
    return endpoint.url(prefix)


def test_index_next_to_data_reuse_and_recompute(s3_server, tmp_path: Path):
    url = upload(s3_server, 10)
    opts = s3_server.storage_options()
    ds = StreamingRawDataset(url, cache_dir=str(tmp_path / "c1"), storage_options=opts)
    assert len(ds) == 10
    assert [f.path for f in ds.files] == sorted(f.path for f in ds.files)
    assert ds.files[0].path.startswith(url + "/")
    client = s3_server.boto3_client()
    assert client.head_object(Bucket=s3_server.bucket, Key=f"ds/{INDEX_FILENAME}")["ContentLength"] > 0
    client.put_object(Bucket=s3_server.bucket, Key="ds/zz.bin", Body=b"late")
    fresh = StreamingRawDataset(url, cache_dir=str(tmp_path / "c2"), storage_options=opts)
    assert len(fresh) == 10  # the index next to the data was used, not a new listing
    assert (
        len(StreamingRawDataset(url, cache_dir=str(tmp_path / "c2"), storage_options=opts, recompute_index=True)) == 11
    )
    assert sorted(file_id(ds[i]) for i in range(10)) == list(range(10))


def test_grouping_transform_ranges_and_cache(s3_server, tmp_path: Path):
    url = upload(s3_server, 8, size=5000)
    opts = s3_server.storage_options()
    pairs = PairDataset(
        url,
        cache_dir=str(tmp_path / "c"),
        storage_options=opts,
        transform=lambda parts: [file_id(p) for p in parts],
        range_parallel_threshold=4000,
        range_chunk_size=1500,
    )
    got = sorted(tuple(x) for x in pairs.__getitems__(list(range(len(pairs)))))
    assert len(got) == 4 and sorted(i for pair in got for i in pair) == list(range(8))
    paths = StreamingRawDataset(
        url, cache_dir=str(tmp_path / "c"), storage_options=opts, cache_files=True, item_type="path"
    )
    p = paths[3]
    assert p.startswith(paths.cache_dir) and file_id(Path(p).read_bytes()) == int(Path(p).stem[1:])


@pytest.mark.parametrize("workers", [0, pytest.param(2, marks=pytest.mark.slow)])
def test_every_file_once_under_faults(fault_proxy, tmp_path: Path, workers: int):
    url = upload(fault_proxy.s3, 60, size=3000)
    config.set_value("storage_retry_base_delay", 0.01)
    config.set_value("storage_max_attempts", 8)
    ds = StreamingRawDataset(url, cache_dir=str(tmp_path / "c"), storage_options=fault_proxy.s3.storage_options())
    _ = ds[0]  # the parent touched storage (its client exists) before the workers fork
    fault_proxy.configure(error_rate=0.04, reset_rate=0.03, truncate_rate=0.03, methods=("GET",))
    loader = DataLoader(
        ds, batch_size=8, num_workers=workers, collate_fn=identity, multiprocessing_context="fork" if workers else None
    )
    seen = Counter()
    for batch in loader:
        for data in batch:
            i = file_id(data)
            assert data == content(i, 3000)
            seen[i] += 1
    assert seen == Counter(range(60))
    assert fault_proxy.faults() > 0


def test_hedge_against_slow_requests(fault_proxy, tmp_path: Path):
    url = upload(fault_proxy.s3, 16, size=1000)
    ds = StreamingRawDataset(
        url,
        cache_dir=str(tmp_path / "c"),
        storage_options=fault_proxy.s3.storage_options(),
        hedge_delay=0.1,
        max_prefetch=0,
    )
    fault_proxy.delay_s = 1.5
    fault_proxy.configure(delay_rate=0.3, methods=("GET",))
    got = ds.__getitems__(list(range(16)))
    assert sorted(file_id(b) for b in got) == list(range(16))
    stats = ds.stats()
    assert stats["hedges_fired"] >= 1 and stats["hedges_won"] >= 1


@pytest.mark.slow
def test_latency_is_hidden_behind_a_slow_link(fault_proxy, tmp_path: Path):
    """With 100 ms added to every request, a batch's GETs and the next batch's look-ahead are in flight together."""
    url = upload(fault_proxy.s3, 48, size=500)
    ds = StreamingRawDataset(
        url, cache_dir=str(tmp_path / "c"), storage_options=fault_proxy.s3.storage_options(), max_prefetch=16
    )
    fault_proxy.fixed_delay_s = 0.1

    def ids(lo: int, hi: int) -> list[int]:
        return [int(Path(ds.items[i].path).stem[1:]) for i in range(lo, hi)]  # type: ignore[union-attr]

    got = ds.__getitems__(list(range(16)))
    assert [file_id(b) for b in got] == ids(0, 16)
    assert fault_proxy.peak_in_flight >= 8  # not one GET after another
    before = ds.prefetch_hits
    got = ds.__getitems__(list(range(16, 32)))  # the look-ahead of the first batch
    assert [file_id(b) for b in got] == ids(16, 32)
    assert ds.prefetch_hits - before == 16


def test_spawn_workers_on_s3(s3_server, tmp_path: Path):
    url = upload(s3_server, 24, size=500)
    ds = StreamingRawDataset(url, cache_dir=str(tmp_path / "c"), storage_options=s3_server.storage_options())
    _ = ds[0]
    loader = DataLoader(ds, batch_size=4, num_workers=2, collate_fn=identity, multiprocessing_context="spawn")
    assert sorted(file_id(b) for batch in loader for b in batch) == list(range(24))


_MAIN_PROCESS_SCRIPT = """
import json, sys
from collections import Counter
from torch.utils.data import DataLoader
from streamscope._core import config
from streamscope.raw import StreamingRawDataset
from tests.raw.conftest import file_id

url, cache, opts = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
config.set_value("raw_main_obstore_after", 3)
ds = StreamingRawDataset(url, cache_dir=cache, storage_options=opts)
peek = [file_id(ds[0]), file_id(ds[1])]
assert not ds.source.prefer_obstore, "a peek must not switch the main process to obstore"
main_ids = [file_id(b) for b in DataLoader(ds, batch_size=4, collate_fn=lambda x: x) for b in b]
forked = DataLoader(ds, batch_size=4, num_workers=2, collate_fn=lambda x: x, multiprocessing_context="fork")
fork_ids = [file_id(b) for batch in forked for b in batch]
print(json.dumps({"main": sorted(main_ids), "fork": sorted(fork_ids), "prefer": ds.source.prefer_obstore,
                  "backend": getattr(ds.source.data_store(), "backend_name", None)}))
"""


@pytest.mark.slow
def test_main_process_switches_to_obstore_and_forks_still_work(s3_server, tmp_path: Path):
    """A num_workers=0 loop moves main-process reads to obstore; workers forked afterwards still read every file."""
    import json
    import os
    import subprocess
    import sys

    pytest.importorskip("obstore")
    url = upload(s3_server, 20, size=300)
    out = subprocess.run(
        [sys.executable, "-c", _MAIN_PROCESS_SCRIPT, url, str(tmp_path / "c"), json.dumps(s3_server.storage_options())],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ),
    )
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["main"] == got["fork"] == list(range(20))
    assert got["prefer"] is True and got["backend"] == "obstore"


def test_test_server_keeps_connections_and_moto_semantics(s3_server):
    """The rig the raw benchmark runs on: keep-alive, SigV4 still checked, metadata names as moto keeps them."""
    import http.client
    from urllib.parse import urlsplit

    import botocore.exceptions

    client = s3_server.boto3_client()
    client.put_object(Bucket=s3_server.bucket, Key="m/obj", Body=b"x" * 1000, Metadata={"my_key": "u", "plain": "p"})
    meta = client.head_object(Bucket=s3_server.bucket, Key="m/obj")["Metadata"]
    assert meta == {"my_key": "u", "plain": "p"}
    bad = s3_server.boto3_client()
    bad._request_signer._credentials.secret_key = "wrong"  # noqa: SLF001 - a wrong key must be refused
    with pytest.raises(botocore.exceptions.ClientError, match="SignatureDoesNotMatch"):
        bad.get_object(Bucket=s3_server.bucket, Key="m/obj")
    # two anonymous requests on one TCP connection: the server keeps it open (both are refused: no signature)
    parts = urlsplit(s3_server.endpoint_url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
    try:
        for _ in range(2):
            conn.request("GET", f"/{s3_server.bucket}/m/obj")
            resp = conn.getresponse()
            resp.read()
            assert resp.status == 403
            assert resp.getheader("Connection", "").lower() != "close"
            assert conn.sock is not None
    finally:
        conn.close()


@pytest.mark.usefixtures("clean_tracer")
@pytest.mark.parametrize("workers", [0, 2])
def test_raw_gets_are_downloads_in_the_metrics(s3_server, tmp_path: Path, workers: int):
    """Every raw-file GET is a download: counted, timed and sized in ``streamscope.download.*`` as chunk downloads
    are (the tuner's model reads its W0 and in-flight there), read as a user reads them: ``metrics_view()``."""
    import os

    from streamscope import events as ev
    from streamscope.api.tracing import enable_metrics
    from streamscope.engine.dataloader import StreamingDataLoader
    from streamscope.events.registry import M

    os.environ["STREAMSCOPE_METRICS_INTERVAL"] = "0.2"  # clean_tracer restores the environment
    n, size = 24, 300
    url = upload(s3_server, n, size=size, prefix=f"dl{workers}")
    enable_metrics("chunk")
    ds = StreamingRawDataset(url, cache_dir=str(tmp_path / "c"), storage_options=s3_server.storage_options())
    loader = StreamingDataLoader(ds, batch_size=4, num_workers=workers, collate_fn=identity)
    assert sorted(file_id(f) for batch in loader for f in batch) == list(range(n))
    del loader
    ev.flush()
    view = ev.metrics_view()
    h = view.histogram(M.DOWNLOAD_DURATION)
    assert h.count == n and view.value(M.DOWNLOAD_BYTES) == n * size
    assert h.sum > 0
