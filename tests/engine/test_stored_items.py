"""``engine.stored_items.StoredItems``: the index loaded once (fetched from the remote dataset when the folder lacks
it), items read by chunk and global index, the open chunk leased until the caller moves on, a copy holding none."""

from __future__ import annotations

import os
import pickle
import re
from typing import Any

import pytest

from streamscope._core.errors import DatasetIndexError, IndexNotFoundError
from streamscope.cache.leases import LEASE_MARK
from streamscope.engine.stored_items import StoredItems
from streamscope.format.item_loader import PyTreeLoader
from tests.engine._data import write_dataset

N, PER_CHUNK = 30, 10  # three chunks


def _leases(folder: str) -> list[str]:
    return sorted(n for n in os.listdir(folder) if LEASE_MARK in n)


def test_a_folder_without_index_has_none_and_requiring_it_names_the_folder(tmp_path: Any) -> None:
    items = StoredItems(str(tmp_path), None, None, None, None)
    assert items.load_index(None, None, PyTreeLoader(), None) is None
    with pytest.raises(IndexNotFoundError, match=re.escape(str(tmp_path))):
        items.require_index(None, None, PyTreeLoader(), None)


def test_a_remote_dataset_s_index_is_fetched_and_its_items_read_with_one_lease_at_a_time(tmp_path: Any) -> None:
    data = write_dataset(str(tmp_path / "data"), N, chunk_size=PER_CHUNK)
    folder = str(tmp_path / "cache")
    os.mkdir(folder)
    items = StoredItems(folder, "local:" + data, None, None, None)
    loader = PyTreeLoader()
    index = items.require_index(None, None, loader, None)
    assert os.path.exists(os.path.join(folder, "index.json"))  # fetched from the remote dataset
    assert index.intervals == [(0, 0, 10, 10), (10, 10, 20, 20), (20, 20, 30, 30)]
    assert items.read(index, 0, 3, loader, last=False)["index"] == 3
    assert _leases(folder) == [f"chunk-0-0.bin{LEASE_MARK}{os.getpid()}"]
    assert items.read(index, 1, 12, loader, last=False)["name"] == "s12"
    assert _leases(folder) == [f"chunk-0-1.bin{LEASE_MARK}{os.getpid()}"]  # moving on gave chunk 0's back
    copy = pickle.loads(pickle.dumps(items))  # a copy holds no lease: closing it keeps the original's
    assert copy.read(index, 2, 25, loader, last=False)["index"] == 25
    copy.close()
    assert _leases(folder) == [f"chunk-0-1.bin{LEASE_MARK}{os.getpid()}"]
    assert items.read(index, 2, 29, loader, last=True)["index"] == 29
    assert _leases(folder) == []  # the caller's last item closes its chunk


def test_an_item_outside_its_chunk_is_a_dataset_index_error(tmp_path: Any) -> None:
    data = write_dataset(str(tmp_path / "data"), N, chunk_size=PER_CHUNK)
    items = StoredItems(data, None, None, None, None)
    loader = PyTreeLoader()
    index = items.require_index(None, None, loader, None)
    with pytest.raises(DatasetIndexError, match="not in chunk 0"):
        items.read(index, 0, 15, loader, last=False)
    with pytest.raises(DatasetIndexError, match="outside the 3 chunks"):
        items.read(index, 3, 30, loader, last=False)
