"""Bad input gives a clear, specific error: schema drift, overflow, corrupt chunks, bad names, bad indexes."""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path

import numpy as np
import pytest
import torch

from streamscope._core.errors import ChunkOverflowError, CorruptChunkError, FormatError, SchemaMismatchError
from streamscope.format import (
    ChunkFile,
    ChunkWriter,
    PyTreeLoader,
    TokensLoader,
    load_index,
    merge_partial_indexes,
    write_partial_index,
)
from streamscope.format import writer as writer_mod
from streamscope.format.chunk import decompress_file


def _writer(tmp_path, **kw):
    kw.setdefault("chunk_size", 10)
    return ChunkWriter(str(tmp_path), **kw)


@pytest.mark.parametrize(
    ("first", "second", "path"),
    [
        ({"x": 1, "label": 2}, {"x": 1, "label": 2.5}, "['label']"),  # float into int
        ({"x": 1.5, "label": 2}, {"x": 1, "label": 2}, "['x']"),  # int into float
        ({"x": 1, "label": 2}, {"x": 1, "label": 2, "extra": 3}, "<root>"),  # extra leaf
        ({"x": 1, "label": 2}, {"label": 2, "x": 1}, "<root>"),  # reordered keys
        ({"x": 1, "label": "a"}, {"x": 1, "label": b"a"}, "['label']"),  # str -> bytes
        ({"x": [1, 2]}, {"x": [1, 2, 3]}, "['x']"),  # list grew
        ({"x": (1, {"y": 2})}, {"x": (1, {"y": [2]})}, "['x'][1]['y']"),  # leaf became a container
        ({"t": np.zeros(3, np.float32)}, {"t": np.zeros(3, np.float64)}, "['t']"),  # 1-D dtype changed
        ({"t": torch.zeros(2, 2)}, {"t": torch.zeros(4)}, "['t']"),  # tensor ndim 2 -> 1
        ({"t": torch.zeros(4, dtype=torch.int32)}, {"t": torch.zeros(4, dtype=torch.int64)}, "['t']"),
        ({"t": np.zeros((2, 2))}, {"t": np.zeros(4)}, "['t']"),  # numpy ndim 2 -> 1
        ({"b": True}, {"b": 1}, "['b']"),  # bool field gets an int
        ({"i": 1}, {"i": True}, "['i']"),  # int field gets a bool
    ],
)
def test_schema_mismatch_names_sample_and_field(tmp_path, first, second, path):
    w = _writer(tmp_path)
    w.add_item(0, first)
    w.add_item(1, first)
    with pytest.raises(SchemaMismatchError) as info:
        w.add_item(2, second)
    msg = str(info.value)
    assert "sample 2" in msg
    assert f"field {path}" in msg


def test_schema_mismatch_leaves_no_partial_chunk(tmp_path):
    w = _writer(tmp_path, chunk_size=2)
    for i in range(3):
        w.add_item(i, {"a": i})
    with pytest.raises(SchemaMismatchError):
        w.add_item(3, {"a": "x"})
    assert sorted(os.listdir(tmp_path)) == ["chunk-0-0.bin"]  # only the closed chunk, no tmp files


def test_pickle_field_accepts_any_type(tmp_path):
    w = _writer(tmp_path)
    w.add_item(0, {"p": None})
    w.add_item(1, {"p": {1, 2}})  # pickle is self-describing: no corruption possible
    assert w.config["data_format"] == ["pickle"]


def test_int_overflow_names_field(tmp_path):
    w = _writer(tmp_path)
    with pytest.raises(FormatError, match=r"sample 0 field \['big'\].*int64"):
        w.add_item(0, {"big": 2**70})


def test_non_consecutive_index(tmp_path):
    w = _writer(tmp_path)
    w.add_item(0, 1)
    with pytest.raises(FormatError, match="not consecutive"):
        w.add_item(5, 1)


def test_chunk_overflow_refused(tmp_path, monkeypatch):
    # The real limit is 4 GiB (u32 offsets); lower it so the refusal path runs on test-sized data.
    monkeypatch.setattr(writer_mod, "_U32_LIMIT", 1000)
    w = _writer(tmp_path, chunk_size=100)
    for i in range(3):
        w.add_item(i, b"x" * 300)
    w.add_item(3, b"x" * 300)
    with pytest.raises(ChunkOverflowError, match="chunk-0-0.bin"):
        w.done()
    assert os.listdir(tmp_path) == []


def test_overflow_limit_is_u32():
    assert writer_mod._U32_LIMIT == 2**32


@pytest.mark.parametrize("name", ["gzip", "zstd:0", "zstd:23", "zstd:04", "ZSTD", "lz4"])
def test_unknown_compression_lists_valid_names(tmp_path, name):
    # LitData's sentence first (code matching it keeps working), then what is valid
    with pytest.raises(FormatError, match=r"^The provided compression .* isn't available in \['zstd'\]") as info:
        _writer(tmp_path, compression=name)
    assert "valid are None, 'zstd' (level 4) and 'zstd:1'..'zstd:22'" in str(info.value)


