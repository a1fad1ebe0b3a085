"""Fixtures of the end-to-end tests: datasets written by optimize() to a bucket on the session's S3 server."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import pytest

from streamscope.processing import optimize
from tests.integration import _fns
from tests.support.s3server import S3Endpoint

N = 96
CHUNK = 8  # -> 12 chunks


def write_dataset(
    ep: S3Endpoint,
    prefix: str,
    fn: Callable[[int], Any] = _fns.sample,
    n: int = N,
    chunk_size: int = CHUNK,
    **kw: Any,
) -> str:
    """optimize() ``fn`` over ``range(n)`` to ``s3://bucket/prefix``; return the URL."""
    url = ep.url(prefix)
    optimize(
        fn,
        list(range(n)),
        url,
        chunk_size=chunk_size,
        num_workers=kw.pop("num_workers", 1),
        storage_options=ep.storage_options(),
        verbose=False,
        **kw,
    )
    return url


@pytest.fixture
def fast_retries() -> Any:
    """Fast storage retries, through the environment so that DataLoader workers (fork or spawn) see them."""
    saved = {k: os.environ.get(k) for k in ("STREAMSCOPE_STORAGE_RETRY_BASE_DELAY", "STREAMSCOPE_STORAGE_MAX_ATTEMPTS")}
    os.environ["STREAMSCOPE_STORAGE_RETRY_BASE_DELAY"] = "0.01"
    os.environ["STREAMSCOPE_STORAGE_MAX_ATTEMPTS"] = "10"
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
