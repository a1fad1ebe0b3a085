"""Property tests: serializers, pytree specs and the chunk writer/reader round-trip, and match LitData."""

from __future__ import annotations

import os
import tempfile
from collections import OrderedDict, deque
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from streamscope.format import (
    ChunkFile,
    ChunkWriter,
    PyTreeLoader,
    default_serializers,
    tree_flatten,
    tree_unflatten,
    treespec_dumps,
    treespec_loads,
)
from streamscope.format.chunk import open_chunk_file
from streamscope.format.serializers import key_for_format
from tests.format.conftest import same
from tests.support.litdata_version import LITDATA_076, xfail_076

LAYOUT = "0.2.76" if LITDATA_076 else "0.2.68"

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

NUMPY_DTYPES = [
    np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64,
    np.float16, np.float32, np.float64, np.complex64, np.complex128, np.bool_,
]  # fmt: skip
TORCH_DTYPES = [torch.float32, torch.float64, torch.float16, torch.uint8, torch.int8, torch.int16, torch.int32,
                torch.int64, torch.bool, torch.complex64]  # fmt: skip

arrays = st.sampled_from(NUMPY_DTYPES).flatmap(
    lambda dt: hnp.arrays(dt, hnp.array_shapes(min_dims=1, max_dims=4, min_side=0, max_side=4))
)


@st.composite
def tensors(draw: Any) -> torch.Tensor:
    dt = draw(st.sampled_from(TORCH_DTYPES))
    shape = draw(st.lists(st.integers(0, 4), min_size=0, max_size=3))
    n = int(np.prod(shape)) if shape else 1
    vals = draw(st.lists(st.integers(0, 100), min_size=n, max_size=n))
    return torch.tensor(vals).reshape(shape).to(dt)


leaves = st.one_of(
    st.text(max_size=20).filter(lambda s: not os.path.isfile(s)),
    st.integers(-(2**63), 2**63 - 1),
    st.floats(allow_nan=True),
    st.booleans(),
    st.binary(max_size=30),
    arrays,
    tensors(),
    st.none(),
    st.sets(st.integers(0, 9), max_size=3),
)


def _roundtrip(leaf: Any) -> tuple[str, Any]:
    sers = default_serializers()
    for key, ser in sers.items():
        if ser.can_serialize(leaf):
            blob, name = ser.serialize(leaf)
            fmt = name or key
            reader = default_serializers()[key_for_format(fmt, sers)]
            reader.setup(fmt)
            return fmt, reader.deserialize(memoryview(blob))
    raise AssertionError("pickle accepts everything")


@SETTINGS
@given(leaves)
def test_serializer_round_trip(leaf: Any) -> None:
    fmt, back = _roundtrip(leaf)
    if isinstance(leaf, np.ndarray) and leaf.ndim == 0:
        assert fmt == "pickle"
    assert same(leaf, back), (fmt, leaf, back)


def test_bfloat16_tensor_round_trips() -> None:
    t = torch.randn(3, 2).to(torch.bfloat16)
    fmt, back = _roundtrip(t)
    assert fmt == "tensor" and same(t, back)
    fmt, back = _roundtrip(t[:, 0].contiguous())
    assert fmt == "no_header_tensor:10" and same(t[:, 0].contiguous(), back)


def test_unstorable_numpy_dtypes_fall_back_to_pickle() -> None:
    for arr in (np.array(["ab", "c"]), np.array([b"x"]), np.array([1, "a"], dtype=object), np.arange(3, dtype=">i4")):
        fmt, back = _roundtrip(arr)
        assert fmt == "pickle"
        assert np.array_equal(arr, back)  # numpy's pickle may normalise the byte order, values are kept


def test_numpy_leaf_is_zero_copy(tmp_path) -> None:
    w = ChunkWriter(str(tmp_path), chunk_size=4)
    w.add_item(0, {"a": np.arange(10, dtype=np.int32), "m": np.ones((2, 3))})
    w.done()
    loader = PyTreeLoader()
    loader.setup(w.config)
    cf = ChunkFile(str(tmp_path / "chunk-0-0.bin"))
    out = loader.decode(cf.item_view(0))
    assert not out["a"].flags.owndata and not out["a"].flags.writeable
    assert not out["m"].flags.owndata
    del out
    cf.close()


# --- pytree ---------------------------------------------------------------------------------------

keys = st.one_of(st.text(max_size=5), st.integers(-5, 50))


