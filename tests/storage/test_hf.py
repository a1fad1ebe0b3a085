"""``hf://datasets/...`` against the Hugging Face Hub emulator (``tests/support/hf_hub.py``): Parquet datasets
streamed by StreamingDataset, raw files by StreamingRawDataset, index_parquet_dataset, HF_TOKEN, errors."""

from __future__ import annotations

import io
import json
import logging
import os
import pickle
import subprocess
import sys
import textwrap
import time
import uuid
from typing import Any

import pytest

from streamscope import events as ev
from streamscope._core import config
from streamscope._core.errors import (
    ConfigError,
    IndexNotFoundError,
    ObjectNotFoundError,
    StorageAuthError,
    TransientStorageError,
    UnsupportedURLError,
)
from streamscope.storage import open_store, parse_url
from tests.support.hf_hub import HFHub

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")
pytest.importorskip("huggingface_hub")

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _parquet(ids: list[int]) -> bytes:
    buf = io.BytesIO()
    pq.write_table(pa.table({"id": ids, "text": [f"row {i}" for i in ids]}), buf)
    return buf.getvalue()


def _repo(hub: HFHub, token: str | None = None, files: int = 3, rows: int = 10, folder: str = "data") -> str:
    """A fresh dataset repo: ``files`` Parquet files of ``rows`` rows under ``folder``, plus a README."""
    repo = f"tests/{uuid.uuid4().hex[:10]}"
    hub.create_repo(repo, token=token)
    for i in range(files):
        hub.put(repo, f"{folder}/train-{i:05d}.parquet", _parquet(list(range(i * rows, (i + 1) * rows))))
    hub.put(repo, "README.md", b"# a dataset card, not data\n")
    return repo


@pytest.fixture
def quick_retries() -> Any:
    config.set_value("storage_max_attempts", 3)
    config.set_value("storage_retry_base_delay", 0.01)
    try:
        yield
    finally:
        config.reset("storage_max_attempts")
        config.reset("storage_retry_base_delay")


# -- URLs ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "bucket", "prefix"),
    [
        ("hf://datasets/o/r", "o/r", ""),
        ("hf://datasets/o/r/data/x/", "o/r", "data/x"),
        ("hf://datasets/o/r@v1.0/data", "o/r@v1.0", "data"),
        ("hf://datasets/o/r@refs/convert/parquet/default/train", "o/r@refs/convert/parquet", "default/train"),
        ("hf://datasets/o/r@refs%2Fconvert%2Fparquet/default", "o/r@refs/convert/parquet", "default"),
        ("hf://datasets/o/r@refs/pr/3", "o/r@refs/pr/3", ""),
    ],
)
def test_urls(url: str, bucket: str, prefix: str) -> None:
    p = parse_url(url)
    assert (p.kind, p.bucket, p.prefix) == ("hf", bucket, prefix)


@pytest.mark.parametrize(
    ("url", "needle"),
    [
        ("hf://models/o/r", "only Hugging Face dataset repositories"),
        ("hf://datasets/o", "repository name"),
        ("hf://datasets/o/r@", "empty revision"),
        ("hf://datasets/o/r@refs/heads", "refs/"),
        ("hf://datasets/o/r/a/../b", "'..'"),
        ("hf:datasets/o/r", "malformed"),
    ],
)
def test_bad_urls(url: str, needle: str) -> None:
    with pytest.raises(UnsupportedURLError) as info:
        parse_url(url)
    assert needle in str(info.value)


def test_options_are_checked(hf_hub: HFHub) -> None:
    with pytest.raises(ConfigError, match="unknown storage_options.*aws_access_key_id"):
        open_store("hf://datasets/o/r", {"aws_access_key_id": "x"})
    with pytest.raises(ConfigError, match="token"):
        open_store("hf://datasets/o/r", {"token": 123})


# -- StreamingDataset ---------------------------------------------------------------------------------------


def test_streaming_dataset_reads_every_row(hf_hub: HFHub, tmp_path) -> None:
    """The repo root holds no .parquet file: every one below it is indexed (as LitData), rows in file order."""
    from streamscope import StreamingDataset

    repo = _repo(hf_hub)
    ds = StreamingDataset(f"hf://datasets/{repo}", cache_dir=str(tmp_path))
    assert len(ds) == 30
    assert [c["filename"] for c in ds.chunks] == [f"data/train-{i:05d}.parquet" for i in range(3)]
    assert [ds[i]["id"] for i in range(30)] == list(range(30))
    assert ds[17] == {"id": 17, "text": "row 17"}
    assert type(ds.item_loader).__name__ == "ParquetLoader"


