"""streamscope.streaming.downloader: a downloader registered for a custom URL scheme serves StreamingDataset,
the chunk cache and BinaryReader wherever streamscope opens storage."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import streamscope
from streamscope._core.errors import ObjectNotFoundError, StorageError, UnsupportedURLError
from streamscope.storage import open_store
from streamscope.streaming.downloader import Downloader, get_downloader, register_downloader, unregister_downloader

SCHEME = "memproto://"
SOURCE: dict[str, str] = {}  # bucket -> local directory holding the dataset
CALLS: list[str] = []


class DirDownloader(Downloader):
    """Serves ``memproto://<bucket>/<key>`` from the directory registered in SOURCE (LitData's interface)."""

    def download_file(self, remote_filepath: str, local_filepath: str) -> None:
        CALLS.append(remote_filepath)
        bucket, _, key = remote_filepath[len(SCHEME) :].partition("/")
        src = os.path.join(SOURCE[bucket], key)
        if not os.path.exists(src):
            raise FileNotFoundError(src)
        shutil.copyfile(src, local_filepath)


def _fn(i: int) -> dict[str, int]:
    return {"i": i}


@pytest.fixture
def dataset_url(tmp_path: Any) -> Iterator[str]:
    src = str(tmp_path / "src")
    streamscope.optimize(fn=_fn, inputs=list(range(23)), output_dir=src, chunk_size=5, num_workers=1, verbose=False)
    SOURCE["b1"] = src
    CALLS.clear()
    register_downloader(SCHEME, DirDownloader)
    try:
        yield f"{SCHEME}b1/"
    finally:
        unregister_downloader(SCHEME)


def test_streaming_dataset_reads_through_registered_downloader(dataset_url: str, tmp_path: Any) -> None:
    ds = streamscope.StreamingDataset(dataset_url, cache_dir=str(tmp_path / "cache"))
    assert len(ds) == 23
    assert [s["i"] for s in ds] == list(range(23))
    fetched = sorted({os.path.basename(c) for c in CALLS})
    assert fetched == [
        "chunk-0-0.bin",
        "chunk-0-1.bin",
        "chunk-0-2.bin",
        "chunk-0-3.bin",
        "chunk-0-4.bin",
        "index.json",
    ]
    assert all(c.startswith("memproto://b1/") for c in CALLS)


def test_forked_workers_use_it_too(dataset_url: str, tmp_path: Any) -> None:
    ds = streamscope.StreamingDataset(dataset_url, cache_dir=str(tmp_path / "cache"), shuffle=True)
    loader = streamscope.StreamingDataLoader(ds, batch_size=4, num_workers=2)
    assert sorted(int(i) for b in loader for i in b["i"]) == list(range(23))


def test_binary_reader_with_remote_input_dir(dataset_url: str, tmp_path: Any) -> None:
    from streamscope.streaming.reader import BinaryReader, ChunkedIndex

    cache = tmp_path / "rc"
    cache.mkdir()
    r = BinaryReader(str(cache), remote_input_dir=dataset_url)
    assert r.get_length() == 23
    assert r.read(ChunkedIndex(12, 2)) == {"i": 12}
    assert (cache / "chunk-0-2.bin").exists()


def test_store_is_read_only_and_reports_missing(dataset_url: str) -> None:
    store = open_store(dataset_url)
    assert store.get("chunk-0-0.bin") == Path(os.path.join(SOURCE["b1"], "chunk-0-0.bin")).read_bytes()
    assert store.get_range("chunk-0-0.bin", 4, 8) == store.get("chunk-0-0.bin")[4:8]
    assert store.exists("index.json") and not store.exists("nope.bin")
    with pytest.raises(ObjectNotFoundError, match="nope.bin"):
        store.get("nope.bin")
    with pytest.raises(StorageError, match="DirDownloader"):
        store.put("x", b"1")


def test_registration_rules() -> None:
    with pytest.raises(ValueError, match="already registered"):
        register_downloader("s3://", DirDownloader)  # built-ins count as registered, as in LitData
    register_downloader(SCHEME, DirDownloader)
    try:
        with pytest.raises(ValueError, match="already registered"):
            register_downloader(SCHEME, DirDownloader)
        register_downloader(SCHEME, DirDownloader, overwrite=True)
        assert isinstance(get_downloader(f"{SCHEME}b1", "/tmp", []), DirDownloader)
    finally:
        unregister_downloader(SCHEME)
    with pytest.raises(UnsupportedURLError, match="unknown scheme"):
        open_store(f"{SCHEME}b1")
    with pytest.raises(KeyError):
        unregister_downloader(SCHEME)


