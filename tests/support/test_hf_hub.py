"""The Hub emulator answers huggingface_hub's own calls as the Hub does (so the hf:// tests test something real)."""

from __future__ import annotations

import pathlib

import pytest

from tests.support.hf_hub import HFHub

hub_lib = pytest.importorskip("huggingface_hub")


@pytest.fixture(scope="module")
def hub():
    with HFHub(page_size=2, cdn=True) as h:
        h.create_repo("o/pub")
        h.put("o/pub", "data/a.parquet", b"A" * 2000)
        h.put("o/pub", "data/sub/b.parquet", b"b" * 10)
        h.put("o/pub", "README.md", b"card")
        h.create_repo("o/priv", token="hf_secret_token_123456")
        h.put("o/priv", "x.bin", b"private bytes")
        yield h


def test_list_repo_tree_paginates(hub: HFHub) -> None:
    api = hub_lib.HfApi(endpoint=hub.endpoint, token=False)
    files = sorted(
        (f.path, f.size) for f in api.list_repo_tree("o/pub", repo_type="dataset", recursive=True) if hasattr(f, "size")
    )
    assert files == [("README.md", 4), ("data/a.parquet", 2000), ("data/sub/b.parquet", 10)]
    top = sorted(f.path for f in api.list_repo_tree("o/pub", "data", repo_type="dataset"))
    assert top == ["data/a.parquet", "data/sub"]
    with pytest.raises(hub_lib.errors.EntryNotFoundError):
        list(api.list_repo_tree("o/pub", "nothing", repo_type="dataset"))


def test_info_paths_info_and_download(hub: HFHub, tmp_path) -> None:
    api = hub_lib.HfApi(endpoint=hub.endpoint, token=False)
    info = api.dataset_info("o/pub")
    assert info.sha == hub.commit_sha("o/pub")
    assert sorted(p.path for p in api.get_paths_info("o/pub", ["data/a.parquet", "data"], repo_type="dataset")) == [
        "data",
        "data/a.parquet",
    ]
    path = hub_lib.hf_hub_download(
        "o/pub", "data/a.parquet", repo_type="dataset", endpoint=hub.endpoint, cache_dir=str(tmp_path), token=False
    )
    assert pathlib.Path(path).read_bytes() == b"A" * 2000
    assert hub.requests_for("/blobs/")  # a large file came through the redirect to the CDN
    with pytest.raises(hub_lib.errors.RepositoryNotFoundError):
        api.dataset_info("o/missing")


def test_private_repo_needs_the_bearer_token(hub: HFHub, tmp_path) -> None:
    with pytest.raises(hub_lib.errors.RepositoryNotFoundError):
        hub_lib.HfApi(endpoint=hub.endpoint, token=False).dataset_info("o/priv")
    path = hub_lib.hf_hub_download(
        "o/priv",
        "x.bin",
        repo_type="dataset",
        endpoint=hub.endpoint,
        cache_dir=str(tmp_path),
        token="hf_secret_token_123456",
    )
    assert pathlib.Path(path).read_bytes() == b"private bytes"
    assert all(r.authorized for r in hub.requests_for("o/priv") if r.status == 200)
