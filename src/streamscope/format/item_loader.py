"""Item loaders: how one sample is laid out inside a chunk, and how it is read back.

``PyTreeLoader`` (the default) stores each sample as ``u32 size[L]`` followed by its ``L`` leaf encodings.
``TokensLoader`` stores a single 1-D token leaf raw (no size header) and reads a chunk as one token stream cut
into ``block_size`` blocks. Loaders are pure bytes <-> samples; files are opened by :mod:`.chunk`.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any

import numpy as np

from streamscope._core.errors import FormatError, MissingDependencyError
from streamscope.format import dtypes
from streamscope.format.chunk import ChunkFile
from streamscope.format.loader_base import BaseItemLoader
from streamscope.format.parquet import ParquetLoader
from streamscope.format.pytree import TreeSpec, compile_unflatten, treespec_loads
from streamscope.format.serializers import Serializer

__all__ = ["BaseItemLoader", "PyTreeLoader", "TokensLoader", "loader_for_config"]


class PyTreeLoader(BaseItemLoader):
    """Default loader: ``u32 size[L]`` then the ``L`` leaves, rebuilt with ``data_spec``."""

    name = "PyTreeLoader"

    def __init__(self, batch_decode: Any = "auto") -> None:
        super().__init__()
        # LitData 0.2.76: how many items it decodes at once. Accepted: the samples do not depend on it.
        self.batch_decode = batch_decode

    def encode_data(self, data: list[bytes], sizes: list[int], flattened: list[Any]) -> tuple[bytes, int | None]:
        """``u32 sizes`` (LE) followed by the leaf bytes; ``dim`` is None."""
        return struct.pack(f"<{len(sizes)}I", *sizes) + b"".join(data), None

    def setup(
        self, config: dict[str, Any], serializers: dict[str, Serializer] | None = None, chunks: list[dict] | None = None
    ) -> None:
        """Precompute the per-leaf decoders and the unflatten function for this config."""
        super().setup(config, serializers, chunks)
        n = len(self._data_format)
        self._sizes = struct.Struct(f"<{n}I")
        self._head = 4 * n
        self._decoders = tuple(s.deserialize for s in self._leaf_serializers)
        spec = config.get("data_spec")
        if isinstance(spec, str):
            spec = treespec_loads(spec)
        if spec is None:
            self._unflatten = (lambda leaves: leaves[0]) if n == 1 else list
        elif isinstance(spec, TreeSpec):
            if spec.num_leaves != n:
                raise FormatError(f"data_spec has {spec.num_leaves} leaves but data_format lists {n}")
            self._unflatten = compile_unflatten(spec)
        else:
            raise FormatError(f"data_spec must be a string or null, got {type(spec).__name__}")
        self._spec = spec

    def decode(self, view: memoryview) -> Any:
        """One sample from the bytes of its item.

        Raises:
            FormatError: the item's bytes do not fit its size header or a leaf cannot be decoded.
        """
        try:
            sizes = self._sizes.unpack_from(view, 0)
        except struct.error:
            raise FormatError(f"item of {len(view)} bytes is shorter than its {self._head}-byte size header") from None
        pos = self._head
        leaves = []
        try:
            for size, dec in zip(sizes, self._decoders):
                end = pos + size
                leaves.append(dec(view[pos:end]))
                pos = end
        except (FormatError, MissingDependencyError):  # (a missing package is not bad bytes: its own error)
            raise
        except Exception as exc:  # noqa: BLE001 (any decoder failure on bad bytes becomes one clear error)
            raise self._leaf_error(len(leaves), len(view), exc) from exc
        if pos != len(view):
            raise FormatError(f"item leaf sizes add up to {pos} bytes but the item has {len(view)}")
        return self._unflatten(leaves)

    def _leaf_error(self, j: int, nbytes: int, exc: BaseException) -> FormatError:
        return FormatError(
            f"leaf {j} (data_format {self._data_format[j]!r}) of an item of {nbytes} bytes cannot be decoded: "
            f"{type(exc).__name__}: {exc}"
        )

    @property
    def _mds(self) -> bool:
        """A MosaicML MDS dataset (an adapted index over MDS shards, MDS item layout)."""
        return bool(self._config) and self._config.get("format") == "mds"  # type: ignore[union-attr]

    @property
    def batch_layout(self) -> str | None:
        """``"tree"``; MDS items are decoded sample by sample."""
        return None if self._mds else "tree"

    def read_sample(self, file: Any, item: int, chunk: dict[str, Any]) -> Any:
        """Sample ``item`` of ``file``: an MDS item by its column sizes, else as the chunk's kind decodes it."""
        if self._mds:
            return self.decode_mds(file.item_view(item), chunk.get("column_sizes") or [])
        return file.sample(item, self)

    def read_samples(self, file: Any, items: Any) -> list[Any] | None:
        """Samples ``items`` at once (None for MDS: one by one)."""
        return None if self._mds else super().read_samples(file, items)

    def decode_mds(self, view: memoryview, column_sizes: list[int | None]) -> Any:
        """One sample of a MosaicML MDS shard (fixed-size columns, u32 length prefixes for the others)."""
        pos = 0
        sizes = []
        for size in column_sizes:
            if size:
                sizes.append(size)
            else:
                (size,) = struct.unpack_from("<I", view, pos)
                sizes.append(size)
                pos += 4
        leaves = []
        try:
            for size, dec in zip(sizes, self._decoders):
                leaves.append(dec(view[pos : pos + size]))
                pos += size
        except FormatError:
            raise
        except Exception as exc:  # noqa: BLE001
            raise self._leaf_error(len(leaves), len(view), exc) from exc
        return self._unflatten(leaves)


