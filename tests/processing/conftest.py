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


def read_samples(path: str) -> list[Any]:
    """Every sample of a local dataset of either layout, through the format readers (Arrow rows as dicts)."""
    from streamscope.format.chunk import decompress_file, open_chunk
    from streamscope.format.compression import uncompressed_name
    from streamscope.format.index import load_index
    from streamscope.format.item_loader import PyTreeLoader

    index = load_index(path)
    config = index["config"]
    loader = PyTreeLoader()
    loader.setup(config)
    out: list[Any] = []
    for entry in index["chunks"]:
        name = entry["filename"]
        comp = config.get("compression")
        src = os.path.join(path, name)
        if comp and name.endswith(f".{comp}.bin"):
            plain = os.path.join(path, ".plain-" + uncompressed_name(name, comp))
            decompress_file(src, plain, comp, expected_bytes=entry["chunk_bytes"])
            src = plain
        chunk = open_chunk(src, config, entry["chunk_size"])
        try:
            out += [chunk.sample(i, loader) for i in range(chunk.num_items)]
        finally:
            chunk.close()
        if src != os.path.join(path, name):
            os.remove(src)
    return out
