"""The keys sidecar of an optimized dataset: ``keys/shard-NNNNN.parquet`` mapping entity keys to samples.

Layout (LitData's, so either engine reads the other's)::

    <dataset>/index.json         gains  "keys": {"num_shards": 1, "sharding": "none", "version": 1}
    <dataset>/keys/shard-00000.parquet
    <dataset>/keys/shard-00001.parquet   (when num_shards > 1: "sharding": "hash")

Each shard is a zstd Parquet file sorted by ``key``, one row group of up to 1,000,000 rows, columns:

* ``key``: ``int64`` when every key is an int, else ``large_string`` (``str(key)``);
* ``index``: ``int64`` global sample index (position in the chunk order of index.json);
* ``chunk_index``: ``int32`` position of the sample's chunk in ``index.json["chunks"]``;
* ``chunk_offset``: ``int32`` the global index again (LitData passes it as ``ChunkedIndex.index``).

With ``num_shards > 1`` a key goes to shard ``int.from_bytes(blake2b(str(key), digest_size=8), "little") %
num_shards``. A legacy single ``<dataset>/keys.parquet`` is still read. Example: keys ``["b", "a"]`` for samples
0 and 1 of one chunk give one shard with rows ``("a", 1, 0, 1), ("b", 0, 0, 0)``.

This module is bytes <-> rows over paths and file objects (pyarrow only); finding the files on a store is the
read path's job.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Callable, Sequence
from typing import Any

from streamscope._core.errors import DuplicateKeyError, FormatError
from streamscope.format.index import INDEX_FILENAME
from streamscope.format.parquet import require_pyarrow

#: what keyed access is called in the error when pyarrow is missing (``streamscope[keys]`` installs it)
KEYS_FEATURE = "keyed lookup (optimize(key_fn=...), get_by_key, build_keys_index, dataset_update)"

__all__ = [
    "KEYS_DIRNAME",
    "LEGACY_KEYS_FILENAME",
    "KeyShards",
    "key_shard",
    "keys_config",
    "keys_table",
    "normalize_key",
    "shard_filename",
    "write_keys_store",
]

KEYS_DIRNAME = "keys"
LEGACY_KEYS_FILENAME = "keys.parquet"
_MAX_ROW_GROUP = 1_000_000


def normalize_key(key: Any) -> str | int:
    """A user key as ``int`` or ``str`` (bytes are UTF-8 decoded, numpy integers become int).

    Raises:
        TypeError: bool, None or any other type.
    """
    if isinstance(key, bool) or key is None:
        raise TypeError(f"unsupported key type {type(key).__name__} ({key!r}): use str or int")
    if isinstance(key, (int, str)):
        return int(key) if isinstance(key, int) else key
    if isinstance(key, bytes):
        return key.decode("utf-8")
    try:
        import numpy as np

        if isinstance(key, np.integer):
            return int(key)
    except ImportError:  # pragma: no cover - numpy is a dependency
        pass
    raise TypeError(f"unsupported key type {type(key).__name__} ({key!r}): use str or int")


def key_shard(key: Any, num_shards: int) -> int:
    """The shard of ``key`` in ``[0, num_shards)`` (stable across processes and engines)."""
    if num_shards <= 1:
        return 0
    digest = hashlib.blake2b(str(normalize_key(key)).encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "little") % num_shards


def shard_filename(shard: int) -> str:
    """``shard-00003.parquet``."""
    return f"shard-{shard:05d}.parquet"


def keys_config(num_shards: int) -> dict[str, Any]:
    """The ``keys`` section of index.json."""
    return {"num_shards": int(num_shards), "sharding": "hash" if num_shards > 1 else "none", "version": 1}


def keys_table(
    keys: Sequence[Any],
    indices: Sequence[int],
    chunk_indices: Sequence[int] | None = None,
    chunk_offsets: Sequence[int] | None = None,
) -> Any:
    """A pyarrow table with the sidecar schema, sorted by key.

    Raises:
        DuplicateKeyError: a key appears twice (named in the message).
        FormatError: the columns differ in length.
    """
    require_pyarrow(KEYS_FEATURE, "keys")
    import pyarrow as pa

    nkeys = [normalize_key(k) for k in keys]
    if len(nkeys) != len(indices):
        raise FormatError(f"{len(nkeys)} keys but {len(indices)} sample indices")
    if nkeys and all(isinstance(k, int) for k in nkeys):
        key_col = pa.array(nkeys, type=pa.int64())
        seen: list[Any] = nkeys
    else:
        seen = [str(k) for k in nkeys]
        key_col = pa.array(seen, type=pa.large_string())
    if len(set(seen)) != len(seen):
        first: set[Any] = set()
        dup = next(k for k in seen if k in first or first.add(k))  # type: ignore[func-returns-value]
        raise DuplicateKeyError(f"key {dup!r} is given to more than one sample; keys must be unique")
    cols: dict[str, Any] = {"key": key_col, "index": pa.array(list(indices), type=pa.int64())}
    if chunk_indices is not None:
        cols["chunk_index"] = pa.array(list(chunk_indices), type=pa.int32())
    if chunk_offsets is not None:
        cols["chunk_offset"] = pa.array(list(chunk_offsets), type=pa.int32())
    table = pa.table(cols)
    if table.num_rows:
        table = table.sort_by("key")
    return table


def _write_table(table: Any, path: str) -> None:
    pq = require_pyarrow(KEYS_FEATURE, "keys")
    tmp = f"{path}.tmp"
    try:
        pq.write_table(table, tmp, compression="zstd", row_group_size=min(_MAX_ROW_GROUP, max(table.num_rows, 1)))
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _set_keys_section(dataset_dir: str, num_shards: int) -> None:
    """Record the sidecar layout in ``<dataset_dir>/index.json`` (kept otherwise as is, ``updated_at`` too)."""
    path = os.path.join(dataset_dir, INDEX_FILENAME)
    if not os.path.isfile(path):
        return
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    data["keys"] = keys_config(num_shards)
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(data, f, sort_keys=True)
    os.replace(tmp, path)


def write_keys_store(
    dataset_dir: str,
    keys: Sequence[Any],
    indices: Sequence[int],
    chunk_indices: Sequence[int] | None = None,
    chunk_offsets: Sequence[int] | None = None,
    num_shards: int = 1,
) -> str:
    """Write ``<dataset_dir>/keys/shard-*.parquet`` (replacing any previous sidecar); returns the keys dir.

    Raises:
        DuplicateKeyError: a key appears twice.
        FormatError: ``num_shards < 1``.
    """
    if not isinstance(num_shards, int) or num_shards < 1:
        raise FormatError(f"num_shards must be an int >= 1, got {num_shards!r}")
    table = keys_table(keys, indices, chunk_indices, chunk_offsets)
    out = os.path.join(dataset_dir, KEYS_DIRNAME)
    if os.path.isdir(out):
        shutil.rmtree(out)
    os.makedirs(out, exist_ok=True)
    if num_shards == 1:
        _write_table(table, os.path.join(out, shard_filename(0)))
    else:
        import pyarrow as pa

        shard_ids = pa.array([key_shard(k, num_shards) for k in table.column("key").to_pylist()], type=pa.int32())
        import pyarrow.compute as pc

        for s in range(num_shards):
            part = table.filter(pc.equal(shard_ids, s))
            _write_table(part, os.path.join(out, shard_filename(s)))
    _set_keys_section(dataset_dir, num_shards)
    legacy = os.path.join(dataset_dir, LEGACY_KEYS_FILENAME)
    if os.path.isfile(legacy):
        os.remove(legacy)
    return out


class KeyShards:
    """Key lookups over the shard files of one sidecar, without loading the whole key map.

    A lookup opens the key's shard (footer only), skips row groups whose min/max statistics exclude the key and
    reads the ``key`` column of the others.

    Args:
        openers: one callable per shard returning a path or a seekable binary file object.
        names: shard names for messages.
        sharding: ``"none"`` or ``"hash"`` (from the index.json ``keys`` section).
    """

    def __init__(self, openers: Sequence[Callable[[], Any]], names: Sequence[str], sharding: str = "none") -> None:
        if not openers:
            raise FormatError("a keys sidecar needs at least one shard file")
        self._openers = list(openers)
        self._names = list(names)
        self._sharding = sharding
        self._files: dict[int, Any] = {}

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_files"] = {}  # open handles stay in their process
        return state

    @property
    def num_shards(self) -> int:
        """Number of shard files."""
        return len(self._openers)

    def _file(self, shard: int) -> Any:
        pf = self._files.get(shard)
        if pf is None:
            pq = require_pyarrow(KEYS_FEATURE, "keys")
            try:
                pf = pq.ParquetFile(self._openers[shard]())
            except FormatError:
                raise
            except Exception as exc:  # noqa: BLE001
                raise FormatError(
                    f"keys shard {self._names[shard]!r} is not a readable Parquet file: {type(exc).__name__}: {exc}"
                ) from None
            names = pf.schema_arrow.names
            if "key" not in names or "index" not in names:
                raise FormatError(f"keys shard {self._names[shard]!r} lacks the `key`/`index` columns (has {names})")
            self._files[shard] = pf
        return pf

    def _shards_for(self, key: str | int) -> list[int]:
        if self._sharding == "hash" and self.num_shards > 1:
            return [key_shard(key, self.num_shards)]
        return list(range(self.num_shards))

    def resolve(self, key: Any) -> tuple[int, int, int] | None:
        """``(global_index, chunk_index, chunk_offset)`` of ``key`` (chunk fields -1 when absent), or None."""
        require_pyarrow(KEYS_FEATURE, "keys")
        import pyarrow as pa
        import pyarrow.compute as pc

        nkey = normalize_key(key)
        for shard in self._shards_for(nkey):
            pf = self._file(shard)
            schema = pf.schema_arrow
            is_int = pa.types.is_integer(schema.field("key").type)
            if is_int and not isinstance(nkey, int):
                continue  # int keys are stored as int64: a string never matches (as in LitData)
            probe: Any = nkey if is_int else str(nkey)
            key_pos = schema.get_field_index("key")
            has_chunks = "chunk_index" in schema.names and "chunk_offset" in schema.names
            md = pf.metadata
            for g in range(md.num_row_groups):
                stats = md.row_group(g).column(key_pos).statistics
                if stats is not None and stats.has_min_max:
                    lo, hi = stats.min, stats.max
                    if isinstance(lo, bytes):
                        lo, hi = lo.decode("utf-8", "replace"), hi.decode("utf-8", "replace")
                    try:
                        if probe < lo or probe > hi:
                            continue
                    except TypeError:
                        pass
                cols = ["key", "index"] + (["chunk_index", "chunk_offset"] if has_chunks else [])
                table = pf.read_row_group(g, columns=cols)
                hits = pc.indices_nonzero(
                    pc.equal(table.column("key"), pa.scalar(probe, table.schema.field("key").type))
                )
                if len(hits):
                    row = int(hits[0].as_py())
                    gidx = int(table.column("index")[row].as_py())
                    if has_chunks:
                        return (
                            gidx,
                            int(table.column("chunk_index")[row].as_py()),
                            int(table.column("chunk_offset")[row].as_py()),
                        )
                    return gidx, -1, -1
        return None

    def close(self) -> None:
        """Close the open shard files."""
        for pf in self._files.values():
            try:
                # force: an opener's file object is ours to close (pyarrow closes only a source it opened itself)
                pf.close(force=True)
            except Exception:  # noqa: BLE001 (best effort)
                pass
        self._files.clear()
