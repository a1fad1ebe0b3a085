from __future__ import annotations

import os

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streamscope._core.errors import UnsupportedURLError
from streamscope.storage import join_key, normalize_key, parse_url


@pytest.mark.parametrize(
    ("url", "kind", "bucket", "prefix"),
    [
        ("s3://my-bucket/a/b/", "s3", "my-bucket", "a/b"),
        ("s3://my-bucket", "s3", "my-bucket", ""),
        ("s3://Legacy_Bucket/k", "s3", "Legacy_Bucket", "k"),
        ("r2://bkt/x", "s3", "bkt", "x"),
        ("gs://bucket_1/data", "gs", "bucket_1", "data"),
        ("azure://container/p/q", "azure", "container", "p/q"),
        ("az://container", "azure", "container", ""),
        ("http://127.0.0.1:8080/data/set", "http", "127.0.0.1:8080", "data/set"),
        ("https://example.com", "http", "example.com", ""),
    ],
)
def test_remote_urls(url: str, kind: str, bucket: str, prefix: str) -> None:
    p = parse_url(url)
    assert (p.kind, p.bucket, p.prefix) == (kind, bucket, prefix)


def test_local_forms(tmp_path) -> None:
    plain = parse_url(str(tmp_path))
    assert plain.kind == "local" and plain.in_place and plain.prefix == str(tmp_path)
    cached = parse_url(f"local:{tmp_path}")
    assert cached.kind == "local" and not cached.in_place and cached.url == f"local:{tmp_path}"
    assert parse_url(f"file://{tmp_path}").prefix == str(tmp_path)
    rel = parse_url("some/rel:dir")
    assert rel.prefix == os.path.abspath("some/rel:dir")


@pytest.mark.parametrize(
    ("url", "needle"),
    [
        ("", "empty"),
        ("s3://", "missing bucket"),
        ("s3:///key", "missing bucket"),
        ("s3:bucket/key", "malformed"),
        ("s3://Bad_Bucket!/x", "invalid bucket"),
        ("s3://.dot/x", "invalid bucket"),
        ("azure://Upper/x", "invalid container"),
        ("s3://bucket/a/../b", "'..'"),
        ("s3://AKIA:secretpw@bucket/x", "credentials"),
        ("http://", "missing host"),
        ("http://host:99999/x", "malformed"),
        ("ftp://host/x", "unknown scheme 'ftp://'"),
        ("hf://datasets/x", "invalid repository name"),
        ("hf://models/o/r", "only Hugging Face dataset repositories"),
        ("file://otherhost/x", "local path"),
    ],
)
def test_bad_urls(url: str, needle: str) -> None:
    with pytest.raises(UnsupportedURLError) as info:
        parse_url(url)
    msg = str(info.value)
    assert needle in msg
    assert "secretpw" not in msg
    if url and "://" in url and "unknown" in needle:
        assert "s3://" in msg  # lists what is supported


def test_unknown_scheme_is_valueerror() -> None:
    with pytest.raises(ValueError):
        parse_url("ftp://x/y")


def test_keys() -> None:
    assert join_key("p", "a/b") == "p/a/b"
    assert join_key("", "/a/b/") == "a/b"
    for bad in ("", "/", "a/../b", "./a", "a\x00b"):
        with pytest.raises(UnsupportedURLError):
            normalize_key(bad, "s3://b")


@given(st.lists(st.text(alphabet="abcxyz019_-.", min_size=1, max_size=8), min_size=1, max_size=4))
def test_s3_prefix_roundtrip(segments: list[str]) -> None:
    if any(s in (".", "..") for s in segments):
        with pytest.raises(UnsupportedURLError):
            parse_url("s3://bucket/" + "/".join(segments))
        return
    p = parse_url("s3://bucket/" + "/".join(segments) + "/")
    assert p.prefix == "/".join(segments)
    assert parse_url(p.url) == p


def test_time_template() -> None:
    import datetime as dt

    from streamscope.storage import expand_time_template

    now = dt.datetime(2025, 5, 5, 13, 7)
    assert expand_time_template("/logs/run-{%Y-%m-%d}/x-{%H%M}", now) == "/logs/run-2025-05-05/x-1307"
    assert expand_time_template("s3://b/{%Y}", now) == "s3://b/{%Y}"
    assert expand_time_template("/plain/{notatemplate}", now) == "/plain/{notatemplate}"


def test_open_store_accepts_paths_and_dir_objects(tmp_path) -> None:
    from dataclasses import dataclass

    from streamscope.storage import LocalStore, open_store

    @dataclass
    class Dir:  # LitData's shape
        path: str | None = None
        url: str | None = None

    assert isinstance(open_store(tmp_path), LocalStore)
    assert open_store(tmp_path).url == str(tmp_path)
    assert open_store(Dir(path=str(tmp_path))).url == str(tmp_path)
    assert open_store(Dir(path="/ignored", url=f"local:{tmp_path}")).url == f"local:{tmp_path}"