def test_dataloader_two_workers_shuffled(hf_hub: HFHub, tmp_path) -> None:
    from streamscope import StreamingDataLoader, StreamingDataset

    repo = _repo(hf_hub, files=4, rows=7)
    ds = StreamingDataset(f"hf://datasets/{repo}/data", cache_dir=str(tmp_path), shuffle=True, seed=3)
    got: list[int] = []
    for batch in StreamingDataLoader(ds, batch_size=5, num_workers=2):
        got.extend(batch["id"].tolist())
    assert sorted(got) == list(range(28)) and got != list(range(28))


def test_parquet_pattern_and_single_file(hf_hub: HFHub, tmp_path) -> None:
    from streamscope import StreamingDataset

    repo = _repo(hf_hub)
    one = StreamingDataset(f"hf://datasets/{repo}/data/train-00001.parquet", cache_dir=str(tmp_path))
    assert [one[i]["id"] for i in range(len(one))] == list(range(10, 20))
    two = StreamingDataset(f"hf://datasets/{repo}/data/train-0000[02].parquet", cache_dir=str(tmp_path))
    assert sorted(two[i]["id"] for i in range(len(two))) == list(range(10)) + list(range(20, 30))


def test_index_is_built_once_and_reused(hf_hub: HFHub, tmp_path) -> None:
    from streamscope import StreamingDataset
    from streamscope.engine.hf_index import hf_index_dir

    repo = _repo(hf_hub)
    url = f"hf://datasets/{repo}/data"
    StreamingDataset(url, cache_dir=str(tmp_path))
    assert os.path.isfile(os.path.join(hf_index_dir(url, str(tmp_path)), "index.json"))
    listed = len(hf_hub.requests_for(f"/api/datasets/{repo}/tree/"))
    ds = StreamingDataset(url, cache_dir=str(tmp_path))
    assert len(ds) == 30
    assert len(hf_hub.requests_for(f"/api/datasets/{repo}/tree/")) == listed  # no second listing


def test_index_parquet_dataset_then_stream(hf_hub: HFHub, tmp_path) -> None:
    """LitData's two-step form: index_parquet_dataset(url, cache_dir), then StreamingDataset(url, cache_dir=...);
    only each file's footer is fetched to index (ranged GETs, never a whole file)."""
    from streamscope import StreamingDataset, index_parquet_dataset

    repo = _repo(hf_hub)
    url = f"hf://datasets/{repo}/data"
    index_dir = str(tmp_path / "idx")
    hf_hub.clear_requests()
    index_parquet_dataset(url, index_dir)
    resolves = hf_hub.requests_for(f"/datasets/{repo}/resolve/")
    assert resolves and all(r.range is not None for r in resolves)
    index = json.loads((tmp_path / "idx" / "index.json").read_text())
    assert [c["chunk_size"] for c in index["chunks"]] == [10, 10, 10]
    assert index["config"]["item_loader"] == "ParquetLoader"
    listed = len(hf_hub.requests_for("/tree/"))
    ds = StreamingDataset(url, cache_dir=index_dir)
    assert [ds[i]["id"] for i in range(30)] == list(range(30))
    assert len(hf_hub.requests_for("/tree/")) == listed


def test_revision_and_convert_ref(hf_hub: HFHub, tmp_path) -> None:
    from streamscope import StreamingDataset

    repo = _repo(hf_hub)
    hf_hub.put(repo, "default/train/0000.parquet", _parquet([100, 101]), revision="refs/convert/parquet")
    ds = StreamingDataset(f"hf://datasets/{repo}@refs/convert/parquet/default/train", cache_dir=str(tmp_path))
    assert [ds[i]["id"] for i in range(len(ds))] == [100, 101]
    sha = hf_hub.commit_sha(repo)
    pinned = StreamingDataset(f"hf://datasets/{repo}@{sha}/data", cache_dir=str(tmp_path))
    assert len(pinned) == 30


