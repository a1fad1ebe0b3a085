"""LitData's on-disk chunk format, byte for byte: pure bytes <-> samples, no I/O beyond file objects.

See ``README.md`` in this package for the format with a worked example.
"""

from __future__ import annotations

from streamscope.format.chunk import ChunkFile, decompress_file, open_chunk, open_chunk_bytes, parse_header
from streamscope.format.compression import VALID_COMPRESSIONS, parse_compression, uncompressed_name
from streamscope.format.index import (
    dumps_index,
    load_index,
    merge_partial_indexes,
    natural_key,
    write_index,
    write_partial_index,
)
from streamscope.format.item_loader import BaseItemLoader, PyTreeLoader, TokensLoader, loader_for_config
from streamscope.format.pytree import TreeSpec, tree_flatten, tree_unflatten, treespec_dumps, treespec_loads
from streamscope.format.serializers import Serializer, default_serializers
from streamscope.format.writer import ChunkWriter

__all__ = [
    "VALID_COMPRESSIONS",
    "BaseItemLoader",
    "ChunkFile",
    "ChunkWriter",
    "PyTreeLoader",
    "Serializer",
    "TokensLoader",
    "TreeSpec",
    "decompress_file",
    "default_serializers",
    "dumps_index",
    "load_index",
    "loader_for_config",
    "merge_partial_indexes",
    "natural_key",
    "open_chunk",
    "open_chunk_bytes",
    "parse_compression",
    "parse_header",
    "tree_flatten",
    "tree_unflatten",
    "treespec_dumps",
    "treespec_loads",
    "uncompressed_name",
    "write_index",
    "write_partial_index",
]
