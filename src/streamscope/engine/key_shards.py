"""The keys sidecar of a dataset, read: ``open_key_shards`` finds its shard files (local paths, or ranged reads of
a remote store's objects through :class:`RangeFile`), ``has_keys_index`` tells whether a local folder has one.

The layout is :mod:`streamscope.format.keys_store`'s; :mod:`streamscope.engine.keyed` resolves keys through it and
:mod:`streamscope.engine.key_lookup` writes it (``build_keys_index``).
"""

from __future__ import annotations

import functools
import io
import os
from typing import Any

from streamscope.format.keys_store import KEYS_DIRNAME, LEGACY_KEYS_FILENAME, KeyShards, shard_filename

__all__ = ["RangeFile", "has_keys_index", "open_key_shards"]


class RangeFile(io.RawIOBase):
    """A read-only, seekable file over one object of a store, read with ranged GETs (for pyarrow)."""

    def __init__(self, store: Any, key: str, size: int | None = None) -> None:
        super().__init__()
        self._store = store
        self._key = key
        self._size = int(store.head(key).size if size is None else size)
        self._pos = 0
        self.name = f"{store.url.rstrip('/')}/{key}"

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._size}[whence]
        self._pos = max(0, base + int(offset))
        return self._pos

    def readinto(self, b: Any) -> int:
        n = min(len(b), self._size - self._pos)
        if n <= 0:
            return 0
        data = self._store.get_range(self._key, self._pos, self._pos + n)
        b[: len(data)] = data
        self._pos += len(data)
        return len(data)

    def read(self, size: int = -1) -> bytes:
        if size is None or size < 0:
            size = self._size - self._pos
        n = min(size, self._size - self._pos)
        if n <= 0:
            return b""
        data = self._store.get_range(self._key, self._pos, self._pos + n)
        self._pos += len(data)
        return bytes(data)

    def size(self) -> int:
        """Object size in bytes."""
        return self._size


def _shard_names(index: dict[str, Any] | None, local_dir: str | None) -> list[str] | None:
    """Relative names of the shard files, from index.json's ``keys`` section or the keys/ folder."""
    cfg = (index or {}).get("keys")
    if isinstance(cfg, dict) and int(cfg.get("num_shards", 0) or 0) >= 1:
        return [f"{KEYS_DIRNAME}/{shard_filename(i)}" for i in range(int(cfg["num_shards"]))]
    if local_dir is not None:
        kdir = os.path.join(local_dir, KEYS_DIRNAME)
        if os.path.isdir(kdir):
            from streamscope.format.index import natural_key

            names = sorted(
                (n for n in os.listdir(kdir) if n.startswith("shard-") and n.endswith(".parquet")), key=natural_key
            )
            if names:
                return [f"{KEYS_DIRNAME}/{n}" for n in names]
    return None


def _same(path: str) -> str:
    return path


def has_keys_index(dataset_dir: str) -> bool:
    """Whether a local dataset folder holds a keys sidecar (``keys/shard-00000.parquet`` or ``keys.parquet``)."""
    return os.path.isfile(os.path.join(dataset_dir, KEYS_DIRNAME, shard_filename(0))) or os.path.isfile(
        os.path.join(dataset_dir, LEGACY_KEYS_FILENAME)
    )


def open_key_shards(
    dataset: str, index: dict[str, Any] | None = None, store: Any = None, what: str | None = None
) -> KeyShards | None:
    """The sidecar of a dataset, or None when it has none.

    Args:
        dataset: local folder of the dataset (None-like ignored when ``store`` is given).
        index: the dataset's index.json (its ``keys`` section gives the shard count).
        store: the dataset's object store, for a remote dataset.
        what: how to name the dataset in messages.
    """
    local_dir = None if store is not None else dataset
    if local_dir is not None and store is None:
        names = _shard_names(index, local_dir)
        if names is None or not os.path.isfile(os.path.join(local_dir, names[0])):
            legacy = os.path.join(local_dir, LEGACY_KEYS_FILENAME)
            if not os.path.isfile(legacy):
                return None
            return KeyShards([functools.partial(_same, legacy)], [legacy])
        paths = [os.path.join(local_dir, *n.split("/")) for n in names]
        sharding = str(((index or {}).get("keys") or {}).get("sharding") or ("hash" if len(paths) > 1 else "none"))
        return KeyShards([functools.partial(_same, p) for p in paths], paths, sharding)
    names = _shard_names(index, None)
    if names is None:
        names = [f"{KEYS_DIRNAME}/{shard_filename(0)}"]
        if not store.exists(names[0]):
            if not store.exists(LEGACY_KEYS_FILENAME):
                return None
            names = [LEGACY_KEYS_FILENAME]
    elif not store.exists(names[0]):
        return None
    sharding = str(((index or {}).get("keys") or {}).get("sharding") or ("hash" if len(names) > 1 else "none"))
    openers = [functools.partial(RangeFile, store, n) for n in names]
    base = (what or store.url).rstrip("/")
    return KeyShards(openers, [f"{base}/{n}" for n in names], sharding)