def test_a_litdata_optimized_dataset_in_a_repo(hf_hub: HFHub, tmp_path) -> None:
    """A repo holding chunks and index.json (optimize() output uploaded to the Hub) streams as it is."""
    from streamscope import StreamingDataset, optimize

    out = tmp_path / "opt"
    optimize(fn=lambda i: {"i": i}, inputs=list(range(12)), output_dir=str(out), chunk_size=5, num_workers=1)
    repo = f"tests/{uuid.uuid4().hex[:10]}"
    hf_hub.create_repo(repo)
    for name in os.listdir(out):
        hf_hub.put(repo, f"opt/{name}", (out / name).read_bytes())
    ds = StreamingDataset(f"hf://datasets/{repo}/opt", cache_dir=str(tmp_path / "c"))
    assert sorted(ds[i]["i"] for i in range(len(ds))) == list(range(12))


# -- StreamingRawDataset ------------------------------------------------------------------------------------


def test_raw_dataset_over_an_hf_prefix(hf_hub: HFHub, tmp_path) -> None:
    from streamscope import StreamingRawDataset

    repo = f"tests/{uuid.uuid4().hex[:10]}"
    hf_hub.create_repo(repo)
    blobs = {f"images/{c}/{i}.bin": os.urandom(50 + i) for c in ("cat", "dog") for i in range(4)}
    for k, v in blobs.items():
        hf_hub.put(repo, k, v)
    hf_hub.put(repo, "README.md", b"card")
    ds = StreamingRawDataset(f"hf://datasets/{repo}/images", cache_dir=str(tmp_path))
    assert len(ds) == 8
    got = sorted(bytes(ds[i]) for i in range(len(ds)))
    assert got == sorted(blobs.values())


# -- HF_TOKEN -----------------------------------------------------------------------------------------------


def test_private_repo_needs_the_token(hf_hub: HFHub, tmp_path, monkeypatch, caplog) -> None:
    from streamscope import StreamingDataset

    token = f"hf_{uuid.uuid4().hex}"
    repo = _repo(hf_hub, token=token)
    url = f"hf://datasets/{repo}/data"
    caplog.set_level(logging.DEBUG)  # every logger, huggingface_hub's request log included
    with pytest.raises(ObjectNotFoundError) as info:  # what the Hub answers an anonymous caller: 401 RepoNotFound
        open_store(url).get("train-00000.parquet")
    assert url in str(info.value) and "HF_TOKEN" in str(info.value)

    monkeypatch.setenv("HF_TOKEN", "hf_wrong_token_0123456789")
    with pytest.raises(StorageAuthError) as auth:
        open_store(url).head("train-00000.parquet")
    assert "hf_wrong_token_0123456789" not in str(auth.value) and url in str(auth.value)

    monkeypatch.setenv("HF_TOKEN", token)
    ev.drain()
    ev.ACTIVE.update(ev.CATEGORIES)
    try:
        hf_hub.clear_requests()
        store = open_store(url)
        ds = StreamingDataset(url, cache_dir=str(tmp_path))
        assert [ds[i]["id"] for i in range(30)] == list(range(30))
        with pytest.raises(ObjectNotFoundError) as missing:
            store.get("no-such.parquet")
    finally:
        ev.ACTIVE.difference_update(ev.CATEGORIES)
    sent = hf_hub.requests_for(repo)
    assert sent and all(r.authorized for r in sent)
    cdn = hf_hub.requests_for("/blobs/")  # the Parquet files (LFS) came from the CDN, without the token
    assert cdn and not any(r.authorized for r in cdn)
    events = ev.drain()
    assert any(isinstance(e[6], dict) and str(e[6].get("url", "")).startswith(url) for e in events if len(e) > 6)
    outputs = [repr(store), repr(ds), repr(ds.__dict__), str(missing.value), caplog.text]
    outputs += [json.dumps(e, default=repr) for e in events]
    assert not any(token in o for o in outputs)
    assert token not in str(pickle.dumps(store))  # the token was read from HF_TOKEN: it does not travel


