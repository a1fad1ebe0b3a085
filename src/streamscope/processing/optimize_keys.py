"""``optimize(..., key_fn=...)``: the keys sidecar of a freshly written dataset.

After the chunks and index.json are published, every sample is read back in chunk order (the order
``StreamingDataset`` numbers them), ``key_fn(sample)`` gives its key, and ``keys/shard-*.parquet`` is written with
:func:`streamscope.format.keys_store.write_keys_store` (the same sidecar ``build_keys_index`` writes, LitData's layout).
Reading back rather than keying inside the workers keeps the global sample numbering in one place (the merged
index) and works for ``mode="append"`` too: the sidecar then covers the whole dataset. The output may be local or
on object storage (chunks are fetched, the sidecar and index.json uploaded).
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from typing import Any

from streamscope._core.errors import OptimizeInputError
from streamscope.events import kinds
from streamscope.format.chunk import decompress_file, open_chunk_bytes
from streamscope.format.item_loader import loader_for_config
from streamscope.format.keys_store import KEYS_DIRNAME, normalize_key, write_keys_store

__all__ = ["write_keys_for"]


def write_keys_for(store: Any, key_fn: Callable[[Any], Any], num_shards: int = 1, verbose: bool = True) -> None:
    """Key every sample of the dataset in ``store`` with ``key_fn`` and publish the keys sidecar.

    Raises:
        OptimizeInputError: the dataset is encrypted or not a chunk dataset (Parquet), or ``key_fn`` failed on a
            sample (the message names the chunk and item).
        DuplicateKeyError: two samples get the same key.
    """
    index = json.loads(store.get("index.json"))
    config = index.get("config") or {}
    if config.get("encryption"):
        raise OptimizeInputError("optimize(key_fn=...) does not support encrypted datasets")
    if config.get("item_loader") == "ParquetLoader":
        raise OptimizeInputError("optimize(key_fn=...) does not apply to Parquet datasets; use build_keys_index")
    loader = loader_for_config(config)
    loader.setup(config, None, index["chunks"])
    compression = config.get("compression")
    keys: list[str | int] = []
    chunk_indices: list[int] = []
    bar = None
    if verbose:
        from tqdm.auto import tqdm  # noqa: PLC0415

        bar = tqdm(total=sum(int(c["chunk_size"]) for c in index["chunks"]), desc="Building keys index", unit="sample")
    with tempfile.TemporaryDirectory(prefix="streamscope-keys-") as tmp:
        with kinds.build_keys_index(chunks=len(index["chunks"])):
            for c, entry in enumerate(index["chunks"]):
                name = entry["filename"]
                raw = os.path.join(tmp, "raw.bin")
                with open(raw, "wb") as f:
                    f.write(store.get(name))
                path = raw
                if compression and name.endswith(f".{compression}.bin"):  # whole-file zstd (0.2.76 frames in .bin)
                    path = os.path.join(tmp, "plain.bin")
                    decompress_file(raw, path, compression, int(entry["chunk_bytes"]))
                chunk = open_chunk_bytes(path, config, int(entry["chunk_size"]))  # any layout
                try:
                    for i in range(int(entry["chunk_size"])):
                        sample = chunk.sample(i, loader)
                        try:
                            key = key_fn(sample)
                        except Exception as exc:
                            raise OptimizeInputError(
                                f"key_fn failed on item {i} of chunk {name!r}: {type(exc).__name__}: {exc}"
                            ) from exc
                        keys.append(normalize_key(key))
                        chunk_indices.append(c)
                finally:
                    chunk.close()
                if bar is not None:
                    bar.update(int(entry["chunk_size"]))
        if bar is not None:
            bar.close()
        local = os.path.join(tmp, "dataset")
        os.makedirs(local)
        with open(os.path.join(local, "index.json"), "w", encoding="utf-8") as f:
            json.dump(index, f, sort_keys=True)
        indices = list(range(len(keys)))
        out = write_keys_store(local, keys, indices, chunk_indices, indices, num_shards=num_shards)
        for n in sorted(os.listdir(out)):
            with open(os.path.join(out, n), "rb") as f:
                store.put(f"{KEYS_DIRNAME}/{n}", f.read())
        with open(os.path.join(local, "index.json"), "rb") as f:
            store.put("index.json", f.read())  # now with its "keys" section
