"""File discovery and the ``index.json.zstd`` file index.

Format (the same bytes LitData writes, so either engine reuses the other's index)::

    zstd( json.dumps({"source": "<storage path>",
                      "files": [{"path": "<full path or URL>", "size": <int>}, ...],
                      "created_at": <unix seconds, float>}).encode("utf-8") )

Worked example: a local folder ``/data/imgs`` holding ``a.jpg`` (3 bytes) is indexed as
``{"source": "/data/imgs", "files": [{"path": "/data/imgs/a.jpg", "size": 3}], "created_at": 1.7e9}``;
for ``s3://bkt/imgs`` the path is ``s3://bkt/imgs/a.jpg``.

Where it lives and the order it is looked for in (``recompute_index=True`` skips straight to a rebuild):

1. ``{cache_root}/{md5(source)}/index.json.zstd`` (the local cache; always written after a build),
2. ``{input_dir}/index.json.zstd`` next to the data (written after a build for remote sources; for LOCAL
   sources only when the ``raw_write_source_index`` knob is set: streamscope does not write into your data
   folder unless asked, LitData always does),
3. a fresh listing by the indexer.

:class:`FileIndexer` sorts what it finds by path, so item order is the same on every machine (LitData keeps
filesystem order), and honours ``max_depth`` everywhere (LitData ignores it for local folders). An index
loaded from a file keeps the order it was written in.
"""

from __future__ import annotations

import json
import logging
import os
import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import zstandard

from streamscope._core import config
from streamscope._core.errors import EmptyRawSourceError, RawIndexError, StorageError
from streamscope.events import kinds
from streamscope.raw.source import Source

logger = logging.getLogger(__name__)

INDEX_FILENAME = "index.json.zstd"
_ZSTD_LEVEL = 3  # python-zstd's default level, which LitData uses
_warned_upload: set[int] = set()


@dataclass
class FileMetadata:
    """One file of a raw dataset: its full path (or URL) and its size in bytes."""

    path: str
    size: int

    def to_dict(self) -> dict[str, Any]:
        """The index entry for this file."""
        return {"path": self.path, "size": self.size}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> FileMetadata:
        """Build from an index entry."""
        return cls(path=data["path"], size=data["size"])


def encode_index(source: str, files: Sequence[FileMetadata], created_at: float | None = None) -> bytes:
    """The bytes of an ``index.json.zstd`` for ``files`` found under ``source``."""
    doc = {
        "source": source,
        "files": [f.to_dict() for f in files],
        "created_at": time.time() if created_at is None else created_at,
    }
    return zstandard.ZstdCompressor(level=_ZSTD_LEVEL).compress(json.dumps(doc).encode("utf-8"))


