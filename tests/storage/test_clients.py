"""Per-process client sharing between S3 stores, and the streaming twin store used by the prefetcher."""

from __future__ import annotations

import os

import pytest

from streamscope._core import config
from streamscope._core.errors import ConfigError
from streamscope.storage import boto3_backend, open_store, s3


def test_stores_with_the_same_options_share_one_client(s3_server) -> None:
    opts = s3_server.storage_options(backend="boto3")
    a, b = open_store(s3_server.url("x"), opts), open_store(s3_server.url("y"), opts)
    assert a._backend() is b._backend()  # same bucket and options: one client (a boto3 client costs 0.1-0.3 s)
    a.put("k", b"v")
    assert open_store(s3_server.url("x"), opts).get("k") == b"v"
    other = open_store(s3_server.url("x"), {**opts, "region_name": "eu-west-1"})
    assert other._backend() is not a._backend()  # different options: its own client
    from botocore.config import Config

    custom = open_store(s3_server.url("x"), {**opts, "config": Config(read_timeout=7)})
    assert custom._backend() is not a._backend()  # a botocore Config is never shared


def test_clients_and_sessions_are_per_process(s3_server) -> None:
    store = open_store(s3_server.url("x"), s3_server.storage_options(backend="boto3"))
    store._backend()
    assert s3._CLIENTS and boto3_backend._SESSIONS
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: the parent's clients are gone (its connections and locks are not ours)
        os.write(w, f"{len(s3._CLIENTS)} {len(boto3_backend._SESSIONS)}".encode())
        os._exit(0)
    os.close(w)
    got = os.read(r, 100).decode()
    os.close(r)
    os.waitpid(pid, 0)
    assert got == "0 0"


def test_streaming_store_prefers_the_streaming_backend_only_under_auto(s3_server) -> None:
    auto = open_store(s3_server.url("x"), s3_server.storage_options())
    twin = auto.streaming_store()
    assert twin is not auto and twin.options.backend == "obstore" and auto.options.backend == "auto"
    assert twin.url == auto.url
    assert twin.backend_name == "obstore" and auto.backend_name == "boto3"  # pytest's process may fork: auto=boto3
    explicit = open_store(s3_server.url("x"), s3_server.storage_options(backend="boto3"))
    assert explicit.streaming_store() is explicit  # the user's explicit choice wins
    config.set_value("storage_s3_streaming_backend", "auto")
    try:
        assert auto.streaming_store() is auto
    finally:
        config.reset("storage_s3_streaming_backend")
    config.set_value("storage_s3_streaming_backend", "curl")
    try:
        with pytest.raises(ConfigError, match="storage_s3_streaming_backend"):
            auto.streaming_store()
    finally:
        config.reset("storage_s3_streaming_backend")