def test_chunk_size_and_bytes_exclusive(tmp_path):
    with pytest.raises(FormatError):
        ChunkWriter(str(tmp_path))
    with pytest.raises(FormatError):
        ChunkWriter(str(tmp_path), chunk_size=1, chunk_bytes=10)


def _good_chunk(tmp_path) -> str:
    w = _writer(tmp_path)
    for i in range(4):
        w.add_item(i, {"i": i, "s": "abc" * i})
    w.done()
    return str(tmp_path / "chunk-0-0.bin")


def test_empty_chunk_file(tmp_path):
    p = tmp_path / "chunk-0-0.bin"
    p.write_bytes(b"")
    with pytest.raises(CorruptChunkError, match=r"chunk-0-0\.bin.*empty"):
        ChunkFile(str(p))


@pytest.mark.parametrize("keep", [2, 10, 30, 60])
def test_truncated_chunk(tmp_path, keep):
    path = _good_chunk(tmp_path)
    data = Path(path).read_bytes()
    assert keep < len(data)
    with open(path, "wb") as f:
        f.write(data[:keep])
    with pytest.raises(CorruptChunkError, match=r"chunk-0-0\.bin.*offset"):
        ChunkFile(path)


def test_header_claims_more_items_than_fit(tmp_path):
    p = tmp_path / "c.bin"
    p.write_bytes(struct.pack("<I", 1_000_000) + b"\0" * 64)
    with pytest.raises(CorruptChunkError, match=r"1000000 items.*truncated"):
        ChunkFile(str(p))


def test_offsets_not_monotonic(tmp_path):
    path = _good_chunk(tmp_path)
    data = bytearray(Path(path).read_bytes())
    o1, o2 = struct.unpack_from("<II", data, 8)
    struct.pack_into("<II", data, 8, o2, o1)  # swap the starts of items 1 and 2
    Path(path).write_bytes(bytes(data))
    with pytest.raises(CorruptChunkError, match="not monotonic"):
        ChunkFile(path)


def test_expected_items_mismatch(tmp_path):
    path = _good_chunk(tmp_path)
    with pytest.raises(CorruptChunkError, match="chunk_size=5"):
        ChunkFile(path, expected_items=5)


def test_trailing_bytes_rejected_unless_allowed(tmp_path):
    path = _good_chunk(tmp_path)
    with open(path, "ab") as f:
        f.write(b"junk")
    with pytest.raises(CorruptChunkError, match="items end at offset"):
        ChunkFile(path)
    with ChunkFile(path, allow_trailing=True) as cf:
        assert cf.num_items == 4


def test_item_index_bounds(tmp_path):
    with ChunkFile(_good_chunk(tmp_path)) as cf:
        with pytest.raises(IndexError):
            cf.item_view(4)
        with pytest.raises(IndexError):
            cf.item_view(-1)


def test_item_bytes_inconsistent_with_size_header(tmp_path):
    w = _writer(tmp_path)
    w.add_item(0, {"i": 1, "s": "abc"})
    w.done()
    loader = PyTreeLoader()
    loader.setup(w.config)
    with ChunkFile(str(tmp_path / "chunk-0-0.bin")) as cf:
        view = cf.item_view(0)
        with pytest.raises(FormatError, match="add up to"):
            loader.decode(view[:-1])
        with pytest.raises(FormatError, match="shorter than its 8-byte size header"):
            loader.decode(view[:5])


def test_corrupt_zstd(tmp_path):
    p = tmp_path / "chunk-0-0.zstd.bin"
    p.write_bytes(b"\x28\xb5\x2f\xfd garbage")
    with pytest.raises(CorruptChunkError, match="not valid zstd"):
        decompress_file(str(p), str(tmp_path / "chunk-0-0.bin"), "zstd")
    assert not (tmp_path / "chunk-0-0.bin").exists()
    assert os.listdir(tmp_path) == ["chunk-0-0.zstd.bin"]


def test_loader_name_mismatch():
    cfg = {"data_format": ["no_header_tensor:18"], "data_spec": None, "item_loader": "TokensLoader"}
    with pytest.raises(FormatError, match="TokensLoader.*PyTreeLoader"):
        PyTreeLoader().setup(cfg)


def test_tokens_loader_rejects_non_token_formats():
    with pytest.raises(FormatError, match="no_header_tensor/no_header_numpy"):
        TokensLoader(4).setup({"data_format": ["int"], "item_loader": "TokensLoader"})