def test_overwriting_a_builtin_scheme_routes_it(tmp_path: Any) -> None:
    src = str(tmp_path / "src")
    streamscope.optimize(fn=_fn, inputs=list(range(6)), output_dir=src, chunk_size=3, num_workers=1, verbose=False)
    served: list[str] = []

    class FakeS3(Downloader):
        def download_file(self, remote_filepath: str, local_filepath: str) -> None:
            served.append(remote_filepath)
            shutil.copyfile(os.path.join(src, remote_filepath.rsplit("/", 1)[1]), local_filepath)

    register_downloader("s3://", FakeS3, overwrite=True)
    try:
        ds = streamscope.StreamingDataset("s3://fake-bucket/data", cache_dir=str(tmp_path / "cache"))
        assert [s["i"] for s in ds] == list(range(6))
        assert "s3://fake-bucket/data/index.json" in served
    finally:
        unregister_downloader("s3://")
    assert type(open_store("s3://fake-bucket/data")).__name__ != "DownloaderStore"


def test_get_downloader_for_builtin_and_local(tmp_path: Any) -> None:
    src = tmp_path / "d"
    src.mkdir()
    (src / "a.bin").write_bytes(b"abcdef")
    dl = get_downloader(str(src), str(tmp_path), [{"filename": "a.bin"}])
    dl.download_chunk_from_index(0)
    assert (tmp_path / "a.bin").read_bytes() == b"abcdef"
    assert dl.download_chunk_bytes_from_index(0, 2, 3) == b"cde"


@pytest.mark.interop
def test_litdata_builtin_classes_by_name(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """get_downloader gives LitData's class for each built-in scheme; LocalDownloader can be subclassed."""
    import litdata.streaming.downloader as lit

    from streamscope.streaming import downloader as ours

    for name in ("S3Downloader", "GCPDownloader", "AzureDownloader", "R2Downloader", "HFDownloader", "LocalDownloader"):
        assert issubclass(getattr(ours, name), Downloader) and hasattr(lit, name)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "x")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "y")
    assert type(get_downloader("s3://bucket/ds", str(tmp_path), [])) is ours.S3Downloader
    assert type(get_downloader("hf://datasets/org/name", str(tmp_path), [])) is ours.HFDownloader  # no request yet
    src = tmp_path / "src"
    src.mkdir()
    (src / "c.bin").write_bytes(b"0123")
    dl = get_downloader(f"local:{src}", str(tmp_path), [{"filename": "c.bin"}])
    assert type(dl) is ours.LocalDownloaderWithCache
    dl.download_chunk_from_index(0)
    assert (tmp_path / "c.bin").read_bytes() == b"0123"
    with pytest.raises(FileNotFoundError, match="The provided remote_path doesn't exist"):
        dl.download_file(f"local:{src}/missing.bin", str(tmp_path / "m.bin"))

    class Mine(ours.LocalDownloader):
        pass

    register_downloader("mine://", Mine)
    try:
        assert type(get_downloader("mine://x", str(tmp_path), [])) is Mine
    finally:
        unregister_downloader("mine://")


_SCRIPT = """
import os, shutil, sys
import streamscope
from streamscope.streaming.downloader import Downloader, register_downloader

class DirDownloader(Downloader):
    def download_file(self, remote_filepath, local_filepath):
        shutil.copyfile(os.path.join(sys.argv[1], remote_filepath.rsplit("/", 1)[1]), local_filepath)

if __name__ == "__main__":
    register_downloader("memproto://", DirDownloader)
    ds = streamscope.StreamingDataset("memproto://b1/", cache_dir=sys.argv[2])
    loader = streamscope.StreamingDataLoader(ds, batch_size=4, num_workers=2)
    print(sorted(int(i) for b in loader for i in b["i"]) == list(range(23)))
"""


def test_a_downloader_leaves_no_scratch_directory_behind(dataset_url: str, tmp_path: Path) -> None:
    # Each process that fetches through a user downloader builds one with a scratch cache_dir (LitData's signature);
    # the main process and both workers must remove theirs when they end (they left three a run before).
    script = tmp_path / "job.py"
    script.write_text(_SCRIPT)
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = {**os.environ, "TMPDIR": str(tmp)}
    out = subprocess.run(
        [sys.executable, str(script), SOURCE["b1"], str(tmp_path / "cache")],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True"]  # every sample, through the downloader in the main process and workers
    assert [p.name for p in tmp.iterdir() if p.name.startswith("streamscope-dl-")] == []
