"""What a DataLoader worker's trace must hold: a ``crash`` instant when its share fails, and the download spans
of a remote dataset when only the ``download`` category is selected."""

from __future__ import annotations

import os

import pytest

from streamscope.api.tracing import enable_tracer, flush_tracer
from streamscope.engine.dataloader import StreamingDataLoader
from streamscope.engine.dataset import StreamingDataset
from tests.engine._data import write_dataset
from tests.support.litracer_parser import check_log
from tests.support.tracing import clean_tracer  # noqa: F401

pytestmark = pytest.mark.usefixtures("clean_tracer")


@pytest.mark.parametrize("context", ["fork", pytest.param("spawn", marks=pytest.mark.slow)])
@pytest.mark.parametrize("level", ["batch", "chunk"])
def test_a_failing_worker_writes_a_crash_instant_under_its_pid(tmp_path, context, level):
    src = write_dataset(str(tmp_path / "src"), 40, chunk_size=10)
    os.remove(os.path.join(src, "chunk-0-2.bin"))  # listed in index.json, gone from the folder
    log = tmp_path / "t.log"
    enable_tracer(level, log_file=str(log))
    ds = StreamingDataset(src)
    loader = StreamingDataLoader(ds, batch_size=5, num_workers=2, multiprocessing_context=context)
    with pytest.raises(Exception, match="chunk-0-2.bin") as info:
        for _ in loader:
            pass
    main_pid = os.getpid()
    # the worker wrote its crash before torch handed its error to the loop: in the file before any flush here
    early = [e for e in check_log(log.read_text()) if e.get("name") == "crash"]
    assert early, "no crash event in the log"
    flush_tracer()
    events = check_log(log.read_text())
    crashes = [e for e in events if e.get("name") == "crash"]
    for e in crashes:
        assert e["ph"] == "I" and e.get("cat") == "crash"
        assert e["pid"] != main_pid  # under the worker that failed
        assert e["args"]["exception"] == "FileNotFoundError"
        assert "chunk-0-2.bin" in e["args"]["error"]
    assert str(crashes[0]["args"]["exception"]) in str(info.value)


def _upload(s3_server, src: str, prefix: str) -> str:
    client = s3_server.boto3_client()
    for name in os.listdir(src):
        client.upload_file(os.path.join(src, name), s3_server.bucket, f"{prefix}/{name}")
    return s3_server.url(prefix)


@pytest.mark.parametrize("workers, context", [(0, None), (2, "fork"), pytest.param(2, "spawn", marks=pytest.mark.slow)])
def test_download_only_selection_writes_the_download_spans(s3_server, tmp_path, workers, context):
    url = _upload(s3_server, write_dataset(str(tmp_path / "src"), 40, chunk_size=10), "ds")
    log = tmp_path / "t.log"
    enable_tracer(categories=["download"], log_file=str(log))
    ds = StreamingDataset(url, cache_dir=str(tmp_path / "cache"), storage_options=s3_server.storage_options())
    kw = {"multiprocessing_context": context} if context else {}
    got = [i for b in StreamingDataLoader(ds, batch_size=5, num_workers=workers, **kw) for i in b["index"].tolist()]
    assert sorted(got) == list(range(40))
    flush_tracer()
    events = check_log(log.read_text())
    assert events, "the log is empty"
    assert {e["cat"] for e in events} == {"download"}
    chunks = sorted(int(e["args"]["chunk"]) for e in events if e["name"] == "download" and e["ph"] == "B")
    assert chunks == [0, 1, 2, 3]
    if workers:
        assert all(e["pid"] != os.getpid() for e in events if e["name"] == "download")


@pytest.mark.parametrize("workers", [0, 2])
def test_download_only_selection_on_a_local_url_writes_the_download_spans(tmp_path, workers):
    """``local:/dir`` is read as remote storage: its index read and chunk copies are ``download`` spans."""
    src = write_dataset(str(tmp_path / "src"), 40, chunk_size=10)
    log = tmp_path / "t.log"
    enable_tracer(categories=["download"], log_file=str(log))
    ds = StreamingDataset(f"local:{src}", cache_dir=str(tmp_path / "cache"))
    got = [i for b in StreamingDataLoader(ds, batch_size=5, num_workers=workers) for i in b["index"].tolist()]
    assert sorted(got) == list(range(40))
    flush_tracer()
    events = check_log(log.read_text())
    assert events, "the log is empty"
    chunks = sorted(int(e["args"]["chunk"]) for e in events if e["name"] == "download" and e["ph"] == "B")
    assert chunks == [0, 1, 2, 3]
    assert any(e["name"] == "get" and str(e["args"]["url"]).endswith("/index.json") for e in events)


@pytest.mark.parametrize("context", ["fork", pytest.param("spawn", marks=pytest.mark.slow)])
def test_a_failing_worker_of_a_plain_torch_dataloader_writes_its_crash(tmp_path, context):
    from torch.utils.data import DataLoader

    src = write_dataset(str(tmp_path / "src"), 40, chunk_size=10)
    os.remove(os.path.join(src, "chunk-0-2.bin"))
    log = tmp_path / "t.log"
    enable_tracer("batch", log_file=str(log))
    loader = DataLoader(StreamingDataset(src), batch_size=5, num_workers=2, multiprocessing_context=context)
    with pytest.raises(Exception, match="chunk-0-2.bin"):
        for _ in loader:
            pass
    early = [e for e in check_log(log.read_text()) if e.get("name") == "crash"]
    assert early, "no crash event in the log"
    assert all(e["pid"] != os.getpid() and e["args"]["exception"] == "FileNotFoundError" for e in early)
