"""Unit tests of the format pieces: tokens, pytree corner cases, index merging, mmap lifetime, events."""

from __future__ import annotations

import gc
import json
import os
import warnings
from collections import defaultdict, namedtuple

import numpy as np
import pytest
import torch

from streamscope import events as ev
from streamscope.format import (
    ChunkFile,
    ChunkWriter,
    PyTreeLoader,
    TokensLoader,
    load_index,
    merge_partial_indexes,
    natural_key,
    tree_flatten,
    tree_unflatten,
    treespec_dumps,
    treespec_loads,
    write_partial_index,
)
from streamscope.format.chunk import decompress_file
from streamscope.format.pytree import leaf_paths, register_namedtuple
from tests.format.conftest import same
from tests.support.litdata_version import xfail_076

Point = namedtuple("Point", ["x", "y"])
register_namedtuple(Point, "tests.Point")


def test_tokens_write_and_blocks(tmp_path):
    seqs = [np.arange(n, dtype=np.int32) + 100 * n for n in (5, 7, 3, 9, 4)]
    w = ChunkWriter(str(tmp_path), chunk_size=12, item_loader=TokensLoader())
    for i, s in enumerate(seqs):
        w.add_item(i, s)
    w.done()
    # greedy by tokens: [5,7] = 12, [3,9] = 12, [4]
    assert [(c["chunk_size"], c["dim"]) for c in w.chunks] == [(2, 12), (2, 12), (1, 4)]
    assert w.config["data_format"] == ["no_header_numpy:2"] and w.config["item_loader"] == "TokensLoader"
    loader = TokensLoader(block_size=5)
    loader.setup(w.config, chunks=w.chunks)
    assert loader.state_dict() == {"block_size": 5}
    assert [loader.blocks_in_chunk(c) for c in w.chunks] == [2, 2, 0]
    with ChunkFile(str(tmp_path / "chunk-0-0.bin"), expected_items=2) as cf:
        stream = np.concatenate(seqs[:2])
        assert np.array_equal(loader.read_block(cf, 0), stream[:5])
        assert np.array_equal(loader.read_block(cf, 1), stream[5:10])
        with pytest.raises(Exception, match="outside chunk"):
            loader.read_block(cf, 2)
        assert np.array_equal(loader.decode(cf.item_view(1)), seqs[1])
        block = loader.read_block(cf, 0)
    block[0] = -1  # a private copy: writable, chunk closed
    assert block.flags.writeable


def test_tokens_tensor_dtype_and_bfloat16(tmp_path):
    toks = [torch.arange(6, dtype=torch.int64), torch.arange(4, dtype=torch.int64)]
    w = ChunkWriter(str(tmp_path / "a"), chunk_size=100, item_loader=TokensLoader())
    for i, t in enumerate(toks):
        w.add_item(i, t)
    w.done()
    assert w.config["data_format"] == ["no_header_tensor:18"]
    loader = TokensLoader(3)
    loader.setup(w.config, chunks=w.chunks)
    with ChunkFile(str(tmp_path / "a" / "chunk-0-0.bin")) as cf:
        blocks = loader.decode_many(cf, range(loader.blocks_in_chunk(w.chunks[0])))
    assert [b.tolist() for b in blocks] == [[0, 1, 2], [3, 4, 5], [0, 1, 2]]
    assert all(b.dtype == torch.int64 for b in blocks)

    bf = [torch.randn(4).to(torch.bfloat16)]
    w = ChunkWriter(str(tmp_path / "b"), chunk_size=100, item_loader=TokensLoader())
    w.add_item(0, bf[0])
    w.done()
    assert w.config["data_format"] == ["no_header_tensor:10"]
    loader = TokensLoader(2)
    loader.setup(w.config, chunks=w.chunks)
    with ChunkFile(str(tmp_path / "b" / "chunk-0-0.bin")) as cf:
        b0 = loader.read_block(cf, 1)
    assert b0.dtype == torch.bfloat16 and torch.equal(b0, bf[0][2:])


def test_tokens_block_size_required():
    with pytest.raises(Exception, match="block_size"):
        TokensLoader().state_dict()


