"""Reading a local dataset of either layout through the format readers (for the layout tests of processing/ and
engine/update; streamscope's StreamingDataset is not needed)."""

from __future__ import annotations

import os
from typing import Any


def read_samples(path: str) -> list[Any]:
    """Every sample of a local dataset of either layout, through the format readers (Arrow rows as dicts)."""
    from streamscope.format.chunk import decompress_file, open_chunk_bytes
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
        chunk = open_chunk_bytes(src, config, entry["chunk_size"])
        try:
            out += [chunk.sample(i, loader) for i in range(chunk.num_items)]
        finally:
            chunk.close()
        if src != os.path.join(path, name):
            os.remove(src)
    return out
