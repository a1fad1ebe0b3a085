"""Keyed access: which sample of a dataset has a key (``key_fn`` of ``optimize``/``build_keys_index``).

The keys/ sidecar maps a key to ``(global index, chunk, offset)`` over the index's chunks; this module turns
that into ``(chunk, item)`` of the chunks the dataset reads (a ``dir/pattern.parquet`` input reads a subset of
them: see :data:`~streamscope.engine.dataset_index.KeyLayout`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from streamscope._core.errors import DatasetIndexError, KeyIndexNotFoundError, SampleKeyError
from streamscope.engine.dataset_index import KeyLayout
from streamscope.engine.key_shards import open_key_shards
from streamscope.events import kinds

__all__ = ["KeyedAccess"]


class KeyedAccess:
    """Locate samples by key in one dataset; the sidecar is opened at the first lookup.

    Args:
        input_dir: the dataset's path or URL (also named in errors).
        keys_section: the ``keys`` entry of its index.json (None: look for a sidecar without one).
        chunk_sizes: the items of each chunk the dataset reads.
        layout: the whole index's chunk sizes and the kept positions, for a ``.parquet`` pattern input.
        pattern: that pattern (named in errors).
        open_store: the dataset's store, for a remote dataset (None: a local folder).
    """

    def __init__(
        self,
        input_dir: str,
        keys_section: Any,
        chunk_sizes: Sequence[int],
        layout: KeyLayout | None = None,
        pattern: str | None = None,
        open_store: Callable[[], Any] | None = None,
    ) -> None:
        self.input_dir = input_dir
        self._keys_section = keys_section
        self._layout = layout
        self._pattern = pattern
        self._open_store = open_store
        sizes = layout[0] if layout is not None else list(chunk_sizes)
        self._sizes = [int(s) for s in sizes]
        self._starts = np.concatenate([[0], np.cumsum(np.asarray(self._sizes, dtype=np.int64))])
        self._shards: Any = None

    def _open(self, key: Any) -> Any:
        if self._shards is None:
            index = {"keys": self._keys_section}
            if self._open_store is not None:
                shards = open_key_shards(self.input_dir, index, store=self._open_store(), what=self.input_dir)
            else:
                shards = open_key_shards(self.input_dir, index)
            if shards is None:
                raise KeyIndexNotFoundError(
                    f"keyed access needs a keys/ index next to {self.input_dir!r} (build_keys_index or "
                    f"optimize(key_fn=...)); none found for key={key!r}"
                )
            self._shards = shards
        return self._shards

    def locate(self, key: Any) -> tuple[int, int]:
        """``(chunk, item)`` of the sample with ``key``, chunk among those the dataset reads.

        Raises:
            KeyIndexNotFoundError: the dataset has no ``keys/`` sidecar (a KeyError).
            SampleKeyError: no sample has this key, or the input pattern leaves its chunk out (a KeyError).
            DatasetIndexError: the sidecar points outside the dataset (stale).
        """
        shards = self._open(key)
        with kinds.key_lookup(key=str(key)[:64]):
            found = shards.resolve(key)
        if found is None:
            raise SampleKeyError(f"no sample of {self.input_dir!r} has key {key!r}")
        gidx, chunk, offset = found
        sizes, starts = self._sizes, self._starts
        if chunk < 0:  # a sidecar without chunk columns: locate the global index in chunk order
            chunk = int(np.searchsorted(starts, gidx, side="right")) - 1
            offset = gidx
        if not (0 <= chunk < len(sizes) and 0 <= offset - int(starts[chunk]) < sizes[chunk]):
            raise DatasetIndexError(
                f"key {key!r} points at sample {gidx} (chunk {chunk}, offset {offset}) outside {self.input_dir!r}: "
                "the keys/ index is stale, rebuild it with build_keys_index(..., overwrite=True)"
            )
        item = offset - int(starts[chunk])
        if self._layout is not None:  # a `dir/pattern.parquet` input reads a subset of the index's chunks
            if chunk not in self._layout[1]:
                raise SampleKeyError(
                    f"key {key!r} is in chunk {chunk} of {self.input_dir!r}, which the input pattern "
                    f"{self._pattern!r} leaves out"
                )
            chunk = self._layout[1].index(chunk)
        return chunk, item