_NAMEDTUPLE_076 = "needs 0.2.76 writing: a namedtuple's data_spec context is 0.2.76's"


@pytest.mark.interop
@pytest.mark.parametrize(
    "sample",
    [
        pytest.param(Point(1, "a"), marks=xfail_076(_NAMEDTUPLE_076)),
        pytest.param({"p": Point(x=[1, 2], y={"z": 3})}, marks=xfail_076(_NAMEDTUPLE_076)),
        defaultdict(list, {"a": 1, "b": [2, 3]}),
        [],
        {},
        (),
        {"empty": [], "none": None},
        7,
    ],
)
def test_pytree_corner_cases_match_litdata(sample):
    from litdata.utilities import _pytree as ld

    with warnings.catch_warnings():  # re-registering in litdata warns; the registration is idempotent
        warnings.simplefilter("ignore")
        ld._register_namedtuple(Point, serialized_type_name="tests.Point")
    leaves, spec = tree_flatten(sample)
    assert same(tree_unflatten(leaves, spec), sample)
    text = treespec_dumps(spec)
    assert treespec_loads(text) == spec
    ld_leaves, ld_spec = ld.tree_flatten(sample)
    assert ld.treespec_dumps(ld_spec) == text


def test_subclasses_are_leaves():
    class MyDict(dict):
        pass

    leaves, spec = tree_flatten({"a": MyDict(x=1)})
    assert spec.num_leaves == 1 and isinstance(leaves[0], MyDict)


def test_leaf_paths():
    _, spec = tree_flatten({"a": [1, {"b": 2}], "p": Point(1, 2), 3: "x"})
    assert leaf_paths(spec) == ["['a'][0]", "['a'][1]['b']", "['p'].x", "['p'].y", "[3]"]


def test_namedtuple_in_chunk_round_trip(tmp_path):
    w = ChunkWriter(str(tmp_path), chunk_size=4)
    for i in range(3):
        w.add_item(i, {"pt": Point(i, float(i))})
    w.done()
    assert json.loads(w.config["data_spec"])[1]["children_spec"][0]["context"] == "tests.Point"
    loader = PyTreeLoader()
    loader.setup(w.config)
    with ChunkFile(str(tmp_path / "chunk-0-0.bin")) as cf:
        got = loader.decode_many(cf, range(3))
    assert got == [{"pt": Point(i, float(i))} for i in range(3)] and type(got[0]["pt"]) is Point


def test_natural_key_order():
    names = ["10.index.json", "2.index.json", "1.index.json", "0.index.json"]
    assert sorted(names, key=natural_key) == ["0.index.json", "1.index.json", "2.index.json", "10.index.json"]


def test_merge_partial_indexes(tmp_path):
    cfg = {"chunk_bytes": None, "chunk_size": 2, "data_format": ["int"]}
    for rank in (10, 2, 0):
        write_partial_index(
            str(tmp_path),
            rank,
            [{"chunk_bytes": 1, "chunk_size": 1, "dim": None, "filename": f"chunk-{rank}-0.bin"}],
            cfg,
        )
    (tmp_path / "index.json").write_text("{}")  # not a partial: ignored
    existing = {
        "chunks": [{"chunk_bytes": 5, "chunk_size": 2, "dim": None, "filename": "chunk-0-0-old.bin"}],
        "config": cfg,
    }
    merged = merge_partial_indexes(str(tmp_path), existing, delete_partials=True)
    assert [c["filename"] for c in merged["chunks"]] == [
        "chunk-0-0-old.bin",
        "chunk-0-0.bin",
        "chunk-2-0.bin",
        "chunk-10-0.bin",
    ]
    assert merged["config"] == cfg
    assert sorted(os.listdir(tmp_path)) == ["index.json"]
    write_partial_index(str(tmp_path), 3, merged["chunks"], cfg)
    assert "updated_at" not in (tmp_path / "3.index.json").read_text()