class TokensLoader(BaseItemLoader):
    """Token-stream loader: each sample is one 1-D array of tokens, read back in ``block_size`` blocks."""

    name = "TokensLoader"

    def __init__(self, block_size: int | None = None) -> None:
        super().__init__()
        self._block_size = block_size
        self._dtype: Any = None
        self._kind = ""

    @property
    def block_size(self) -> int | None:
        """Tokens per block."""
        return self._block_size

    def encode_data(self, data: list[bytes], sizes: list[int], flattened: list[Any]) -> tuple[bytes, int | None]:
        """The raw token bytes (no size header); ``dim`` = token count."""
        if len(flattened) != 1 or getattr(flattened[0], "ndim", None) != 1:
            raise FormatError(
                "TokensLoader samples must be a single 1-D tensor or ndarray, got "
                f"{len(flattened)} leaves of types {[type(x).__name__ for x in flattened]}"
            )
        return data[0], int(flattened[0].shape[0])

    def state_dict(self) -> dict[str, Any]:
        """``{"block_size": N}``."""
        if not self._block_size:
            raise FormatError("TokensLoader needs block_size before it is used")
        return {"block_size": self._block_size}

    def setup(
        self, config: dict[str, Any], serializers: dict[str, Serializer] | None = None, chunks: list[dict] | None = None
    ) -> None:
        """Read the token dtype from ``data_format`` (``no_header_tensor:{d}`` / ``no_header_numpy:{d}``)."""
        super().setup(config, serializers, chunks)
        fmts = self._data_format
        kind, _, idx = (fmts[0] if len(fmts) == 1 else "").partition(":")
        if kind not in ("no_header_tensor", "no_header_numpy") or not idx.isdigit():
            raise FormatError(f"TokensLoader needs one no_header_tensor/no_header_numpy leaf, got data_format {fmts}")
        self._kind = kind
        if kind == "no_header_tensor":
            self._torch_dtype = dtypes.torch_dtype(int(idx))
            npdt = dtypes.TORCH_INDEX_NUMPY[int(idx)]
            self._dtype = npdt if npdt is not None else np.dtype(np.int16)  # bfloat16: same-size carrier
        else:
            self._dtype = dtypes.numpy_dtype(int(idx))
        if chunks is not None and chunks and all(c.get("dim") is None for c in chunks):
            raise FormatError("TokensLoader needs chunk entries with `dim` (token counts); this index has none")

    @property
    def itemsize(self) -> int:
        """Bytes per token."""
        return int(self._dtype.itemsize)

    def blocks_in_chunk(self, entry: dict[str, Any]) -> int:
        """Whole blocks in a chunk (its tail tokens are dropped, like LitData)."""
        if not self._block_size:
            raise FormatError("TokensLoader needs block_size before it is used")
        return int(entry["dim"]) // self._block_size

    def decode(self, view: memoryview) -> Any:
        """One stored sequence (a whole item, not a block)."""
        return self._wrap(np.frombuffer(view, dtype=self._dtype).copy())

    def _wrap(self, arr: np.ndarray) -> Any:
        if self._kind == "no_header_tensor":
            torch = dtypes.torch_loaded() or dtypes._torch()
            t = torch.from_numpy(arr)
            return t.view(self._torch_dtype) if t.dtype != self._torch_dtype else t
        return arr

    def read_block(self, chunk: ChunkFile, block: int) -> Any:
        """Block ``block`` (local to ``chunk``): a copy of ``block_size`` tokens of the chunk's token stream."""
        if not self._block_size:
            raise FormatError("TokensLoader needs block_size before it is used")
        tokens = chunk.data_view()
        nbytes = self._block_size * self.itemsize
        start = block * nbytes
        if block < 0 or start + nbytes > len(tokens):
            raise FormatError(
                f"block {block} of {self._block_size} tokens is outside chunk {chunk.path!r} "
                f"({len(tokens) // self.itemsize} tokens)"
            )
        return self._wrap(np.frombuffer(tokens, dtype=self._dtype, count=self._block_size, offset=start).copy())

    def decode_many(self, chunk: ChunkFile, indices: Sequence[int]) -> list[Any]:
        """Blocks ``indices`` of ``chunk``."""
        return [self.read_block(chunk, i) for i in indices]

    @property
    def batch_layout(self) -> str | None:
        """``"tokens"``: a batch is a run of blocks of the token stream."""
        return "tokens"

    def read_sample(self, file: Any, item: int, chunk: dict[str, Any]) -> Any:
        """Block ``item`` of the chunk's token stream."""
        return self.read_block(file, item)

    def read_samples(self, file: Any, items: Any) -> list[Any] | None:
        """None: blocks are decoded one by one (or by the tokens batch decoder)."""
        return None


def loader_for_config(config: dict[str, Any], block_size: int | None = None) -> BaseItemLoader:
    """A fresh loader for an index ``config`` (by its ``item_loader`` name)."""
    name = config.get("item_loader")
    if name is None:  # legacy index: a lone no_header_tensor leaf means tokens
        fmts = config.get("data_format") or []
        name = "TokensLoader" if len(fmts) == 1 and str(fmts[0]).startswith("no_header_tensor") else "PyTreeLoader"
    if name == "PyTreeLoader":
        return PyTreeLoader()
    if name == "TokensLoader":
        return TokensLoader(block_size)
    if name == "ParquetLoader":
        return ParquetLoader()
    raise FormatError(f"item_loader {name!r} is not supported here; known: PyTreeLoader, TokensLoader, ParquetLoader")
