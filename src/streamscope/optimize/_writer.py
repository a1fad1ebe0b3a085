"""The chunk writer optimize uses: the format layer's ``ChunkWriter`` (one place to swap it)."""

from __future__ import annotations

from streamscope.format.writer import ChunkWriter

__all__ = ["ChunkWriter"]
