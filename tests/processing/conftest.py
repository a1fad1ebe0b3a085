from __future__ import annotations

import json
import os
from typing import Any

import pytest


@pytest.fixture(autouse=True)
def _no_litdata_network(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LITDATA_DISABLE_VERSION_CHECK", "1")


def read_dataset(path: str) -> tuple[dict[str, Any], dict[str, bytes]]:
    """index.json without updated_at, and the bytes of every chunk file."""
    with open(os.path.join(path, "index.json")) as f:
        index = json.load(f)
    index.pop("updated_at", None)
    chunks = {}
    for c in index["chunks"]:
        with open(os.path.join(path, c["filename"]), "rb") as f:
            chunks[c["filename"]] = f.read()
    return index, chunks


def visible_files(path: str) -> list[str]:
    out = []
    for dirpath, _dirs, files in os.walk(path):
        for name in files:
            out.append(os.path.relpath(os.path.join(dirpath, name), path))
    return sorted(out)
