"""Fixtures for raw-file dataset tests: small local folders with known contents."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from streamscope._core import config


def content(i: int, size: int = 0) -> bytes:
    """Unique bytes for file ``i`` (its index in text, padded to ``size``)."""
    head = f"file-{i:05d};".encode()
    return head + bytes((i + k) % 251 for k in range(max(0, size - len(head))))


def make_folder(root: Path, n: int, size: int = 64, nested: bool = False) -> Path:
    """``n`` files under ``root/data``; names sort in index order; ``nested`` spreads them over subfolders."""
    data = root / "data"
    for i in range(n):
        rel = f"d{i % 3}/f{i:05d}.bin" if nested else f"f{i:05d}.bin"
        p = data / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(content(i, size))
    return data


def file_id(data: bytes) -> int:
    """The index written into a file by :func:`content`."""
    return int(data.split(b";", 1)[0].split(b"-")[1])


@pytest.fixture()
def folder(tmp_path: Path) -> Path:
    return make_folder(tmp_path, 40)


@pytest.fixture()
def cache_root(tmp_path: Path) -> str:
    return str(tmp_path / "cache")


@pytest.fixture(autouse=True)
def _clean_knobs():
    """Fresh knobs per test; local folders take the pooled path (threads, look-ahead) unless a test says so."""
    config.reset()
    config.set_value("raw_local_inline_s", 0.0)
    yield
    config.reset()


def listing(path: Path) -> list[str]:
    return sorted(os.path.relpath(os.path.join(d, f), path) for d, _, fs in os.walk(path) for f in fs)
