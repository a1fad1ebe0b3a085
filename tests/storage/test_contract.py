"""One behaviour contract, run against every backend that can run on this machine.

Read-only backends (``hf``: the Hugging Face Hub emulator) get their objects from a seeding function the factory
attaches as ``store.test_seed`` (the emulator's commit), run every read check, and must refuse writes with
:class:`UnsupportedOperationError`.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator

import pytest

from streamscope._core.errors import InvalidRangeError, ObjectNotFoundError, StorageError, UnsupportedOperationError
from streamscope._core.protocols import ObjectStore
from streamscope.storage import open_store

Factory = Callable[[], ObjectStore]


def _local(request: pytest.FixtureRequest, tmp_path) -> ObjectStore:
    return open_store(str(tmp_path / "root"))


def _local_cached(request: pytest.FixtureRequest, tmp_path) -> ObjectStore:
    return open_store(f"local:{tmp_path / 'root'}")


def _s3_obstore(request: pytest.FixtureRequest, tmp_path) -> ObjectStore:
    ep = request.getfixturevalue("s3_server")
    store = open_store(ep.url("root/dir"), ep.storage_options(backend="obstore"))
    assert store.backend_name == "obstore"
    return store


def _s3_boto3(request: pytest.FixtureRequest, tmp_path) -> ObjectStore:
    ep = request.getfixturevalue("s3_server")
    store = open_store(ep.url("root"), ep.storage_options(backend="boto3"))
    assert store.backend_name == "boto3"
    return store


def _s3_https_obstore(request: pytest.FixtureRequest, tmp_path) -> ObjectStore:
    ep = request.getfixturevalue("s3_https_server")
    store = open_store(ep.url(), ep.storage_options(backend="obstore"))
    assert store.backend_name == "obstore"
    return store


def _s3_https_boto3(request: pytest.FixtureRequest, tmp_path) -> ObjectStore:
    ep = request.getfixturevalue("s3_https_server")
    store = open_store(ep.url("x"), ep.storage_options(backend="boto3"))
    assert store.backend_name == "boto3"
    return store


def _gcs(request: pytest.FixtureRequest, tmp_path) -> ObjectStore:
    ep = request.getfixturevalue("gcs_server")
    store = open_store(ep.url("root/dir"), ep.storage_options())
    assert store.backend_name == "google-cloud-storage"
    return store


def _azure_obstore(request: pytest.FixtureRequest, tmp_path) -> ObjectStore:
    ep = request.getfixturevalue("azurite_server")
    store = open_store(ep.url("root"), ep.storage_options(backend="obstore"))
    assert store.backend_name == "obstore"
    return store


def _azure_blob(request: pytest.FixtureRequest, tmp_path) -> ObjectStore:
    ep = request.getfixturevalue("azurite_server")
    store = open_store(ep.url("root/dir"), ep.storage_options())  # "auto" outside DataLoader workers
    assert store.backend_name == "azure-storage-blob"
    return store


def _hf(request: pytest.FixtureRequest, tmp_path) -> ObjectStore:
    hub = request.getfixturevalue("hf_hub")
    repo = f"contract/{uuid.uuid4().hex[:12]}"
    hub.create_repo(repo)
    store = open_store(f"hf://datasets/{repo}/root/dir")  # HF_ENDPOINT names the emulator
    assert store.backend_name == "huggingface_hub"
    store.test_seed = lambda key, data: hub.put(repo, f"root/dir/{key}", data)  # type: ignore[attr-defined]
    return store


BACKENDS: dict[str, Callable[..., ObjectStore]] = {
    "local": _local,
    "local-cached": _local_cached,
    "s3-obstore-http": _s3_obstore,
    "s3-boto3-http": _s3_boto3,
    "s3-obstore-https": _s3_https_obstore,
    "s3-boto3-https": _s3_https_boto3,
    "gs-google": _gcs,
    "azure-obstore": _azure_obstore,
    "azure-blob": _azure_blob,
    "hf": _hf,
}


def _put(store: ObjectStore, key: str, data: bytes) -> None:
    """Create an object: ``put``, or the seeding function of a read-only store."""
    seed = getattr(store, "test_seed", None)
    (seed or store.put)(key, data)


def _read_only(store: ObjectStore) -> bool:
    return bool(getattr(store, "read_only", False))


@pytest.fixture(params=sorted(BACKENDS))
def store(request: pytest.FixtureRequest, tmp_path) -> Iterator[ObjectStore]:
    yield BACKENDS[request.param](request, tmp_path)


def _payload(n: int) -> bytes:
    return os.urandom(n)


def test_put_get_head_exists(store: ObjectStore) -> None:
    if _read_only(store):
        with pytest.raises(UnsupportedOperationError) as info:
            store.put("dir/a.bin", b"x")
        assert "read-only" in str(info.value) and "dir/a.bin" in str(info.value)
    data = _payload(10_000)
    _put(store, "dir/a.bin", data)
    assert store.get("dir/a.bin") == data
    assert store.head("dir/a.bin").size == len(data)
    assert store.head("dir/a.bin").key == "dir/a.bin"
    assert store.exists("dir/a.bin")
    assert not store.exists("dir/missing.bin")
    _put(store, "empty", b"")
    assert store.get("empty") == b""
    assert store.head("empty").size == 0


def test_get_range(store: ObjectStore) -> None:
    data = _payload(4096)
    _put(store, "r.bin", data)
    assert store.get_range("r.bin", 0, 10) == data[:10]
    assert store.get_range("r.bin", 100, 4096) == data[100:]
    assert store.get_range("r.bin", 4000, 4001) == data[4000:4001]
    with pytest.raises(InvalidRangeError) as info:
        store.get_range("r.bin", 10, 5000)
    assert "r.bin" in str(info.value)
    with pytest.raises(InvalidRangeError):
        store.get_range("r.bin", 10, 5)


def test_missing_key_errors(store: ObjectStore) -> None:
    for op in (lambda: store.get("nope/x"), lambda: store.head("nope/x"), lambda: store.get_range("nope/x", 0, 1)):
        with pytest.raises(ObjectNotFoundError) as info:
            op()
        assert "nope/x" in str(info.value)
        assert isinstance(info.value, FileNotFoundError)


def test_list_sorted_recursive_prefix(store: ObjectStore) -> None:
    keys = ["b/2.bin", "a.bin", "b/1.bin", "b/c/3.bin", "bz.bin"]
    for i, k in enumerate(keys):
        _put(store, k, bytes([i]) * (i + 1))
    listed = list(store.list())
    assert [m.key for m in listed] == sorted(keys)
    assert {m.key: m.size for m in listed}["b/c/3.bin"] == 4
    assert [m.key for m in store.list("b/")] == ["b/1.bin", "b/2.bin", "b/c/3.bin"]
    assert [m.key for m in store.list("b")] == ["b/1.bin", "b/2.bin", "b/c/3.bin", "bz.bin"]
    assert list(store.list("nothing-here/")) == []


def test_delete(store: ObjectStore) -> None:
    _put(store, "d.bin", b"x")
    if _read_only(store):
        with pytest.raises(UnsupportedOperationError):
            store.delete("d.bin")
        assert store.get("d.bin") == b"x"  # still there
        return
    store.delete("d.bin")
    assert not store.exists("d.bin")
    store.delete("d.bin")  # idempotent
    with pytest.raises(ObjectNotFoundError):
        store.get("d.bin")


def test_download_upload_file(store: ObjectStore, tmp_path) -> None:
    data = _payload(300_000)
    src = tmp_path / f"src-{uuid.uuid4().hex}.bin"
    src.write_bytes(data)
    if _read_only(store):
        with pytest.raises(UnsupportedOperationError):
            store.upload_file(str(src), "up/file.bin")
        _put(store, "up/file.bin", data)
    else:
        store.upload_file(str(src), "up/file.bin")
    dest = tmp_path / "out" / "deep" / "file.bin"
    assert store.download_file("up/file.bin", str(dest)) == len(data)
    assert dest.read_bytes() == data
    assert sorted(os.listdir(dest.parent)) == ["file.bin"]  # no temporary left behind
    with pytest.raises(ObjectNotFoundError):
        store.download_file("up/missing.bin", str(tmp_path / "out" / "missing.bin"))
    assert not (tmp_path / "out" / "missing.bin").exists()
    assert sorted(os.listdir(tmp_path / "out")) == ["deep"]
    with pytest.raises(StorageError):
        store.upload_file(str(tmp_path / "no-such-file"), "up/x.bin")


def test_overwrite(store: ObjectStore) -> None:
    _put(store, "o.bin", b"first")
    _put(store, "o.bin", b"second!")
    assert store.get("o.bin") == b"second!"
    assert store.head("o.bin").size == 7


def test_local_path_semantics(tmp_path) -> None:
    in_place = open_store(str(tmp_path))
    in_place.put("k/v.bin", b"abc")
    assert in_place.local_path("k/v.bin") == str(tmp_path / "k" / "v.bin")
    assert open_store(f"local:{tmp_path}").local_path("k/v.bin") is None


def test_async_twins(store: ObjectStore, tmp_path) -> None:
    import asyncio

    blobs = {f"a/{i}.bin": _payload(1000 + i) for i in range(6)}
    for k, v in blobs.items():
        _put(store, k, v)

    async def main() -> tuple[list[bytes], list[bytes], list[int], int]:
        whole = await asyncio.gather(*(store.get_async(k) for k in blobs))
        parts = await asyncio.gather(*(store.get_range_async(k, 3, 99) for k in blobs))
        sizes = [m.size for m in await asyncio.gather(*(store.head_async(k) for k in blobs))]
        n = await store.download_file_async("a/0.bin", str(tmp_path / "dl.bin"))
        return whole, parts, sizes, n

    whole, parts, sizes, n = asyncio.run(main())
    assert whole == list(blobs.values())
    assert parts == [v[3:99] for v in blobs.values()]
    assert sizes == [len(v) for v in blobs.values()]
    assert n == 1000 and (tmp_path / "dl.bin").read_bytes() == blobs["a/0.bin"]
    assert isinstance(store, ObjectStore)


def test_traced_reads(store: ObjectStore, tmp_path) -> None:
    from streamscope import events as ev

    _put(store, "t.bin", b"0123456789")
    ev.drain()
    ev.ACTIVE.add("download")
    try:
        store.get("t.bin")
        store.get_range("t.bin", 2, 5)
        store.download_file("t.bin", str(tmp_path / "t.bin"))
    finally:
        ev.ACTIVE.discard("download")
    ends = [e for e in ev.drain() if e[0] == "E" and e[2] == "download"]
    assert [e[1] for e in ends] == [e[6]["op"] for e in ends] == ["get", "get_range", "download_file"]
    assert [e[6]["bytes"] for e in ends] == [10, 3, 10]
    for e in ends:
        assert e[6]["attempt"] == 1 and e[6]["status"] == "ok" and e[6]["duration_s"] >= 0
        assert e[6]["url"].startswith(store.url.rstrip("/")) and e[6]["url"].endswith("t.bin")


def test_walk_matches_list(store: ObjectStore, request: pytest.FixtureRequest) -> None:
    from streamscope.storage import walk

    for k in ("w/1", "w/2/3", "x"):
        _put(store, k, b"1")
    opts = {}
    param = request.node.callspec.params["store"]
    if param.startswith(("s3", "gs", "azure")):
        fixture = {"gs": "gcs_server", "azure": "azurite_server"}.get(param.split("-")[0], "s3_server")
        ep = request.getfixturevalue("s3_https_server" if "https" in param else fixture)
        opts = ep.storage_options()
    assert [m.key for m in walk(store.url, opts)] == [m.key for m in store.list()] == ["w/1", "w/2/3", "x"]
    assert [m.key for m in walk(store.url, opts, prefix="w/")] == ["w/1", "w/2/3"]


def test_unusual_key_characters(store: ObjectStore) -> None:
    key = "sp ace/ünï+cøde=%41&x.bin"
    _put(store, key, b"odd")
    assert store.get(key) == b"odd"
    assert store.head(key).size == 3
    assert [m.key for m in store.list("sp ace/")] == [key]


def test_list_refuses_climbing_prefixes(store: ObjectStore) -> None:
    from streamscope._core.errors import UnsupportedURLError

    for bad in ("../", "a/../b", ".."):
        with pytest.raises(UnsupportedURLError):
            list(store.list(bad))


def test_local_list_symlinks_and_cycles(tmp_path) -> None:
    root = tmp_path / "root"
    (root / "real").mkdir(parents=True)
    (root / "real" / "f.bin").write_bytes(b"x")
    os.symlink(root / "real", root / "linked")
    os.symlink(root, root / "real" / "loop")  # a cycle
    os.symlink(root / "nowhere", root / "dangling")
    os.mkfifo(root / "fifo")
    keys = [m.key for m in open_store(str(root)).list()]
    assert "real/f.bin" in keys and "linked/f.bin" in keys
    assert "dangling" not in keys and "fifo" not in keys
    assert len(keys) == len(set(keys)) < 10