def test_mds_index_adapted(tmp_path):
    mds = {
        "version": 2,
        "shards": [
            {
                "column_encodings": ["int", "str"],
                "column_names": ["id", "text"],
                "column_sizes": [8, None],
                "compression": None,
                "format": "mds",
                "raw_data": {"basename": "shard.00000.mds", "bytes": 100, "hashes": {}},
                "samples": 3,
                "size_limit": 1 << 26,
                "version": 2,
                "zip_data": None,
            }
        ],
    }
    (tmp_path / "index.json").write_text(json.dumps(mds))
    idx = load_index(str(tmp_path))
    assert idx["chunks"] == [
        {"chunk_bytes": 100, "chunk_size": 3, "column_sizes": [8, None], "dim": None, "filename": "shard.00000.mds"}
    ]
    assert idx["config"]["format"] == "mds" and idx["config"]["data_format"] == ["int", "str"]


def test_chunkfile_close_with_live_numpy_views(tmp_path):
    w = ChunkWriter(str(tmp_path), chunk_size=4)
    w.add_item(0, {"a": np.arange(1000, dtype=np.int64)})
    w.done()
    loader = PyTreeLoader()
    loader.setup(w.config)
    cf = ChunkFile(str(tmp_path / "chunk-0-0.bin"))
    arr = loader.decode(cf.item_view(0))["a"]
    cf.close()  # must not raise although arr still points into the map
    assert int(arr.sum()) == 999 * 1000 // 2  # still readable: the map lives until arr is freed
    with pytest.raises(Exception, match="closed"):
        cf.item_view(0)
    del arr
    gc.collect()


def test_decompress_emits_span(tmp_path):
    w = ChunkWriter(str(tmp_path), chunk_size=4, compression="zstd")
    for i in range(3):
        w.add_item(i, {"a": i})
    w.done()
    assert w.chunks[0]["filename"] == "chunk-0-0.zstd.bin"
    ev.drain()
    ev.ACTIVE.add("decompress")
    try:
        decompress_file(str(tmp_path / "chunk-0-0.zstd.bin"), str(tmp_path / "chunk-0-0.bin"), "zstd")
    finally:
        ev.ACTIVE.discard("decompress")
    events = [e for e in ev.drain() if e[2] == "decompress"]
    assert [e[0] for e in events] == ["B", "E"]
    assert events[1][6]["bytes"] == w.chunks[0]["chunk_bytes"] == os.path.getsize(tmp_path / "chunk-0-0.bin")


def test_loader_for_config():
    from streamscope.format import loader_for_config

    assert isinstance(loader_for_config({"item_loader": "PyTreeLoader"}), PyTreeLoader)
    tl = loader_for_config({"item_loader": "TokensLoader"}, block_size=8)
    assert isinstance(tl, TokensLoader) and tl.block_size == 8
    assert isinstance(loader_for_config({"data_format": ["no_header_tensor:18"]}), TokensLoader)  # legacy
    assert isinstance(loader_for_config({"data_format": ["int"]}), PyTreeLoader)
    assert type(loader_for_config({"item_loader": "ParquetLoader"})).__name__ == "ParquetLoader"
    with pytest.raises(Exception, match="NoSuchLoader"):
        loader_for_config({"item_loader": "NoSuchLoader"})


class _Int32Serializer:
    """A LitData-style user serializer (no ``matches``): ints stored as int32."""

    def serialize(self, item):
        return int(item).to_bytes(4, "little", signed=True), "int32"

    def deserialize(self, data):
        return int.from_bytes(bytes(data), "little", signed=True)

    def can_serialize(self, item):
        return isinstance(item, int) and not isinstance(item, bool)

    def setup(self, data_format):
        pass


