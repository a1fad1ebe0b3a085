"""Interop with the real LitData: byte-identical chunks and index, and datasets LitData reads back."""

from __future__ import annotations

import pytest

from streamscope.processing import optimize
from tests.processing import _fns
from tests.processing.conftest import read_dataset

litdata = pytest.importorskip("litdata")
pytestmark = [pytest.mark.interop, pytest.mark.filterwarnings("ignore:A newer version of litdata")]


@pytest.mark.slow
@pytest.mark.parametrize(
    "fn, kwargs",
    [
        (_fns.image_sample, {"chunk_bytes": "3KB"}),
        (_fns.mixed_sample, {"chunk_size": 9}),
        (_fns.keep_even, {"chunk_size": 4}),
    ],
)
def test_chunks_byte_identical_to_litdata_one_worker(tmp_path, monkeypatch, fn, kwargs):
    # private LitData staging dirs: its default /tmp/chunks is shared with every other job on the host
    monkeypatch.setenv("DATA_OPTIMIZER_CACHE_FOLDER", str(tmp_path / "litdata-chunks"))
    monkeypatch.setenv("DATA_OPTIMIZER_DATA_CACHE_FOLDER", str(tmp_path / "litdata-data"))
    theirs, ours = str(tmp_path / "theirs"), str(tmp_path / "ours")
    inputs = list(range(60))
    litdata.optimize(
        fn=fn, inputs=inputs, output_dir=theirs, num_workers=1, verbose=False, start_method="fork", **kwargs
    )
    optimize(fn, inputs, ours, num_workers=1, verbose=False, **kwargs)
    t_index, t_chunks = read_dataset(theirs)
    o_index, o_chunks = read_dataset(ours)
    assert len(o_chunks) > 1
    assert o_index == t_index
    assert o_chunks == t_chunks


def test_litdata_reads_our_two_worker_dataset(tmp_path):
    out = str(tmp_path / "ds")
    optimize(_fns.image_sample, list(range(64)), out, chunk_bytes="3KB", num_workers=2, verbose=False)
    ds = litdata.StreamingDataset(out)
    assert len(ds) == 64
    loader = litdata.StreamingDataLoader(ds, batch_size=8, num_workers=2)
    labels = sorted(int(x) for batch in loader for x in batch["label"])
    assert labels == list(range(64))
    for i in (0, 31, 63):
        s = ds[i]
        want = _fns.image_sample(i)
        assert s["label"] == i and s["id"] == want["id"]
        assert (s["image"] == want["image"]).all()


# optimize() takes LitData 0.2.76's compression_level/compression_batch_size (after compression, as there);
# LitData 0.2.68 has neither
_NEW_IN_076 = {"compression_level", "compression_batch_size"}
# 0.2.76 defaults keep_data_ordered to None (= False: inputs from a shared queue, order not kept); streamscope keeps
# True (the input order, deterministic output), which is one of the orders 0.2.76's default allows
_DEFAULT_KEPT = {("optimize", "keep_data_ordered"), ("map", "keep_data_ordered")}
# streamscope's own keyword-only arguments after LitData's (where the workers run: processes or Ray)
_OURS_ONLY = {("optimize", "executor"), ("map", "executor")}


@pytest.mark.parametrize("name", ["optimize", "map", "walk"])
def test_signature_matches_litdata(name):
    import inspect

    import streamscope.processing as ours

    theirs_names = set(inspect.signature(getattr(litdata, name)).parameters)

    def params(f, mine):
        out = []
        for p in inspect.signature(f).parameters.values():
            if mine and p.name in _NEW_IN_076 and p.name not in theirs_names:
                continue
            if mine and (name, p.name) in _OURS_ONLY and p.kind is p.KEYWORD_ONLY:
                continue
            out.append((p.name, p.kind, None if (name, p.name) in _DEFAULT_KEPT else p.default))
        return out

    assert params(getattr(ours, name), True) == params(getattr(litdata, name), False)
