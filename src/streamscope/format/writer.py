"""ChunkWriter: samples -> chunk files, byte-identical to LitData's ``BinaryWriter`` (0.2.68 or 0.2.76).

Each sample is flattened (:mod:`.pytree`), its leaves serialized with the serializers picked on the FIRST
sample (:mod:`.sample_encoder`), and encoded by the item loader. Items are packed greedily: a chunk is closed, without the item
that crosses a limit, when the pending bytes exceed ``chunk_bytes`` (strict) or the pending count (tokens
for TokensLoader) exceeds ``chunk_size``; an item over the limit on its own forms its own chunk. Unlike
LitData, every later sample is checked against the first one's structure and leaf types
(:class:`~streamscope._core.errors.SchemaMismatchError`), and a chunk that u32 offsets cannot address is
refused (:class:`~streamscope._core.errors.ChunkOverflowError`).

``write_format`` picks the layout (the format layer writes what it is told; ``optimize()`` and ``BinaryWriter``
resolve the ``write_format`` knob; :mod:`.layout` tells a dataset's layout from its index):

* ``"0.2.68"`` (the default here): LitData 0.2.68's chunks and config, byte for byte.
* ``"0.2.76"``: LitData 0.2.76's. Every sample's type is inferred and fused into ``config.types``
  (:mod:`.schema`); a dict sample is flattened through :func:`~.schema.wrap_for_pytree` (list/dict fields become
  one ``json`` leaf); when the fused schema is JSON-like rows, the chunk holds the samples as an Arrow table
  behind the header instead of item bytes (:mod:`.arrow_write`), and such a row counts toward ``chunk_bytes``
  with its payload size (first chunk) or the previous chunk's bytes per row (later chunks); ``compression="zstd"``
  frames the items inside ``.bin`` files (``compression_level`` "batch", the default, or "sample";
  :mod:`.framed_write`) or compresses whole files ("chunk", 0.2.68's way); Arrow chunks use Arrow's IPC
  compression instead (``config.ipc_compression``). The config gains ``types``, ``compression_level``,
  ``compression_batch_size`` and ``ipc_compression``; ``compression`` stays null when no chunk was compressed.

Three things differ from LitData 0.2.76 on purpose (each where 0.2.76 cannot read its own output or leaks data):

* with sample-level encryption the samples are never copied into a plaintext Arrow footer (the chunks stay
  classic, every item encrypted; 0.2.76 writes the rows in clear and then fails to read them);
* samples whose schema looks like Arrow rows but that are no dicts (lists, tuples) are framed like any classic
  chunk when ``compression_level`` is "batch"/"sample" (0.2.76 writes them unframed under an index that says
  framed, and refuses to read them);
* a row whose nested fields differ from the first sample's is accepted while its chunk is an Arrow chunk (its
  pytree bytes are not written; 0.2.76 fails on such a row); if such a chunk must keep its item bytes,
  :class:`SchemaMismatchError` is raised instead of writing mis-aligned leaves.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from typing import Any

from streamscope._core.errors import ChunkOverflowError, ConfigError, FormatError, SchemaMismatchError
from streamscope._core.units import parse_bytes
from streamscope.format import schema as sch
from streamscope.format.arrow_write import arrow_footer, slim_chunk
from streamscope.format.compression import compress_bytes, parse_compression
from streamscope.format.framed_write import (
    DEFAULT_BATCH_SIZE,
    in_file,
    pack_framed_zstd,
    pack_sample_zstd,
    resolve_compression_level,
)
from streamscope.format.item_loader import BaseItemLoader, PyTreeLoader
from streamscope.format.layout import (
    V076_CONFIG_KEYS,
    config_body,
    fuse_configs,
    layout_of,
    resolve_write_format,
)
from streamscope.format.pytree import treespec_dumps
from streamscope.format.sample_encoder import SampleEncoder
from streamscope.format.serializers import Serializer

# the layout rules (.layout) are re-exported: the write path imports them from here too
__all__ = [
    "ChunkWriter",
    "PendingItem",
    "V076_CONFIG_KEYS",
    "config_body",
    "convert_chunk_bytes",
    "fuse_configs",
    "layout_of",
    "resolve_write_format",
]


_U32_LIMIT = 1 << 32


def convert_chunk_bytes(value: int | float | str | None) -> int | None:
    """``chunk_bytes`` as an int (:func:`~streamscope._core.units.parse_bytes`: "64MB" = 64_000_000).

    Raises:
        FormatError: the string is not a byte size (the writer's error type, naming ``chunk_bytes``).
    """
    if value is None or isinstance(value, int):
        return value
    try:
        return parse_bytes(value)
    except ConfigError as exc:
        raise FormatError(f"chunk_bytes {value!r} is not a byte size: {exc}") from None


@dataclass
class PendingItem:
    """One encoded sample waiting for its chunk.

    Attributes:
        data: the item bytes (serialized leaves, encrypted at sample level).
        dim: token count (TokensLoader), else None.
        sample: the original sample, kept for a 0.2.76 Arrow footer (None otherwise).
        exact: False when ``data`` does not encode the sample (a row whose nested fields differ from the first
            sample's): it can then only be written into an Arrow chunk.
        error: why ``data`` is not exact (raised if the item must be written as bytes).
    """

    data: bytes
    dim: int | None = None
    sample: Any = None
    exact: bool = True
    error: str = ""


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
        write_format: "0.2.68" (default) or "0.2.76" (see the module docstring).
        compression_level: "batch" (default with zstd), "sample" or "chunk" ("0.2.76"; "0.2.68" accepts only
            None or "chunk", its one layout).
        compression_batch_size: items per zstd frame at level "batch" (default 256).
        state: a :meth:`state` of a writer this one continues (a resumed optimize worker).

    Raises:
        ConfigError: an unknown ``write_format``.
        FormatError: bad limits, compression, ``compression_level`` or encryption (LitData's sentences first).
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
        write_format: str = "0.2.68",
        compression_level: str | None = None,
        compression_batch_size: int | None = None,
        state: dict[str, Any] | None = None,
    ) -> None:
        self.write_format = resolve_write_format(write_format)
        if (chunk_size is None) == (chunk_bytes is None):
            raise FormatError("give exactly one of chunk_size or chunk_bytes")
        if chunk_size is not None and (not isinstance(chunk_size, int) or chunk_size <= 0):
            raise FormatError(f"chunk_size must be a positive int, got {chunk_size!r}")
        self.chunk_bytes_limit = convert_chunk_bytes(chunk_bytes)
        if self.chunk_bytes_limit is not None and self.chunk_bytes_limit <= 0:
            raise FormatError(f"chunk_bytes must be positive, got {chunk_bytes!r}")
        self.chunk_size_limit = chunk_size
        self.item_loader = item_loader or PyTreeLoader()
        self._v076 = self.write_format == "0.2.76"
        if self._v076:
            self.compression_level = resolve_compression_level(
                compression,
                compression_level,
                compression_batch_size,
                encryption=encryption,
                item_loader_name=self.item_loader.name,
            )
        else:
            parse_compression(compression)
            if compression_level not in (None, "", "chunk") or compression_batch_size is not None:
                raise FormatError(
                    f"compression_level={compression_level!r} / compression_batch_size={compression_batch_size!r} "
                    "need write_format '0.2.76' (LitData 0.2.68 compresses whole chunk files only)"
                )
            self.compression_level = "chunk"
        self.compression_batch_size = compression_batch_size
        self.compression = compression
        self.out_dir = out_dir
        os.makedirs(out_dir, exist_ok=True)
        self._encoder = SampleEncoder(serializers)
        self.rank = rank
        self.chunk_index = chunk_index
        self.encryption = encryption
        self._encrypt_level = _encryption_level(encryption)
        if encryption is not None and self.item_loader.name == "TokensLoader":
            raise FormatError(
                "TokensLoader datasets cannot be encrypted (token blocks are read straight from the file)"
            )
        self.chunks: list[dict[str, Any]] = []
        # LitData 0.2.76 state: fused schema, first sample's keys, what the chunks written so far used
        self._types: sch.JsonType | None = None
        self._keys: list[str] | None = None
        self._file_compressed = False
        self._framed = False
        self._ipc_used = False
        self._skip_ipc = False
        self._ipc_decided = False
        self._row_bytes: float | None = None  # bytes per row of the last Arrow chunk
        if state:
            self._load_state(state)
        # pending items of the open chunk
        self._pending: list[PendingItem] = []
        self._pending_bytes = 0
        self._pending_count = 0
        self._next_index: int | None = None
        self._done = False

    # --- config and state ------------------------------------------------------------------------

    @property
    def config(self) -> dict[str, Any] | None:
        """The index ``config`` of what was written (None before the first sample)."""
        if self._encoder.data_format is None:
            return None
        assert self._encoder.spec is not None
        out: dict[str, Any] = {
            "chunk_bytes": self.chunk_bytes_limit,
            "chunk_size": self.chunk_size_limit,
            "compression": self.compression,
            "data_format": list(self._encoder.data_format),
            "data_spec": treespec_dumps(self._encoder.spec),
            "encryption": self.encryption.state_dict() if self.encryption is not None else None,
            "item_loader": self.item_loader.name,
        }
        if self._v076:
            framed = self._framed
            out.update(
                compression=self.compression if (self._file_compressed or framed or not self.chunks) else None,
                compression_level=self.compression_level if framed and self.compression_level != "chunk" else None,
                compression_batch_size=self._batch_size() if framed and self.compression_level == "batch" else None,
                ipc_compression=self._ipc_codec() if self._ipc_used else None,
                types=sch.schema_to_json(self._types),
            )
        return out

    def index_config(self) -> dict[str, Any]:
        """:attr:`config`, or before the first sample the config with ``data_format`` and ``data_spec`` None (and
        0.2.76's keys None): what LitData's ``BinaryWriter.get_config`` returns before any item."""
        if self.config is not None:
            return dict(self.config)
        out = {
            "compression": self.compression,
            "chunk_size": self.chunk_size_limit,
            "chunk_bytes": self.chunk_bytes_limit,
            "data_format": None,
            "data_spec": None,
            "encryption": self.encryption.state_dict() if self.encryption is not None else None,
            "item_loader": self.item_loader.name,
        }
        if self._v076:
            out.update(compression_level=None, compression_batch_size=None, ipc_compression=None, types=None)
        return out

    def state(self) -> dict[str, Any]:
        """What a writer continuing this one's chunks needs to write what this one would have (JSON): the
        first sample's leaf formats and, for "0.2.76", the fused schema and what the chunks so far used."""
        out: dict[str, Any] = {
            "data_format": self._encoder.data_format,
            "data_spec": None if self._encoder.spec is None else treespec_dumps(self._encoder.spec),
        }
        if not self._v076:
            return out
        return {
            **out,
            "types": sch.schema_state(self._types),
            "keys": self._keys,
            "file_compressed": self._file_compressed,
            "framed": self._framed,
            "ipc_used": self._ipc_used,
            "skip_ipc": self._skip_ipc,
            "ipc_decided": self._ipc_decided,
            "row_bytes": self._row_bytes,
        }

    def _load_state(self, state: dict[str, Any]) -> None:
        if state.get("data_format") is not None and state.get("data_spec") is not None:
            self._encoder.resume_format = (list(state["data_format"]), str(state["data_spec"]))
        if not self._v076:
            return
        self._types = sch.schema_from_state(state.get("types"))
        self._keys = state.get("keys")
        self._file_compressed = bool(state.get("file_compressed"))
        self._framed = bool(state.get("framed"))
        self._ipc_used = bool(state.get("ipc_used"))
        self._skip_ipc = bool(state.get("skip_ipc"))
        self._ipc_decided = bool(state.get("ipc_decided"))
        self._row_bytes = state.get("row_bytes")

    def _batch_size(self) -> int:
        return (
            max(1, int(self.compression_batch_size)) if self.compression_batch_size is not None else DEFAULT_BATCH_SIZE
        )

    def _ipc_codec(self) -> str | None:
        """Arrow IPC compression of Arrow chunks: the codec of ``compression`` unless rows are mostly bytes."""
        if not self.compression or self._skip_ipc:
            return None
        codec = self.compression.split(":")[0]
        return codec if codec in ("zstd", "lz4") else None

    def _arrow_rows(self) -> bool:
        """Whether, as fused so far, samples go into an Arrow footer."""
        return (
            self._v076
            and sch.is_arrow_footer_type(self._types)
            and sch.data_format_is_arrow_safe(self._encoder.data_format)
        )

    # --- serialisation ---------------------------------------------------------------------------

    def serialize(self, index: int, sample: Any) -> tuple[bytes, int | None]:
        """The item bytes of ``sample`` (and its ``dim``), checking it against the first sample.

        The sample is taken as given: a "0.2.76" writer wraps dict samples first (:meth:`encode` does).
        """
        leaves, data, sizes = self._encoder.serialize(index, sample)
        return self.item_loader.encode_data(data, sizes, leaves)

    def encode(self, index: int, sample: Any) -> PendingItem:
        """Sample ``index`` as it goes into a chunk (serialized, encrypted at level "sample").

        For callers that order items themselves (LitData's ``BinaryWriter`` takes indexes out of order): they
        encode each sample as it comes, then hand the items over in index order with :meth:`add_encoded`.
        """
        if not self._v076:
            blob, dim = self.serialize(index, sample)
            if self._encrypt_level == "sample":
                blob = self.encryption.encrypt(blob)
            return PendingItem(blob, dim)
        original = sample
        inferred = sch.infer_type(sample)
        self._types = inferred if self._types is None else sch.fuse_type(self._types, inferred)
        if isinstance(sample, dict):
            sample = sch.wrap_for_pytree(sample, self._types, keys=self._keys, wrap_leaf=_json_leaf)
        first = self._encoder.data_format is None and self._encoder.resume_format is None
        exact, error = True, ""
        try:
            blob, dim = self.serialize(index, sample)
        except SchemaMismatchError as exc:
            # the leaves of a row can vary below its top-level fields; an Arrow chunk does not store them
            if first or not (isinstance(original, dict) and self._arrow_rows() and self._encrypt_level != "sample"):
                raise
            blob, dim, exact, error = b"", None, False, str(exc)
        if self._keys is None and isinstance(sample, dict):
            self._keys = list(sample)
        if self._encrypt_level == "sample":
            blob = self.encryption.encrypt(blob)
        keep = (
            isinstance(original, dict)
            and self._encrypt_level != "sample"  # never a plaintext copy of encrypted samples
            and sch.data_format_is_arrow_safe(self._encoder.data_format)
            and (sch.is_arrow_footer_type(self._types) or sch.is_json_row(original))
        )
        if keep and not self._ipc_decided:
            self._skip_ipc = sch.is_binary_heavy(original)
            self._ipc_decided = True
        return PendingItem(blob, dim, original if keep else None, exact, error)

    def account_bytes(self, item: PendingItem) -> int:
        """What ``item`` counts for toward ``chunk_bytes``: its bytes, or for an Arrow row the bytes per row of
        the last Arrow chunk (before the first one: the row's payload size)."""
        if item.sample is None or not self._arrow_rows():
            return len(item.data)
        if self._row_bytes is not None:
            return max(1, int(round(self._row_bytes)))
        _, total = sch.sample_payload_bytes(item.sample)
        return max(1, total if total else len(item.data))

    # --- chunking --------------------------------------------------------------------------------

    def add_item(self, index: int, sample: Any) -> list[dict[str, Any]]:
        """Add sample ``index`` (consecutive indexes); returns the chunk entries this call closed."""
        if self._done:
            raise FormatError("add_item after done()")
        if self._next_index is not None and index != self._next_index:
            raise FormatError(f"sample index {index} is not consecutive (expected {self._next_index})")
        item = self.encode(index, sample)
        self._next_index = index + 1
        return self.add_encoded(item)

    def add_encoded(self, item: PendingItem) -> list[dict[str, Any]]:
        """Append an item made by :meth:`encode`; returns the chunk entries this call closed."""
        if self._done:
            raise FormatError("add_item after done()")
        closed: list[dict[str, Any]] = []
        weight = item.dim if item.dim else 1
        size = self.account_bytes(item)
        if self._pending and self.over_limit(self._pending_bytes + size, self._pending_count + weight):
            closed.append(self._close())
            size = self.account_bytes(item)  # the closed chunk may have set a new bytes-per-row
        self._pending.append(item)
        self._pending_bytes += size
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

    def filename(self, chunk_index: int | None = None, *, whole_file: bool | None = None) -> str:
        """File name of chunk ``chunk_index`` (default: the next one); ``whole_file``: whether it is compressed as
        a whole (default: whether this writer compresses whole files)."""
        idx = self.chunk_index if chunk_index is None else chunk_index
        if whole_file is None:
            whole_file = self.compression_level == "chunk"
        if self.compression and whole_file:
            return f"chunk-{self.rank}-{idx}.{self.compression}.bin"
        return f"chunk-{self.rank}-{idx}.bin"

    def _classic(self, items: list[PendingItem]) -> list[bytes]:
        for it in items:
            if not it.exact:
                raise SchemaMismatchError(
                    f"{it.error}; this chunk keeps item bytes (its samples are not all Arrow rows), so every sample "
                    "must have the first sample's fields"
                )
        n = len(items)
        head = 4 * (n + 2)
        total = head + sum(len(it.data) for it in items)
        if total >= _U32_LIMIT:
            raise ChunkOverflowError(
                f"chunk {self.filename()!r} would be {total} bytes with {n} items; u32 offsets address < 4 GiB "
                "(lower chunk_bytes/chunk_size)"
            )
        offsets = [head]
        for it in items:
            offsets.append(offsets[-1] + len(it.data))
        return [struct.pack(f"<I{n + 1}I", n, *offsets), *(it.data for it in items)]

    def _close(self) -> dict[str, Any]:
        items = self._pending
        n = len(items)
        arrow_only = False
        if self._arrow_rows() and all(it.sample is not None for it in items):
            footer = arrow_footer([it.sample for it in items], self._ipc_codec())
            if footer is not None:
                parts = [slim_chunk(n, footer)]
                arrow_only = True
        if not arrow_only:
            parts = self._classic(items)
            # LitData 0.2.76 leaves such a chunk unframed when the schema is Arrow-like but the samples are no
            # rows (lists, tuples) while its index says "batch"/"sample", and then cannot read it: framed here
            if self._v076 and in_file(self.compression_level):
                assert self.compression is not None
                plain = b"".join(parts)
                if self.compression_level == "batch":
                    parts = [pack_framed_zstd(plain, self.compression, self._batch_size())]
                else:
                    parts = [pack_sample_zstd(plain, self.compression)]
        # LitData writes dim=None when the chunk's FIRST item has 0 tokens (its reader then crashes); the
        # token total is always written here when items carry a dim.
        dims = [it.dim for it in items]
        dim = sum(d or 0 for d in dims) if any(d is not None for d in dims) else None
        whole_file = bool(self.compression) and not arrow_only and self.compression_level == "chunk"
        name = self.filename(whole_file=whole_file)
        if self._encrypt_level == "chunk":  # the whole chunk is one ciphertext; chunk_bytes is its length
            parts = [self.encryption.encrypt(b"".join(parts))]
        total = sum(len(p) for p in parts)
        entry = {"chunk_bytes": total, "chunk_size": n, "dim": dim, "filename": name}
        if whole_file:  # one-shot: zstd streaming output differs from LitData's one-shot bytes
            parts = [compress_bytes(b"".join(parts), self.compression)]  # type: ignore[arg-type]
            self._file_compressed = True
        _write_atomic(os.path.join(self.out_dir, name), parts)  # piece by piece: no second copy in memory
        if arrow_only:
            self._ipc_used = self._ipc_codec() is not None
            self._row_bytes = total / n
        elif self._v076 and in_file(self.compression_level):
            self._framed = True
        self.chunks.append(entry)
        self.chunk_index += 1
        self._pending = []
        self._pending_bytes = 0
        self._pending_count = 0
        return entry


def _json_leaf(value: Any) -> Any:
    """``value`` marked as one ``json`` leaf (the ``json`` serializer encodes it)."""
    from streamscope.format.jsonleaf import JsonLeaf  # noqa: PLC0415

    return JsonLeaf(value)


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
