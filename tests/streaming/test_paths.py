"""LitData import paths built by compat2: same objects as streamscope's own, same method signatures as LitData."""

from __future__ import annotations

import importlib

import pytest

from tests.compat.test_signatures import _differences
from tests.support.litdata_version import xfail_076

pytestmark = pytest.mark.interop

METHODS = {
    ("streaming.writer", "BinaryWriter"): [
        "add_item", "done", "merge", "get_chunk_filename", "get_config", "write_chunks_index", "__setitem__",
    ],
    ("streaming.reader", "BinaryReader"): ["read", "get_length", "get_chunk_intervals"],
    ("streaming.cache", "Cache"): ["done", "merge", "__getitem__", "__setitem__", "__len__", "get_chunk_intervals"],
    ("utilities.encryption", "FernetEncryption"): ["encrypt", "decrypt", "save", "load", "state_dict"],
    ("utilities.encryption", "RSAEncryption"): ["encrypt", "decrypt", "save", "load", "state_dict"],
    ("streaming.downloader", "Downloader"): [
        "download_file", "download_bytes", "download_chunk_from_index", "download_chunk_bytes_from_index",
        "download_fileobj",
    ],
}  # fmt: skip


_PENDING_076 = {
    ("BinaryWriter", "get_chunk_filename"): "0.2.76 writing: get_chunk_filename(file_compression) of framed chunks",
}


@pytest.mark.parametrize(
    ("where", "method"),
    [
        pytest.param(w, m, marks=[xfail_076(_PENDING_076[(w[1], m)])] if (w[1], m) in _PENDING_076 else [])
        for w, ms in METHODS.items()
        for m in ms
    ],
)
def test_method_signatures_match_litdata(where: tuple[str, str], method: str) -> None:
    module, name = where
    theirs = getattr(getattr(importlib.import_module(f"litdata.{module}"), name), method)
    ours = getattr(getattr(importlib.import_module(f"streamscope.{module}"), name), method)
    assert _differences(f"{name}.{method}", theirs, ours) == []


def test_exceptions_module_is_the_top_level_class() -> None:
    import litdata.exceptions

    import streamscope
    from streamscope.exceptions import ChunkWaitTimeoutError

    assert ChunkWaitTimeoutError is streamscope.ChunkWaitTimeoutError
    assert issubclass(ChunkWaitTimeoutError, FileNotFoundError)
    assert issubclass(litdata.exceptions.ChunkWaitTimeoutError, FileNotFoundError)
    err = ChunkWaitTimeoutError("/c/chunk-0-1.bin", 3.0)
    assert (err.path, err.waited_s) == ("/c/chunk-0-1.bin", 3.0)


def test_merge_datasets_lives_in_processing() -> None:
    import streamscope
    from streamscope.api.merge import merge_datasets as api_merge
    from streamscope.processing.functions import merge_datasets as fn_merge
    from streamscope.processing.merge import merge_datasets

    assert merge_datasets is api_merge is fn_merge is streamscope.merge_datasets
    assert merge_datasets.__module__ == "streamscope.processing.merge"


def test_encryption_level_constants() -> None:
    from litdata.utilities.encryption import EncryptionLevel as Theirs

    from streamscope.utilities.encryption import EncryptionLevel

    assert (EncryptionLevel.SAMPLE, EncryptionLevel.CHUNK) == (Theirs.SAMPLE, Theirs.CHUNK)
