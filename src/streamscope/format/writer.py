"""ChunkWriter: samples -> chunk files, byte-identical to LitData's ``BinaryWriter``.

Each sample is flattened (:mod:`.pytree`), its leaves serialized with the serializers picked on the FIRST
sample, and encoded by the item loader. Items are packed greedily: a chunk is closed, without the item
that crosses a limit, when the pending bytes exceed ``chunk_bytes`` (strict) or the pending count (tokens
for TokensLoader) exceeds ``chunk_size``; an item over the limit on its own forms its own chunk. Unlike
LitData, every later sample is checked against the first one's structure and leaf types
(:class:`~streamscope._core.errors.SchemaMismatchError`), and a chunk that u32 offsets cannot address is
refused (:class:`~streamscope._core.errors.ChunkOverflowError`).
"""

from __future__ import annotations

import os
import struct
from typing import Any

from streamscope._core.errors import ChunkOverflowError, FormatError, SchemaMismatchError, short_repr
from streamscope._core.units import parse_bytes
from streamscope.format.compression import compress_bytes, parse_compression
from streamscope.format.item_loader import BaseItemLoader, PyTreeLoader
from streamscope.format.pytree import TreeSpec, leaf_paths, spec_difference, tree_flatten, treespec_dumps
from streamscope.format.serializers import Serializer, merge_serializers

_U32_LIMIT = 1 << 32


def convert_chunk_bytes(value: int | str | None) -> int | None:
    """``chunk_bytes`` as an int; strings use LitData's decimal units ("64MB" = 64_000_000)."""
    if value is None or isinstance(value, int):
        return value
    text = value.strip()
    low = text.lower()
    for suffix, mult in (("tb", 10**12), ("gb", 10**9), ("mb", 10**6), ("kb", 10**3)):
        if low.endswith(suffix):
            try:
                return int(float(low[: -len(suffix)]) * mult)
            except ValueError:
                break
    try:
        return int(parse_bytes(text))
    except Exception as exc:  # noqa: BLE001
        raise FormatError(f"chunk_bytes {value!r} is not a byte size: {exc}") from None


