"""Interop through object storage: what streamscope writes to s3:// the real LitData 0.2.68 streams back."""

from __future__ import annotations

import pytest

from streamscope.storage import open_store


def _sample(i: int) -> dict:
    return {"index": i, "text": f"sample-{i}", "blob": bytes([i % 256]) * (50 + i % 13)}


@pytest.mark.slow
@pytest.mark.interop
@pytest.mark.filterwarnings("ignore:A newer version of litdata:UserWarning")
def test_litdata_streams_what_streamscope_wrote_to_s3(s3_server, tmp_path, monkeypatch) -> None:
    litdata = pytest.importorskip("litdata")
    import litdata.streaming.downloader as ld_downloader

    import streamscope as ss

    # LitData 0.2.68 builds its obstore store without allow_http, so it cannot reach a plain-http endpoint;
    # its boto3 path can (this test is about the bytes and layout on S3, not LitData's client choice).
    monkeypatch.setattr(ld_downloader, "_OBSTORE_AVAILABLE", False)

    n = 60
    url = s3_server.url("interop/ds")
    ss.optimize(
        fn=_sample,
        inputs=list(range(n)),
        output_dir=url,
        chunk_bytes="2KB",
        num_workers=1,
        storage_options=s3_server.storage_options(),
    )
    assert open_store(url, s3_server.storage_options()).exists("index.json")
    ds = litdata.StreamingDataset(
        url,
        storage_options=s3_server.storage_options(),
        cache_dir=str(tmp_path / "litdata-cache"),
    )
    got = {}
    for item in ds:
        got[int(item["index"])] = item
    assert sorted(got) == list(range(n))
    for i, item in got.items():
        assert item["text"] == f"sample-{i}" and item["blob"] == _sample(i)["blob"]


@pytest.mark.heavy  # LitData's optimize() multiprocessing: ~1 min on this shared machine
@pytest.mark.interop
@pytest.mark.filterwarnings("ignore:A newer version of litdata:UserWarning")
def test_streamscope_streams_what_litdata_wrote_to_s3(s3_server, tmp_path, monkeypatch) -> None:
    litdata = pytest.importorskip("litdata")

    import streamscope as ss

    monkeypatch.chdir(tmp_path)  # LitData stages files under the working directory and tempdir
    n = 40
    url = s3_server.url("interop/from-litdata")
    litdata.optimize(
        fn=_sample,
        inputs=list(range(n)),
        output_dir=url,
        chunk_bytes="2KB",
        num_workers=1,
        storage_options=s3_server.storage_options(),
    )
    assert open_store(url, s3_server.storage_options()).exists("index.json")
    ds = ss.StreamingDataset(url, storage_options=s3_server.storage_options(), cache_dir=str(tmp_path / "c"))
    got = {int(item["index"]): item for item in ds}
    assert sorted(got) == list(range(n))
    assert all(got[i]["text"] == f"sample-{i}" and got[i]["blob"] == _sample(i)["blob"] for i in got)