def test_tokens_writer_rejects_non_1d(tmp_path):
    w = _writer(tmp_path, item_loader=TokensLoader())
    with pytest.raises(FormatError, match="single 1-D"):
        w.add_item(0, {"a": np.zeros(3), "b": np.zeros(3)})


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("{not json", "not valid JSON"),
        ("[]", "JSON object"),
        ('{"config": {}}', "no `chunks` list"),
        ('{"chunks": []}', "no `config` object"),
        ('{"chunks": [], "config": null}', "No chunks found in the .* the dataset is empty"),
        ('{"chunks": [{"chunk_size": 1, "filename": "a.bin"}], "config": {}}', r"chunks\[0\] lacks `chunk_bytes`"),
        ('{"chunks": [{"chunk_bytes": -1, "chunk_size": 1, "filename": "a"}], "config": {}}', "non-negative"),
        ('{"chunks": [{"chunk_bytes": 1, "chunk_size": 1, "filename": "../x"}], "config": {}}', "bad filename"),
    ],
)
def test_bad_index_names_file(tmp_path, text, match):
    p = tmp_path / "index.json"
    p.write_text(text)
    with pytest.raises(FormatError, match=match) as info:
        load_index(str(p))
    assert str(p) in str(info.value)


def test_merge_config_mismatch_names_files(tmp_path):
    cfg = {"chunk_bytes": None, "chunk_size": 2, "compression": None, "data_format": ["int"]}
    write_partial_index(str(tmp_path), 0, [{"chunk_bytes": 1, "chunk_size": 1, "dim": None, "filename": "a"}], cfg)
    write_partial_index(
        str(tmp_path), 1, [{"chunk_bytes": 1, "chunk_size": 1, "dim": None, "filename": "b"}], {**cfg, "chunk_size": 3}
    )
    with pytest.raises(FormatError, match=r"1\.index\.json.*0\.index\.json.*chunk_size"):
        merge_partial_indexes(str(tmp_path))


def test_merge_nothing(tmp_path):
    with pytest.raises(FormatError, match="no partial index"):
        merge_partial_indexes(str(tmp_path))


def test_unknown_data_spec_node():
    bad = json.dumps([1, {"type": "my.Thing", "context": None, "children_spec": [{}]}])
    with pytest.raises(FormatError, match="unknown node type 'my.Thing'"):
        PyTreeLoader().setup({"data_format": ["int"], "data_spec": bad})


def test_open_chunk_classic_is_chunkfile(tmp_path):
    from streamscope.format import open_chunk

    with open_chunk(_good_chunk(tmp_path), {"compression": None}, 4) as chunk:
        assert isinstance(chunk, ChunkFile) and chunk.kind == "classic"
    empty = tmp_path / "e.bin"
    empty.write_bytes(b"")
    with pytest.raises(CorruptChunkError, match="empty"):
        open_chunk(str(empty))


def test_decompressed_size_checked(tmp_path):
    w = _writer(tmp_path, compression="zstd:3")
    w.add_item(0, {"a": 1})
    w.done()
    src = str(tmp_path / "chunk-0-0.zstd:3.bin")
    with pytest.raises(CorruptChunkError, match="chunk_bytes=99"):
        decompress_file(src, str(tmp_path / "chunk-0-0.bin"), "zstd:3", expected_bytes=99)
    assert not (tmp_path / "chunk-0-0.bin").exists()
    decompress_file(src, str(tmp_path / "chunk-0-0.bin"), "zstd:3", expected_bytes=w.chunks[0]["chunk_bytes"])
    assert (tmp_path / "chunk-0-0.bin").stat().st_size == w.chunks[0]["chunk_bytes"]


def test_bad_leaf_bytes_give_format_error(tmp_path):
    w = _writer(tmp_path)
    w.add_item(0, {"s": "ok", "p": {1}})
    w.done()
    loader = PyTreeLoader()
    loader.setup(w.config)
    with ChunkFile(str(tmp_path / "chunk-0-0.bin")) as cf:
        good = bytearray(cf.item_bytes(0))
    good[8] = 0xFF  # first byte of the str leaf: invalid UTF-8
    with pytest.raises(FormatError, match=r"leaf 0 \(data_format 'str'\)"):
        loader.decode(memoryview(bytes(good)))
    good[8] = ord("o")
    good[-1] = 0xFF  # the pickle STOP opcode becomes an invalid opcode
    with pytest.raises(FormatError, match=r"leaf 1 \(data_format 'pickle'\)"):
        loader.decode(memoryview(bytes(good)))


def test_compressed_chunk_opened_raw_gets_a_hint(tmp_path):
    w = _writer(tmp_path, compression="zstd")
    for i in range(3):
        w.add_item(i, {"a": i})
    w.done()
    with pytest.raises(CorruptChunkError, match="zstd magic: decompress it first"):
        ChunkFile(str(tmp_path / "chunk-0-0.zstd.bin"))


def test_chunk_bytes_strings_are_parsed_by_the_one_size_parser():
    from streamscope.format.writer import convert_chunk_bytes

    assert convert_chunk_bytes("64MB") == 64_000_000 and convert_chunk_bytes("1GiB") == 2**30
    assert convert_chunk_bytes(None) is None and convert_chunk_bytes(1234) == 1234
    for bad in ("64 parsecs", "-5MB", "MB"):
        with pytest.raises(FormatError, match="chunk_bytes"):
            convert_chunk_bytes(bad)