def test_user_serializer_goes_first(tmp_path):
    w = ChunkWriter(str(tmp_path), chunk_size=10, serializers={"int32": _Int32Serializer()})
    for i in range(3):
        w.add_item(i, {"a": i - 1, "s": "x"})
    with pytest.raises(Exception, match=r"sample 3 field \['a'\]"):
        w.add_item(3, {"a": "nope", "s": "x"})
    w.done()
    assert w.config["data_format"] == ["int32", "str"]
    assert w.chunks[0]["chunk_bytes"] == 4 * 5 + 3 * (8 + 4 + 1)
    loader = PyTreeLoader()
    loader.setup(w.config, serializers={"int32": _Int32Serializer()})
    with ChunkFile(str(tmp_path / "chunk-0-0.bin")) as cf:
        assert loader.decode_many(cf, range(3)) == [{"a": i - 1, "s": "x"} for i in range(3)]
    plain = PyTreeLoader()
    plain.setup(w.config)  # without the user serializer: decoding the leaf says what is missing
    with ChunkFile(str(tmp_path / "chunk-0-0.bin")) as cf, pytest.raises(Exception, match="'int32' has no serializer"):
        plain.decode(cf.item_view(0))


def test_loaders_pickle_after_setup(tmp_path):
    import pickle

    w = ChunkWriter(str(tmp_path / "p"), chunk_size=10)
    for i in range(3):
        w.add_item(i, {"a": i, "t": torch.ones(2, 2) * i, "n": np.arange(i, dtype=np.int8)})
    w.done()
    loader = PyTreeLoader()
    loader.setup(w.config)
    clone = pickle.loads(pickle.dumps(loader))
    with ChunkFile(str(tmp_path / "p" / "chunk-0-0.bin")) as cf:
        assert all(same(a, b) for a, b in zip(loader.decode_many(cf, range(3)), clone.decode_many(cf, range(3))))
    assert pickle.loads(pickle.dumps(PyTreeLoader()))._config is None

    tw = ChunkWriter(str(tmp_path / "t"), chunk_size=100, item_loader=TokensLoader())
    tw.add_item(0, np.arange(10, dtype=np.int64))
    tw.done()
    tl = TokensLoader(block_size=4)
    tl.setup(tw.config, chunks=tw.chunks)
    tclone = pickle.loads(pickle.dumps(tl))
    assert tclone.block_size == 4
    with ChunkFile(str(tmp_path / "t" / "chunk-0-0.bin")) as cf:
        assert np.array_equal(tclone.read_block(cf, 1), np.arange(4, 8))


def test_every_torch_dtype_index_decodes():
    import struct

    from streamscope.format import dtypes
    from streamscope.format.serializers import NoHeaderTensorSerializer, TensorSerializer

    for idx, name in enumerate(dtypes.TORCH_DTYPE_NAMES):
        dtype = getattr(torch, name)
        t = torch.ones(2, 3, dtype=dtype)
        raw = t.view(torch.int16).numpy().tobytes() if dtype == torch.bfloat16 else t.numpy().tobytes()
        blob = struct.pack(">IIII", idx, 2, 2, 3) + raw
        got = TensorSerializer().deserialize(memoryview(blob))
        assert got.dtype == dtype and torch.equal(got, t), name
        nh = NoHeaderTensorSerializer()
        nh.setup(f"no_header_tensor:{idx}")
        flat = nh.deserialize(memoryview(raw))
        assert flat.dtype == dtype and torch.equal(flat, t.flatten()), name
    # the writer resolves aliases to the last index (LitData's inverse dict)
    assert [dtypes.torch_dtype_index(d) for d in (torch.float32, torch.float64, torch.int32, torch.int64)] == [
        1,
        3,
        16,
        18,
    ]
    assert dtypes.torch_dtype_index(torch.bfloat16) == 10 and dtypes.torch_dtype_index(torch.uint16) == 20


def test_every_numpy_dtype_index_decodes():
    from streamscope.format import dtypes
    from streamscope.format.serializers import NoHeaderNumpySerializer

    for idx in range(14):
        dt = dtypes.NUMPY_DTYPES[idx]
        a = np.ones(5, dtype=dt)
        s = NoHeaderNumpySerializer()
        s.setup(f"no_header_numpy:{idx}")
        got = s.deserialize(memoryview(a.tobytes()))
        assert got.dtype == dt and np.array_equal(got, a)
    with pytest.raises(Exception, match="unknown numpy dtype index 18"):
        NoHeaderNumpySerializer().setup("no_header_numpy:18")
