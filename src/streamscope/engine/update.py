"""``dataset_update``: replace samples of a local optimized dataset by key, in place.

Usage (LitData's API)::

    with dataset_update("optimized_data") as update:
        update["sample-id"] = {"x": 1, "y": 2}      # or update.replace(key, sample)
        update.commit()                              # leaving without commit() discards the changes

The dataset needs a keys sidecar (``build_keys_index`` / ``optimize(key_fn=...)``). ``commit()`` rewrites every
chunk that holds an updated sample under its own file name (same rank, index and compression), then rewrites
``index.json`` with a new ``updated_at`` so readers' caches see a new version. A chunk is rewritten in the
dataset's own layout: LitData 0.2.68's, or 0.2.76's (told by its config keys) with the dataset's
``compression_level`` / ``compression_batch_size`` (Arrow-footer rows stay Arrow rows, framed zstd stays framed,
a whole-file ``.zstd.bin`` stays one), so the updated chunk opens in the LitData version that wrote the dataset.
Unlike LitData 0.2.68:

* all new chunks are written and checked (``data_format`` *and* ``data_spec`` must equal the dataset's) before any
  file is replaced, so a bad sample leaves the dataset untouched;
* ``chunk_bytes`` stays the uncompressed size (what the writer records), not the compressed file size;
* encrypted, Tokens and Parquet datasets are refused instead of being rewritten without their encryption/layout.

Keys are not recomputed: the updated sample keeps the key it replaces.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time
from collections import defaultdict
from typing import Any

from streamscope._core.errors import (
    DatasetError,
    IndexNotFoundError,
    SampleKeyError,
    SchemaMismatchError,
    UpdateSessionError,
)
from streamscope.engine.key_shards import open_key_shards
from streamscope.events import kinds
from streamscope.format.chunk import decompress_file, open_chunk_bytes
from streamscope.format.index import INDEX_FILENAME, load_index, write_index
from streamscope.format.item_loader import PyTreeLoader
from streamscope.format.keys_store import normalize_key
from streamscope.format.writer import ChunkWriter, layout_of

__all__ = ["DatasetUpdate", "dataset_update"]


def dataset_update(input_dir: Any) -> DatasetUpdate:
    """Open a keyed update session on a local optimized dataset (see the module docstring)."""
    return DatasetUpdate(input_dir)


def _layout(config: dict[str, Any], filename: str) -> dict[str, Any]:
    """The ChunkWriter arguments that rewrite chunk ``filename`` in the layout of the dataset of ``config``."""
    compression = config.get("compression")
    if layout_of(config) == "0.2.68":
        return {"compression": compression, "write_format": "0.2.68"}
    level = config.get("compression_level")
    if not compression and config.get("ipc_compression"):
        # Arrow rows compressed by Arrow: the dataset's compression is recorded there, not in `compression`
        compression, level = config["ipc_compression"], "chunk"
    elif compression and not level:
        level = "chunk"  # 0.2.76 records no level for whole-file zstd
    return {
        "compression": compression,
        "compression_level": level,
        "compression_batch_size": config.get("compression_batch_size"),
        "write_format": "0.2.76",
    }


def _chunk_name_parts(filename: str) -> tuple[int, int]:
    """``(rank, chunk_index)`` of ``chunk-R-I[.comp].bin``."""
    stem = filename[len("chunk-") :].split(".", 1)[0] if filename.startswith("chunk-") else ""
    parts = stem.split("-")
    if len(parts) < 2 or not parts[0].isdigit() or not parts[1].isdigit():
        raise DatasetError(f"chunk file name {filename!r} is not chunk-<rank>-<index>[.<compression>].bin")
    return int(parts[0]), int(parts[1])


class DatasetUpdate:
    """A keyed update session (context manager); stage with ``update[key] = sample``, then :meth:`commit`.

    Raises:
        IndexNotFoundError: not a local dataset folder, or no keys sidecar (both are FileNotFoundError).
        UpdateSessionError: a remote dataset (also a NotImplementedError, like LitData) or a closed session.
    """

    def __init__(self, input_dir: Any) -> None:
        from streamscope.engine.dataset_index import input_path

        path = input_path(input_dir)
        for prefix in ("local:", "file://"):
            if path.startswith(prefix):
                path = path[len(prefix) :]
        if "://" in path:
            raise UpdateSessionError(f"dataset_update() needs a local dataset folder, got the URL {path!r}")
        index_path = os.path.join(path, INDEX_FILENAME)
        if not os.path.isdir(path):
            raise IndexNotFoundError(f"dataset folder {path!r} does not exist")
        if not os.path.isfile(index_path):
            raise IndexNotFoundError(f"no {INDEX_FILENAME} in {path!r}: did you run optimize()?")
        self._dir = path
        self._index = load_index(index_path)
        shards = open_key_shards(path, self._index)
        if shards is None:
            raise IndexNotFoundError(
                f"no keys/ index in {path!r}: run build_keys_index(dir, key_fn) or optimize(..., key_fn=...) first"
            )
        self._shards = shards
        self._pending: dict[str | int, Any] = {}
        self._committed = False
        starts = [0]
        for c in self._index["chunks"]:
            starts.append(starts[-1] + int(c["chunk_size"]))
        self._starts = starts

    def __enter__(self) -> DatasetUpdate:
        return self

    def __exit__(self, *exc: Any) -> None:
        self._pending.clear()  # no implicit commit
        self._shards.close()

    def __setitem__(self, key: Any, sample: Any) -> None:
        self.replace(key, sample)

    def replace(self, key: Any, sample: Any) -> None:
        """Stage ``sample`` as the new value of the sample with key ``key`` (checked at commit)."""
        if self._committed:
            raise UpdateSessionError(  # LitData's sentence first
                "Cannot modify dataset_update after commit(): this session is committed; open a new one to change more"
            )
        self._pending[normalize_key(key)] = sample

    def commit(self) -> None:
        """Write the staged samples: rewrite their chunks, then index.json (new ``updated_at``).

        Raises:
            SampleKeyError: a staged key is not in the dataset (nothing is written).
            SchemaMismatchError: a staged sample does not fit the dataset's fields (nothing is written).
            UpdateSessionError: commit twice.
        """
        if self._committed:
            raise UpdateSessionError("this dataset_update session is already committed")
        config = self._index["config"]
        if config.get("encryption"):
            raise DatasetError(f"{self._dir!r} is encrypted: dataset_update cannot rewrite encrypted chunks")
        if config.get("item_loader") not in (None, "PyTreeLoader"):
            raise DatasetError(
                f"dataset_update rewrites PyTreeLoader datasets only; {self._dir!r} uses {config.get('item_loader')!r}"
            )
        by_chunk: dict[int, dict[int, Any]] = defaultdict(dict)
        for key, sample in self._pending.items():
            found = self._shards.resolve(key)
            if found is None:
                raise SampleKeyError(f"Unknown dataset key: {key!r} (no sample of {self._dir!r} has it)")
            gidx, chunk, offset = found
            if chunk < 0:
                import bisect

                chunk, offset = bisect.bisect_right(self._starts, gidx) - 1, gidx
            inside = 0 <= chunk < len(self._index["chunks"])
            local = offset - self._starts[chunk] if inside else -1
            if not inside or not 0 <= local < int(self._index["chunks"][chunk]["chunk_size"]):
                raise SampleKeyError(f"key {key!r} points outside {self._dir!r}: rebuild the keys/ index")
            by_chunk[chunk][local] = sample
        if by_chunk:
            with kinds.dataset_update(chunks=len(by_chunk), items=len(self._pending)):
                self._rewrite(by_chunk, config)
        self._pending.clear()
        self._committed = True

    def _rewrite(self, by_chunk: dict[int, dict[int, Any]], config: dict[str, Any]) -> None:
        compression = config.get("compression")
        loader = PyTreeLoader()
        loader.setup(config)
        staging = tempfile.mkdtemp(prefix=".update-", dir=self._dir)
        try:
            new_entries: dict[int, dict[str, Any]] = {}
            for chunk, updates in sorted(by_chunk.items()):
                entry = self._index["chunks"][chunk]
                samples = self._read_chunk(entry, compression, loader, staging)
                for local, sample in updates.items():
                    samples[local] = sample
                rank, cidx = _chunk_name_parts(entry["filename"])
                writer = ChunkWriter(
                    staging, chunk_size=len(samples), rank=rank, chunk_index=cidx, **_layout(config, entry["filename"])
                )
                for i, sample in enumerate(samples):
                    writer.add_item(i, sample)
                written = writer.done()
                new_cfg = writer.config or {}
                for field in ("data_format", "data_spec"):
                    if new_cfg.get(field) != config.get(field):
                        raise SchemaMismatchError(
                            f"updated samples of chunk {entry['filename']!r} have {field} {new_cfg.get(field)!r}, "
                            f"the dataset has {config.get(field)!r}"
                        )
                if len(written) != 1 or written[0]["filename"] != entry["filename"]:
                    raise DatasetError(f"rewriting {entry['filename']!r} produced {written}")
                new_entries[chunk] = written[0]
            for chunk, new in new_entries.items():  # every chunk checked: publish
                os.replace(os.path.join(staging, new["filename"]), os.path.join(self._dir, new["filename"]))
                self._index["chunks"][chunk].update(
                    chunk_bytes=new["chunk_bytes"], chunk_size=new["chunk_size"], dim=new["dim"]
                )
            text_index = {k: v for k, v in self._index.items() if k not in ("chunks", "config", "updated_at")}
            self._write_index(text_index)
        finally:
            shutil.rmtree(staging, ignore_errors=True)

    def _read_chunk(self, entry: dict[str, Any], compression: str | None, loader: PyTreeLoader, staging: str) -> list:
        path = os.path.join(self._dir, entry["filename"])
        whole_file = bool(compression) and entry["filename"].endswith(f".{compression}.bin")
        if whole_file:
            plain = os.path.join(staging, "read-" + entry["filename"])
            decompress_file(path, plain, compression)  # type: ignore[arg-type]
            path = plain
        chunk: Any = open_chunk_bytes(path, self._index["config"], int(entry["chunk_size"]))  # any layout
        try:
            return [chunk.sample(i, loader) for i in range(chunk.num_items)]
        finally:
            chunk.close()
            if whole_file:
                with contextlib.suppress(FileNotFoundError):
                    os.remove(path)

    def _write_index(self, extra: dict[str, Any]) -> None:
        path = os.path.join(self._dir, INDEX_FILENAME)
        stamp = str(time.time())
        if not extra:
            write_index(path, self._index["chunks"], self._index["config"], stamp)
        else:  # keep extra sections (``keys``) with LitData's sort_keys layout
            import json

            obj = {**extra, "chunks": self._index["chunks"], "config": self._index["config"], "updated_at": stamp}
            tmp = f"{path}.tmp.{os.getpid()}"
            with open(tmp, "w", encoding="utf-8") as f:
                f.write(json.dumps(obj, sort_keys=True))
            os.replace(tmp, path)
        self._index["updated_at"] = stamp