def test_hf_token_in_a_plain_script(hf_hub: HFHub, tmp_path) -> None:
    """As a user runs it: HF_TOKEN and HF_ENDPOINT in the environment, the Litracer log on; the token reaches the
    Hub as the bearer token and appears in neither the output nor the trace."""
    token = f"hf_{uuid.uuid4().hex}"
    repo = _repo(hf_hub, token=token)
    script = tmp_path / "train.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import streamscope as ss
            ds = ss.StreamingDataset("hf://datasets/{repo}/data", cache_dir={str(tmp_path / "cache")!r})
            loader = ss.StreamingDataLoader(ds, batch_size=4, num_workers=0)
            print("rows", sum(len(b["id"]) for b in loader))
            try:
                ss.StreamingDataset("hf://datasets/{repo}/nothing-here", cache_dir={str(tmp_path / "c2")!r})
            except Exception as exc:
                print("error", type(exc).__name__, exc)
            """
        )
    )
    log = tmp_path / "trace.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("STREAMSCOPE_", "LITDATA_"))}
    env.update(
        HF_TOKEN=token,
        HF_ENDPOINT=hf_hub.endpoint,
        STREAMSCOPE_TRACE_LEVEL="debug",
        STREAMSCOPE_LOG_FILE=str(log),
        PYTHONPATH=os.pathsep.join([os.path.join(REPO_ROOT, "src"), REPO_ROOT]),
    )
    hf_hub.clear_requests()
    proc = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "rows 30" in proc.stdout
    assert f"error IndexNotFoundError no .parquet files at 'hf://datasets/{repo}/nothing-here'" in proc.stdout
    sent = hf_hub.requests_for(repo)
    assert sent and all(r.authorized for r in sent)
    trace = log.read_text()
    assert "download" in trace and f"hf://datasets/{repo}/data" in trace
    for text in (proc.stdout, proc.stderr, trace):
        assert token not in text


# -- errors -------------------------------------------------------------------------------------------------


def test_missing_repo_file_and_revision_are_clear(hf_hub: HFHub, tmp_path) -> None:
    from streamscope import StreamingDataset

    repo = _repo(hf_hub)
    with pytest.raises(ObjectNotFoundError, match=r"hf://datasets/tests/nope-nope.*no such dataset repository"):
        StreamingDataset("hf://datasets/tests/nope-nope", cache_dir=str(tmp_path))
    with pytest.raises(ObjectNotFoundError, match=r"no such revision"):
        StreamingDataset(f"hf://datasets/{repo}@v9/data", cache_dir=str(tmp_path))
    with pytest.raises(ObjectNotFoundError, match=rf"hf://datasets/{repo}/data/gone.parquet.*no such file"):
        open_store(f"hf://datasets/{repo}/data").download_file("gone.parquet", str(tmp_path / "g"))
    with pytest.raises(IndexNotFoundError, match="no .parquet files"):
        StreamingDataset(f"hf://datasets/{repo}/README.md.d", cache_dir=str(tmp_path))


def test_server_errors_are_retried_a_bounded_number_of_times(hf_hub: HFHub, quick_retries) -> None:
    repo = _repo(hf_hub, files=1)
    store = open_store(f"hf://datasets/{repo}/data")
    hf_hub.fail_next(2, 503)
    assert store.get("train-00000.parquet") == hf_hub._repos[repo].branches["main"]["data/train-00000.parquet"]
    hf_hub.fail_next(50, 503)
    hf_hub.clear_requests()
    t0 = time.monotonic()
    try:
        with pytest.raises(TransientStorageError, match=r"HTTP 503"):
            store.get("train-00000.parquet")
        assert time.monotonic() - t0 < 30
        assert len(hf_hub.requests) == 3  # storage_max_attempts, then a clear error
    finally:
        hf_hub.clear_failures()  # the session's hub: what is left must not fail the next test's requests


def test_unreachable_endpoint_fails_without_hanging(quick_retries, monkeypatch) -> None:
    from tests.support.faultproxy import closed_port

    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{closed_port()}")
    t0 = time.monotonic()
    with pytest.raises(TransientStorageError) as info:
        open_store("hf://datasets/o/r").head("x.parquet")
    assert "hf://datasets/o/r/x.parquet" in str(info.value)
    assert time.monotonic() - t0 < 60


def test_token_in_storage_options(hf_hub: HFHub, tmp_path) -> None:
    """LitData's other spelling: storage_options={"token": ...} reaches the index build and every chunk download."""
    from streamscope import StreamingDataLoader, StreamingDataset

    token = f"hf_{uuid.uuid4().hex}"
    repo = _repo(hf_hub, token=token)
    ds = StreamingDataset(f"hf://datasets/{repo}/data", cache_dir=str(tmp_path), storage_options={"token": token})
    got = [i for b in StreamingDataLoader(ds, batch_size=8, num_workers=2) for i in b["id"].tolist()]
    assert sorted(got) == list(range(30))
    assert token not in repr(ds) and token not in repr(open_store(f"hf://datasets/{repo}", {"token": token}))
