"""Subsample / upsample regions: item counts, determinism, and agreement with the real LitData."""

from __future__ import annotations

import json
import math
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamscope._core.errors import PlanError
from streamscope.engine.plan import make_plan
from streamscope.engine.subsample import regions_from_litdata, regions_to_litdata, subsample_regions

sizes_st = st.lists(st.integers(0, 50), min_size=1, max_size=12)
factor_st = st.floats(min_value=0.01, max_value=3.0, allow_nan=False)


def _expected_count(sizes, f):
    total = sum(sizes)
    if math.isclose(f, 1.0):
        return total
    k, rest = 0, f
    while rest >= 1.0:
        k += 1
        rest -= 1.0
    return k * total + (int(total * rest) if rest > 0 else 0)


@settings(max_examples=300, deadline=None)
@given(sizes=sizes_st, f=factor_st, shuffle=st.booleans(), seed=st.integers(0, 2**32 - 1))
def test_counts_bounds_and_determinism(sizes, f, shuffle, seed):
    regions = subsample_regions(sizes, f, shuffle, seed)
    assert regions == subsample_regions(sizes, f, shuffle, seed)
    assert sum(e - s for _, s, e in regions) == _expected_count(sizes, f)
    for c, s, e in regions:
        assert 0 <= c < len(sizes) and s == 0 and 0 <= e <= sizes[c]
    # Each chunk appears at most ceil(f) times, and whole copies first: every chunk floor(f) times at least.
    per_chunk = Counter(c for c, _, _ in regions)
    if not math.isclose(f, 1.0):
        assert max(per_chunk.values(), default=0) <= math.ceil(f)
        assert all(per_chunk[c] >= int(f) for c in range(len(sizes)))
    # Only the last region may be cut short.
    assert all(e == sizes[c] for c, _, e in regions[:-1])


@settings(max_examples=100, deadline=None)
@given(sizes=st.lists(st.integers(1, 30), min_size=2, max_size=10), f=factor_st)
def test_subsample_feeds_the_plan(sizes, f):
    regions = subsample_regions(sizes, f, True, 11)
    count = sum(e - s for _, s, e in regions)
    plan = make_plan(
        sizes, world_size=1, rank=0, batch_size=4, drop_last=False, shuffle=True, seed=1, epoch=1, regions=regions
    )
    if count == 0:  # an empty selection is an empty plan (LitData: an empty dataset)
        assert (plan.num_samples, plan.num_batches) == (0, 0)
    got = Counter(s for j in range(plan.num_batches) for s in plan.batch(j))
    want = Counter((c, i) for c, s, e in regions for i in range(s, e))
    assert got == want


def test_no_shuffle_fraction_is_index_prefix():
    assert subsample_regions([5, 5, 5], 0.5, False, 0) == [(0, 0, 5), (1, 0, 2)]
    assert subsample_regions([5, 5], 1.5, False, 0) == [(0, 0, 5), (1, 0, 5), (0, 0, 5)]
    assert subsample_regions([4, 4], 0.01, False, 0) == []


def test_bad_factors():
    for bad in (0, -1.0, float("nan"), float("inf"), "0.5", True):
        with pytest.raises(PlanError, match="subsample"):
            subsample_regions([3], bad, False, 0)
    with pytest.raises(PlanError, match="seed"):
        subsample_regions([3], 0.5, True, -1)


def test_litdata_conversion_roundtrip():
    names = ["a.bin", "b.bin", "c.bin"]
    regions = [(2, 0, 4), (0, 0, 1), (2, 0, 2)]
    files, roi = regions_to_litdata(regions, names)
    assert files == ["c.bin", "a.bin", "c.bin"] and roi == [(0, 4), (0, 1), (0, 2)]
    assert regions_from_litdata(files, roi, names) == regions
    with pytest.raises(PlanError, match="z.bin"):
        regions_from_litdata(["z.bin"], [(0, 1)], names)
    with pytest.raises(PlanError, match="entries"):
        regions_from_litdata(["a.bin"], [], names)


@pytest.mark.interop
@pytest.mark.parametrize("shuffle", [False, True])
@pytest.mark.parametrize("factor", [0.05, 0.3, 0.5, 0.999, 1.0, 1.7, 2.3, 3.0])
def test_same_selection_as_litdata(tmp_path, shuffle, factor):
    pytest.importorskip("litdata")
    from litdata.streaming.resolver import Dir
    from litdata.utilities.dataset_utilities import subsample_streaming_dataset

    sizes = [5, 0, 7, 3, 9, 12, 1]
    names = [f"chunk-0-{i}.bin" for i in range(len(sizes))]
    index = {"chunks": [{"filename": n, "chunk_size": s} for n, s in zip(names, sizes)], "config": {}}
    (tmp_path / "index.json").write_text(json.dumps(index))
    files, roi = subsample_streaming_dataset(Dir(path=str(tmp_path)), subsample=factor, shuffle=shuffle, seed=7)
    mine = regions_to_litdata(subsample_regions(sizes, factor, shuffle, 7), names)
    assert mine == (files, [(int(a), int(b)) for a, b in roi])
