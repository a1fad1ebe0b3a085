"""The column-wise collate equals torch's default_collate on the decoded samples."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch.utils.data import default_collate

from streamscope.engine.dataset import StreamingDataset
from tests.engine._data import write_dataset


def assert_same(a: Any, b: Any) -> None:
    assert type(a) is type(b), (type(a), type(b))
    if isinstance(a, torch.Tensor):
        assert a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)
    elif isinstance(a, dict):
        assert list(a) == list(b)
        for k in a:
            assert_same(a[k], b[k])
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            assert_same(x, y)
    else:
        assert a == b


SAMPLES = {
    "dict": lambda i: {"image": np.full((3, 4, 5), i % 256, dtype=np.uint8), "label": i, "name": f"n{i}"},
    "tuple": lambda i: (i, float(i) / 3, f"é{i}", i % 2 == 0),
    "nested": lambda i: {"a": [i, np.arange(i % 5 + 3, dtype=np.int64)[:3]], "t": torch.full((2, 2), float(i))},
    "tensor1d": lambda i: {"x": torch.arange(4, dtype=torch.int16) + i, "y": np.arange(3, dtype=np.float32) * i},
    "leaf": lambda i: np.full((2, 3), i, dtype=np.float64),
    "ragged": lambda i: {"x": np.arange(i % 3 + 1, dtype=np.int32), "y": i},  # 1-D ragged: sample path
    "pickle": lambda i: {"obj": bytes([i % 256]) * 3, "y": i},  # bytes leaf: not a column type, sample path
}


@pytest.mark.parametrize("kind", sorted(SAMPLES))
def test_column_collate_matches_default_collate(tmp_path, kind):
    make = SAMPLES[kind]
    d = write_dataset(str(tmp_path / kind), 23, make, chunk_size=5)
    ds = StreamingDataset(d, shuffle=True)
    plan = ds.plan(1, 6)
    for j in range(plan.num_batches):
        ci, ii = plan.batch_arrays(j)
        reader = ds.chunk_reader()
        samples = ds._samples(reader, ci, ii)
        if kind == "ragged":
            with pytest.raises(RuntimeError):
                default_collate(samples)
            continue
        expected = default_collate(samples)
        groups = ds._groups(reader, ci, ii)
        got = ds._collator().collate([(oc.view, p, it) for oc, p, it in groups], len(ci))
        if kind == "pickle":
            assert got is None  # not a column type: the caller decodes samples
            continue
        assert got is not None
        assert_same(got, expected)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    n=st.integers(1, 40),
    chunk=st.integers(1, 9),
    bs=st.integers(1, 12),
    shape=st.lists(st.integers(1, 4), min_size=1, max_size=3),
    dtype=st.sampled_from(["uint8", "int32", "float32", "float64", "int64", "bool"]),
)
def test_column_collate_property(tmp_path_factory, n, chunk, bs, shape, dtype):
    d = str(tmp_path_factory.mktemp("p"))
    arr = lambda i: (np.arange(int(np.prod(shape))).reshape(shape) + i).astype(dtype)  # noqa: E731
    write_dataset(d, n, lambda i: {"a": arr(i), "i": i, "s": str(i) * (i % 3)}, chunk_size=chunk)
    ds = StreamingDataset(d, shuffle=True, seed=n)
    plan = ds.plan(1, bs)
    reader = ds.chunk_reader()
    for j in range(plan.num_batches):
        ci, ii = plan.batch_arrays(j)
        groups = ds._groups(reader, ci, ii)
        got = ds._collator().collate([(oc.view, p, it) for oc, p, it in groups], len(ci))
        assert_same(got, default_collate(ds._samples(reader, ci, ii)))
    reader.stop()


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.uint8])
def test_block_collate_matches_default_collate(tmp_path, dtype):
    from streamscope.format.item_loader import TokensLoader

    d = write_dataset(
        str(tmp_path / "t"),
        13,
        lambda i: (torch.arange(37) + i).to(dtype),
        chunk_size=120,
        tokens_loader=TokensLoader(),
    )
    ds = StreamingDataset(d, item_loader=TokensLoader(block_size=16), shuffle=True)
    plan = ds.plan(1, 5)
    reader = ds.chunk_reader()
    for j in range(plan.num_batches):
        ci, ii = plan.batch_arrays(j)
        groups = ds._groups(reader, ci, ii)
        got = ds._collator().collate([(oc.view, p, it) for oc, p, it in groups], len(ci))
        assert_same(got, default_collate(ds._samples(reader, ci, ii)))
    reader.stop()