def decode_index(data: bytes, where: str) -> list[FileMetadata]:
    """Parse ``index.json.zstd`` bytes read from ``where``.

    Raises:
        RawIndexError: the bytes are not zstd, not JSON, or an entry lacks a string path or an int size ≥ 0.
    """
    try:
        with zstandard.ZstdDecompressor().stream_reader(data) as reader:
            raw = reader.read()
        doc = json.loads(raw.decode("utf-8"))
    except (zstandard.ZstdError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise RawIndexError(f"index {where!r} is not zstd-compressed JSON: {exc}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("files"), list):
        raise RawIndexError(f"index {where!r} has no 'files' list")
    files: list[FileMetadata] = []
    for i, entry in enumerate(doc["files"]):
        if not isinstance(entry, dict):
            raise RawIndexError(f"index {where!r}: files[{i}] is not an object")
        path, size = entry.get("path"), entry.get("size")
        if not isinstance(path, str) or isinstance(size, bool) or not isinstance(size, int) or size < 0:
            raise RawIndexError(f"index {where!r}: files[{i}] needs a string 'path' and an int 'size' >= 0")
        files.append(FileMetadata(path, size))
    return files


def _publish(path: str, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (a unique tmp name, then rename)."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    tmp = f"{path}.tmp.{os.getpid()}.{uuid.uuid4().hex[:8]}"
    try:
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


class BaseIndexer(ABC):
    """Finds a dataset's files and keeps the index of them. Subclass and implement :meth:`discover_files`."""

    @abstractmethod
    def discover_files(self, input_dir: str, storage_options: dict[str, Any] | None) -> list[FileMetadata]:
        """List the dataset's files under ``input_dir``."""

    def build_or_load_index(
        self,
        input_dir: str,
        cache_dir: str,
        storage_options: dict[str, Any] | None,
        recompute_index: bool = False,
    ) -> list[FileMetadata]:
        """Load the index (local cache, then next to the data) or build and save it.

        Args:
            input_dir: The dataset root (a local path or URL).
            cache_dir: This dataset's cache folder (``{cache_root}/{md5(source)}``); the index is kept here.
            storage_options: Passed to the object store.
            recompute_index: Rebuild from a fresh listing even when an index exists.

        Raises:
            EmptyRawSourceError: the listing found no files.
            RawSourceNotFoundError: a local ``input_dir`` does not exist.
        """
        source = Source(input_dir, storage_options)
        source.check_exists()
        local_index = os.path.join(cache_dir, INDEX_FILENAME)
        if not recompute_index:
            files = self._load_cached(source, local_index)
            if files is not None:
                return files
        return self._build(source, local_index, storage_options)

    def _load_cached(self, source: Source, local_index: str) -> list[FileMetadata] | None:
        if os.path.isfile(local_index):
            try:
                with open(local_index, "rb") as f:
                    files = decode_index(f.read(), local_index)
                if files:
                    kinds.index_found(where="local", files=len(files))
                    return files
            except (OSError, RawIndexError) as exc:
                logger.warning("ignoring unreadable local index %s: %s", local_index, exc)
        try:
            store = source.store()
            if not store.exists(INDEX_FILENAME):
                return None
            data = store.get(INDEX_FILENAME)
            files = decode_index(data, source.path_of(INDEX_FILENAME))
        except (StorageError, RawIndexError, OSError) as exc:
            logger.warning("ignoring index next to the data at %s: %s", source.path_of(INDEX_FILENAME), exc)
            return None
        if not files:
            return None
        kinds.index_found(where="source", files=len(files))
        try:
            _publish(local_index, data)
        except OSError as exc:
            logger.warning("could not keep a local copy of the index at %s: %s", local_index, exc)
        return files

    def _build(self, source: Source, local_index: str, storage_options: dict[str, Any] | None) -> list[FileMetadata]:
        with kinds.index(source=source.root) as f:
            files = self.discover_files(source.input_dir, storage_options)
            f["files"] = len(files)
        if not files:
            raise EmptyRawSourceError(f"no files found in input_dir {source.root!r}")
        data = encode_index(source.root, files)
        try:
            _publish(local_index, data)
        except OSError as exc:
            logger.warning("could not save the index at %s: %s", local_index, exc)
        if source.is_remote or config.get("raw_write_source_index"):
            try:
                source.store().put(INDEX_FILENAME, data)
            except (StorageError, OSError) as exc:
                pid = os.getpid()
                log = logger.info if pid in _warned_upload else logger.warning
                _warned_upload.add(pid)
                log("could not write the index next to the data at %s: %s", source.path_of(INDEX_FILENAME), exc)
        return files


class FileIndexer(BaseIndexer):
    """Lists every file under ``input_dir`` up to ``max_depth`` folder levels, optionally by extension.

    Args:
        max_depth: A file directly in ``input_dir`` is at depth 1; deeper files are skipped. ``None``: no limit.
        extensions: Keep only files whose lower-cased suffix (with the dot, e.g. ``".jpg"``) is listed.
    """

    def __init__(self, max_depth: int | None = 5, extensions: list[str] | None = None) -> None:
        self.max_depth = max_depth
        self.extensions = [e.lower() for e in (extensions or [])]

    def _keep(self, key: str) -> bool:
        name = key.rsplit("/", 1)[-1]
        if name == INDEX_FILENAME:
            return False
        if self.max_depth is not None and key.count("/") + 1 > self.max_depth:
            return False
        return not self.extensions or Path(name).suffix.lower() in self.extensions

    def discover_files(self, input_dir: str, storage_options: dict[str, Any] | None) -> list[FileMetadata]:
        """Every accepted file, sorted by path.

        Raises:
            RawSourceNotFoundError: a local ``input_dir`` does not exist.
        """
        source = Source(input_dir, storage_options)
        found = [FileMetadata(source.path_of(m.key), m.size) for m in source.list_files() if self._keep(m.key)]
        found.sort(key=lambda f: f.path)
        return found


__all__ = [
    "INDEX_FILENAME",
    "BaseIndexer",
    "FileIndexer",
    "FileMetadata",
    "decode_index",
    "encode_index",
]
