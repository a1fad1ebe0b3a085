"""Samples added by index in any order, written as chunks of consecutive indexes: LitData's ``BinaryWriter`` rule
(``add_item(index, sample)`` from several DataLoader workers or shuffled loops).

Each sample is encoded as it comes and held until the consecutive run from the lowest index held fills a chunk;
that chunk is then written by the :class:`~streamscope.format.writer.ChunkWriter` (at most one chunk per call, as
LitData: the item that crossed the limit waits for the next call, so a lower index still missing can come before
a chunk of it is written). Differences from LitData 0.2.68: an index below the chunks already written, or a gap
left at :meth:`OrderedChunks.flush`, raises :class:`~streamscope._core.errors.FormatError` naming the index
(LitData writes the late index into a later chunk, and fails an ``assert`` on a gap); the indexes still held at
the end are split at the chunk limit (LitData writes them as one chunk, over the limit).
"""

from __future__ import annotations

from typing import Any

from streamscope._core.errors import FormatError
from streamscope.format.writer import ChunkWriter, PendingItem

__all__ = ["OrderedChunks"]


class OrderedChunks:
    """The samples not yet in a chunk, by index, and the run being scanned for a full chunk."""

    def __init__(self) -> None:
        self._held: dict[int, PendingItem] = {}
        self._run: list[int] = []  # [first index, next index to scan, bytes, count] of the run being scanned
        self._written_below: int | None = None  # every index below this one is in a chunk already

    def add(self, writer: ChunkWriter, index: int, sample: Any) -> dict[str, Any] | None:
        """Encode ``sample`` at ``index``; the index entry of the chunk this wrote, if it wrote one.

        Raises:
            ValueError: ``index`` was added already (LitData's message).
            FormatError: ``index`` is below a chunk already written, or the sample does not fit the first one.
        """
        if index in self._held:
            raise ValueError(f"The provided index {index} already exists in the cache.")
        if self._written_below is not None and index < self._written_below:
            raise FormatError(
                f"sample index {index} came after the chunks holding every index below {self._written_below} were "
                "written (a chunk holds consecutive indexes; add each index before the run it belongs to fills a chunk)"
            )
        self._held[index] = writer.encode(index, sample)
        if self._run and index < self._run[0]:
            self._run = []  # a lower index: the run starts there now
        end = self._full_run(writer)
        return None if end is None else self._write_run(writer, end)

    def flush(self, writer: ChunkWriter) -> list[dict[str, Any]]:
        """Hand the samples still held to ``writer``, in index order (they must be consecutive); the entries of the
        chunks this closed.

        Raises:
            FormatError: an index between two held ones was never added.
        """
        if not self._held:
            return []
        indexes = sorted(self._held)
        gaps = [i + 1 for i, j in zip(indexes, indexes[1:]) if j != i + 1]
        if gaps:
            raise FormatError(
                f"done(): index {gaps[0]} was never added, but indexes after it were ({len(self._held)} samples "
                "held); a chunk holds consecutive indexes"
            )
        closed: list[dict[str, Any]] = []
        for i in indexes:
            closed += writer.add_encoded(self._held.pop(i))
        self._run = []
        return closed

    def _full_run(self, writer: ChunkWriter) -> int | None:
        """The end (exclusive) of the chunk the consecutive run from the lowest held index fills, if it does."""
        if not self._held:
            return None
        if not self._run:
            first = min(self._held)
            self._run = [first, first, 0, 0]
        first, nxt, nbytes, count = self._run
        while nxt in self._held:
            item = self._held[nxt]
            nbytes += writer.account_bytes(item)
            count += item.dim if item.dim else 1
            nxt += 1
            if writer.over_limit(nbytes, count):
                self._run = []
                return max(nxt - 1, first + 1)  # without the item that crossed the limit, unless it is alone
        self._run = [first, nxt, nbytes, count]
        return None

    def _write_run(self, writer: ChunkWriter, end: int) -> dict[str, Any]:
        first = min(self._held)
        closed: list[dict[str, Any]] = []
        for i in range(first, end):
            closed += writer.add_encoded(self._held.pop(i))
        closed += writer.close_chunk()
        self._written_below = end
        return closed[-1]