def trees(leaf: Any) -> Any:
    return st.recursive(
        leaf,
        lambda kids: st.one_of(
            st.lists(kids, max_size=4),
            st.lists(kids, max_size=4).map(tuple),
            st.dictionaries(st.text(max_size=5), kids, max_size=4),
            st.dictionaries(st.integers(-5, 50), kids, max_size=3),
            st.dictionaries(st.text(max_size=5), kids, max_size=3).map(OrderedDict),
            st.tuples(st.lists(kids, max_size=3), st.none() | st.integers(3, 6)).map(lambda t: deque(t[0], t[1])),
        ),
        max_leaves=12,
    )


@pytest.mark.interop
@SETTINGS
@given(trees(st.integers() | st.text(max_size=4) | st.none()))
def test_pytree_round_trip_and_matches_litdata(tree: Any) -> None:
    from litdata.utilities import _pytree as ld

    leaves_, spec = tree_flatten(tree)
    assert same(tree_unflatten(leaves_, spec), tree)
    text = treespec_dumps(spec)
    assert treespec_loads(text) == spec
    ld_leaves, ld_spec = ld.tree_flatten(tree)
    assert ld.treespec_dumps(ld_spec) == text
    assert ld_leaves == leaves_


# --- writer / reader ------------------------------------------------------------------------------

schema_leaf = st.sampled_from(["int", "float", "str", "bytes", "np1", "np2", "t1", "t2", "bool", "pickle"])


def _leaf_strategy(kind: str) -> Any:
    return {
        "int": st.integers(-(2**40), 2**40),
        "float": st.floats(allow_nan=False, width=64),
        "str": st.text(max_size=30).filter(lambda s: not os.path.isfile(s)),
        "bytes": st.binary(max_size=60),
        "np1": hnp.arrays(np.float32, st.integers(0, 20)),
        "np2": hnp.arrays(np.int16, hnp.array_shapes(min_dims=2, max_dims=3, max_side=4)),
        "t1": st.lists(st.integers(0, 1000), max_size=20).map(lambda v: torch.tensor(v, dtype=torch.int64)),
        "t2": st.lists(st.floats(-1, 1, width=32), min_size=6, max_size=6).map(lambda v: torch.tensor(v).reshape(2, 3)),
        "bool": st.booleans(),
        # None after a set in a pickle field: 0.2.76's layout differs there (test_none_after_a_pickled_value_076)
        "pickle": st.tuples(st.integers()).map(set) if LITDATA_076 else st.none() | st.tuples(st.integers()).map(set),
    }[kind]


@st.composite
def datasets(draw: Any) -> tuple[list[Any], dict[str, Any]]:
    schema = draw(st.dictionaries(st.text("abcxyz", min_size=1, max_size=4), schema_leaf, min_size=1, max_size=5))
    n = draw(st.integers(1, 25))
    samples = [{k: draw(_leaf_strategy(v)) for k, v in schema.items()} for _ in range(n)]
    if draw(st.booleans()):
        limits = {"chunk_size": draw(st.integers(1, 8))}
    else:
        limits = {"chunk_bytes": draw(st.integers(1, 600))}
    return samples, limits


@pytest.mark.interop
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(datasets())
def test_writer_reader_round_trip_and_litdata_bytes(data: tuple[list[Any], dict[str, Any]]) -> None:
    pytest.importorskip("litdata")
    import warnings

    from litdata.streaming.writer import BinaryWriter

    samples, limits = data
    with tempfile.TemporaryDirectory() as root:
        ours, theirs = os.path.join(root, "ours"), os.path.join(root, "theirs")
        w = ChunkWriter(ours, write_format=LAYOUT, **limits)  # the layout of the LitData under test
        closed = []
        for i, s in enumerate(samples):
            closed += w.add_item(i, s)
        closed += w.done()
        assert closed == w.chunks
        assert sum(c["chunk_size"] for c in w.chunks) == len(samples)
        loader = PyTreeLoader()
        loader.setup(w.config)
        back = []
        for entry in w.chunks:
            chunk = open_chunk_file(os.path.join(ours, entry["filename"]), entry["chunk_size"])
            try:
                if chunk.kind == "classic" and LAYOUT == "0.2.68":
                    assert chunk.size == entry["chunk_bytes"]  # 0.2.68 records the classic chunk's size
                back += [chunk.sample(i, loader) for i in range(chunk.num_items)]
            finally:
                chunk.close()
        assert len(back) == len(samples)
        assert all(same(a, b) for a, b in zip(samples, back))

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            bw = BinaryWriter(theirs, **limits)
            for i, s in enumerate(samples):
                bw.add_item(i, s)
            bw.done()
        assert bw._chunks_info == w.chunks
        for entry in w.chunks:
            with (
                open(os.path.join(ours, entry["filename"]), "rb") as a,
                open(os.path.join(theirs, entry["filename"]), "rb") as b,
            ):
                assert a.read() == b.read()


