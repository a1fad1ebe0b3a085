"""Async twins of the blocking store methods, for callers that drive downloads from an event loop.

Each twin runs its blocking method in the loop's default thread pool (``asyncio.to_thread``), so it has the
same retries, length checks, tracing and fork-safety as the blocking call, and never blocks the loop.
"""

from __future__ import annotations

import asyncio
from typing import Any

__all__ = ["AsyncTwins"]


class AsyncTwins:
    """Mixin adding ``get_async``, ``get_range_async``, ``head_async`` and ``download_file_async``."""

    async def get_async(self: Any, key: str) -> bytes:
        """Async :meth:`get`."""
        return await asyncio.to_thread(self.get, key)

    async def get_range_async(self: Any, key: str, start: int, end: int) -> bytes:
        """Async :meth:`get_range`."""
        return await asyncio.to_thread(self.get_range, key, start, end)

    async def head_async(self: Any, key: str) -> Any:
        """Async :meth:`head`."""
        return await asyncio.to_thread(self.head, key)

    async def download_file_async(self: Any, key: str, dest: str) -> int:
        """Async :meth:`download_file`."""
        return await asyncio.to_thread(self.download_file, key, dest)