class ChunkWriter:
    """Write samples into ``chunk-{rank}-{idx}[.{compression}].bin`` files in ``out_dir``.

    Args:
        out_dir: directory for the chunk files (created if missing).
        chunk_size: max items per chunk (max tokens for TokensLoader).
        chunk_bytes: max bytes of item data per chunk (int, or a string such as "64MB").
        compression: None, "zstd" (level 4) or "zstd:N".
        item_loader: PyTreeLoader (default) or TokensLoader.
        serializers: extra serializers, tried before the built-ins.
        rank: the writer's rank in file names.
        chunk_index: index of the first chunk file.
        encryption: a :mod:`.encryption` key object (``level`` "sample" or "chunk"); items (sample level) or
            whole chunks (chunk level) are encrypted before compression, as LitData does.
    """

    def __init__(
        self,
        out_dir: str,
        *,
        chunk_size: int | None = None,
        chunk_bytes: int | str | None = None,
        compression: str | None = None,
        item_loader: BaseItemLoader | None = None,
        serializers: dict[str, Serializer] | None = None,
        rank: int = 0,
        chunk_index: int = 0,
        encryption: Any = None,
    ) -> None:
        if (chunk_size is None) == (chunk_bytes is None):
            raise FormatError("give exactly one of chunk_size or chunk_bytes")
        if chunk_size is not None and (not isinstance(chunk_size, int) or chunk_size <= 0):
            raise FormatError(f"chunk_size must be a positive int, got {chunk_size!r}")
        self.chunk_bytes_limit = convert_chunk_bytes(chunk_bytes)
        if self.chunk_bytes_limit is not None and self.chunk_bytes_limit <= 0:
            raise FormatError(f"chunk_bytes must be positive, got {chunk_bytes!r}")
        self.chunk_size_limit = chunk_size
        parse_compression(compression)
        self.compression = compression
        self.out_dir = out_dir
        os.makedirs(out_dir, exist_ok=True)
        self.item_loader = item_loader or PyTreeLoader()
        self._serializers = merge_serializers(serializers)
        self.rank = rank
        self.chunk_index = chunk_index
        self.encryption = encryption
        self._encrypt_level = _encryption_level(encryption)
        if encryption is not None and self.item_loader.name == "TokensLoader":
            raise FormatError(
                "TokensLoader datasets cannot be encrypted (token blocks are read straight from the file)"
            )
        self.chunks: list[dict[str, Any]] = []
        self.config: dict[str, Any] | None = None
        self._data_format: list[str] | None = None
        self._spec: TreeSpec | None = None
        self._leaf_sers: list[Serializer] = []
        self._matchers: list[Any] = []
        self._fixed_size: list[int | None] = []
        self._paths: list[str] = []
        # pending items of the open chunk
        self._pending: list[bytes] = []
        self._pending_dims: list[int | None] = []
        self._pending_bytes = 0
        self._pending_count = 0
        self._next_index: int | None = None
        self._done = False

    # --- serialisation ---------------------------------------------------------------------------

    def _first_sample(self, index: int, leaves: list[Any], spec: TreeSpec) -> tuple[list[bytes], list[int]]:
        data: list[bytes] = []
        sizes: list[int] = []
        fmts: list[str] = []
        sers: list[Serializer] = []
        paths = leaf_paths(spec)
        for path, leaf in zip(paths, leaves):
            for key, ser in self._serializers.items():
                if ser.can_serialize(leaf):
                    blob, name = self._run(ser, leaf, index, path)
                    fmts.append(name or key)
                    sers.append(ser)
                    data.append(blob)
                    sizes.append(getattr(ser, "size", len(blob)))
                    break
            else:  # pragma: no cover (pickle accepts everything unless replaced)
                raise FormatError(f"sample {index} field {path}: no serializer accepts {type(leaf).__name__}")
        self._data_format = fmts
        self._spec = spec
        self._leaf_sers = sers
        # LitData-style user serializers have no ``matches``: their ``can_serialize`` checks the type then
        self._matchers = [getattr(ser, "matches", None) or ser.can_serialize for ser in sers]
        self._paths = paths
        self.config = {
            "chunk_bytes": self.chunk_bytes_limit,
            "chunk_size": self.chunk_size_limit,
            "compression": self.compression,
            "data_format": list(fmts),
            "data_spec": treespec_dumps(spec),
            "encryption": self.encryption.state_dict() if self.encryption is not None else None,
            "item_loader": self.item_loader.name,
        }
        return data, sizes

    @staticmethod
    def _run(ser: Serializer, leaf: Any, index: int, path: str) -> tuple[bytes, str | None]:
        try:
            return ser.serialize(leaf)
        except FormatError as exc:
            raise type(exc)(f"sample {index} field {path}: {exc}") from None
        except (OverflowError, ValueError, TypeError, KeyError, RuntimeError) as exc:
            raise FormatError(f"sample {index} field {path}: cannot serialize {type(leaf).__name__}: {exc}") from exc

    def _next_sample(self, index: int, leaves: list[Any], spec: TreeSpec) -> tuple[list[bytes], list[int]]:
        assert self._spec is not None and self._data_format is not None
        if spec != self._spec:
            path, why = spec_difference(self._spec, spec)
            raise SchemaMismatchError(f"sample {index} field {path} does not match the first sample's structure: {why}")
        data: list[bytes] = []
        sizes: list[int] = []
        for j, (leaf, ser, fmt, matches) in enumerate(zip(leaves, self._leaf_sers, self._data_format, self._matchers)):
            if not matches(leaf):
                lead = getattr(ser, "litdata_mismatch", "")
                raise SchemaMismatchError(
                    (lead.format(item=short_repr(leaf, 80)) + " " if lead else "")
                    + f"sample {index} field {self._paths[j]}: {type(leaf).__name__} does not fit the field's "
                    f"data_format {fmt!r} set by the first sample"
                )
            blob, name = self._run(ser, leaf, index, self._paths[j])
            if name is not None and name != fmt:
                raise SchemaMismatchError(
                    f"sample {index} field {self._paths[j]}: encodes as {name!r} but the first sample set {fmt!r}"
                )
            data.append(blob)
            sizes.append(getattr(ser, "size", len(blob)))
        return data, sizes

    def serialize(self, index: int, sample: Any) -> tuple[bytes, int | None]:
        """The item bytes of ``sample`` (and its ``dim``), checking it against the first sample."""
        leaves, spec = tree_flatten(sample)
        if self._data_format is None:
            data, sizes = self._first_sample(index, leaves, spec)
        else:
            data, sizes = self._next_sample(index, leaves, spec)
        return self.item_loader.encode_data(data, sizes, leaves)

    # --- chunking --------------------------------------------------------------------------------

    def add_item(self, index: int, sample: Any) -> list[dict[str, Any]]:
        """Add sample ``index`` (consecutive indexes); returns the chunk entries this call closed."""
        if self._done:
            raise FormatError("add_item after done()")
        if self._next_index is not None and index != self._next_index:
            raise FormatError(f"sample index {index} is not consecutive (expected {self._next_index})")
        blob, dim = self.encode(index, sample)
        self._next_index = index + 1
        return self.add_encoded(blob, dim)

    def encode(self, index: int, sample: Any) -> tuple[bytes, int | None]:
        """Sample ``index`` as it goes into a chunk (serialized, encrypted at level "sample") and its ``dim``.

        For callers that order items themselves (LitData's ``BinaryWriter`` takes indexes out of order): they
        encode each sample as it comes, then hand the bytes over in index order with :meth:`add_encoded`.
        """
        blob, dim = self.serialize(index, sample)
        if self._encrypt_level == "sample":
            blob = self.encryption.encrypt(blob)
        return blob, dim

    def add_encoded(self, blob: bytes, dim: int | None) -> list[dict[str, Any]]:
        """Append an item made by :meth:`encode`; returns the chunk entries this call closed."""
        if self._done:
            raise FormatError("add_item after done()")
        closed: list[dict[str, Any]] = []
        weight = dim if dim else 1
        if self._pending and self.over_limit(self._pending_bytes + len(blob), self._pending_count + weight):
            closed.append(self._close())
        self._pending.append(blob)
        self._pending_dims.append(dim)
        self._pending_bytes += len(blob)
        self._pending_count += weight
        if self.over_limit(self._pending_bytes, self._pending_count):  # a lone item over the limit
            closed.append(self._close())
        return closed

    def close_chunk(self) -> list[dict[str, Any]]:
        """Close the open chunk now, below its limits (``[]`` when it holds nothing)."""
        return [self._close()] if self._pending else []

    def over_limit(self, nbytes: int, count: int) -> bool:
        """Whether a chunk of ``nbytes`` item bytes and ``count`` items (tokens for TokensLoader) is over a limit."""
        if self.chunk_bytes_limit is not None and nbytes > self.chunk_bytes_limit:
            return True
        return self.chunk_size_limit is not None and count > self.chunk_size_limit

    def done(self) -> list[dict[str, Any]]:
        """Close the tail chunk; returns its entry (or ``[]``). Idempotent."""
        if self._done:
            return []
        self._done = True
        return self.close_chunk()

    def filename(self, chunk_index: int | None = None) -> str:
        """File name of chunk ``chunk_index`` (default: the next one)."""
        idx = self.chunk_index if chunk_index is None else chunk_index
        if self.compression:
            return f"chunk-{self.rank}-{idx}.{self.compression}.bin"
        return f"chunk-{self.rank}-{idx}.bin"

    def _close(self) -> dict[str, Any]:
        items = self._pending
        n = len(items)
        head = 4 * (n + 2)
        total = head + self._pending_bytes
        if total >= _U32_LIMIT:
            raise ChunkOverflowError(
                f"chunk {self.filename()!r} would be {total} bytes with {n} items; u32 offsets address < 4 GiB "
                "(lower chunk_bytes/chunk_size)"
            )
        offsets = [head]
        pos = head
        for it in items:
            pos += len(it)
            offsets.append(pos)
        header = struct.pack(f"<I{n + 1}I", n, *offsets)
        dims = self._pending_dims
        # LitData writes dim=None when the chunk's FIRST item has 0 tokens (its reader then crashes); the
        # token total is always written here when items carry a dim.
        dim = sum(d or 0 for d in dims) if any(d is not None for d in dims) else None
        name = self.filename()
        if self._encrypt_level == "chunk":  # the whole chunk is one ciphertext; chunk_bytes is its length
            items = [self.encryption.encrypt(header + b"".join(items))]
            header = b""
            total = len(items[0])
        entry = {"chunk_bytes": total, "chunk_size": n, "dim": dim, "filename": name}
        if self.compression:  # one-shot: zstd streaming output differs from LitData's one-shot bytes
            parts = [compress_bytes(header + b"".join(items), self.compression)]
        else:
            parts = [header, *items]  # written piece by piece: no second copy of the chunk in memory
        _write_atomic(os.path.join(self.out_dir, name), parts)
        self.chunks.append(entry)
        self.chunk_index += 1
        self._pending = []
        self._pending_dims = []
        self._pending_bytes = 0
        self._pending_count = 0
        return entry


def _encryption_level(encryption: Any) -> str | None:
    if encryption is None:
        return None
    level = getattr(encryption, "level", None)
    if level not in ("sample", "chunk") or not callable(getattr(encryption, "encrypt", None)):
        raise FormatError(f"encryption must have level 'sample' or 'chunk' and an encrypt() method, got {encryption!r}")
    if not callable(getattr(encryption, "state_dict", None)):
        raise FormatError(f"encryption {encryption!r} has no state_dict() for index.json")
    return str(level)


def _write_atomic(path: str, parts: list[bytes]) -> None:
    tmp = f"{path}.tmp.{os.getpid()}"
    try:
        with open(tmp, "wb") as f:
            f.writelines(parts)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