@pytest.mark.interop
@pytest.mark.skipif(not LITDATA_076, reason="the 0.2.76 layout")
@xfail_076("needs 0.2.76 writing: None in a field whose first value was pickled (LitData pickles its JsonLeaf)")
def test_none_after_a_pickled_value_076(tmp_path: Any) -> None:
    """LitData 0.2.76 writes the None of a pickle field as a pickled JsonLeaf wrapper (104 bytes here, streamscope
    102) and reads that wrapper back, not None; found by the property test above."""
    from litdata.streaming.writer import BinaryWriter

    samples = [{"aa": 0, "a": {0}}, {"aa": 0, "a": None}]
    ours, theirs = str(tmp_path / "ours"), str(tmp_path / "theirs")
    w = ChunkWriter(ours, write_format="0.2.76", chunk_bytes=1)
    bw = BinaryWriter(theirs, chunk_bytes=1)
    for i, s in enumerate(samples):
        w.add_item(i, s)
        bw.add_item(i, s)
    w.done()
    bw.done()
    assert bw._chunks_info == w.chunks
    for entry in w.chunks:
        assert (
            Path(os.path.join(ours, entry["filename"])).read_bytes()
            == Path(os.path.join(theirs, entry["filename"])).read_bytes()
        )


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(st.tuples(st.integers(0, 200), st.integers(0, 255)), min_size=1, max_size=4),
    st.integers(0, 400),
)
def test_corrupted_chunks_fail_cleanly(flips: list[tuple[int, int]], cut: int) -> None:
    """Flipped header/body bytes or truncation: open raises CorruptChunkError or decode raises FormatError."""
    from streamscope._core.errors import CorruptChunkError, FormatError

    with tempfile.TemporaryDirectory() as d:
        w = ChunkWriter(d, chunk_size=10)
        for i in range(6):
            w.add_item(i, {"i": i, "s": "x" * i, "a": np.arange(i, dtype=np.int16), "t": torch.ones(2, i)})
        w.done()
        path = os.path.join(d, "chunk-0-0.bin")
        raw = bytearray(Path(path).read_bytes())
        for pos, val in flips:
            raw[pos % len(raw)] = val
        raw = raw[: max(0, len(raw) - cut)]
        with open(path, "wb") as f:
            f.write(bytes(raw))
        loader = PyTreeLoader()
        loader.setup(w.config)
        try:
            cf = ChunkFile(path)
        except CorruptChunkError:
            return
        try:
            for i in range(cf.num_items):
                v = cf.item_view(i)
                assert len(v) <= len(raw)
                try:
                    loader.decode(v)
                except FormatError:
                    pass
        finally:
            cf.close()


@pytest.mark.interop
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.integers(0, 30), min_size=1, max_size=25), st.integers(1, 40), st.booleans())
def test_tokens_chunking_matches_litdata(lengths: list[int], limit: int, by_bytes: bool) -> None:
    pytest.importorskip("litdata")
    import warnings

    from litdata.streaming.item_loader import TokensLoader as LDTokens
    from litdata.streaming.writer import BinaryWriter

    from streamscope.format import TokensLoader

    seqs = [np.arange(n, dtype=np.int32) for n in lengths]
    kw = {"chunk_bytes": limit * 4} if by_bytes else {"chunk_size": limit}
    with tempfile.TemporaryDirectory() as root:
        w = ChunkWriter(os.path.join(root, "ours"), item_loader=TokensLoader(), **kw)
        for i, s in enumerate(seqs):
            w.add_item(i, s)
        w.done()
        start = 0
        for c in w.chunks:  # our dim is always the token count
            part = lengths[start : start + c["chunk_size"]]
            assert c["dim"] == sum(part)
            start += c["chunk_size"]
            # greedy rule: a chunk is within the budget unless it is a single item (0 tokens weigh 1 item)
            used = 4 * sum(part) if by_bytes else sum(max(n, 1) for n in part)
            assert used <= (limit * 4 if by_bytes else limit) or c["chunk_size"] == 1
        assert start == len(seqs)
        if 0 in lengths:
            # LitData treats a 0-byte item as missing (Item.__len__ == 0 is falsy in _should_write), stops
            # checking limits and lumps every later item into one chunk; we keep applying the limits.
            return
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            bw = BinaryWriter(os.path.join(root, "theirs"), item_loader=LDTokens(), **kw)
            for i, s in enumerate(seqs):
                bw.add_item(i, s)
            bw.done()
        for ours, theirs in zip(w.chunks, bw._chunks_info):
            assert theirs == ours
            a = Path(os.path.join(root, "ours", ours["filename"])).read_bytes()
            b = Path(os.path.join(root, "theirs", ours["filename"])).read_bytes()
            assert a == b
        assert len(w.chunks) == len(bw._chunks_info)
