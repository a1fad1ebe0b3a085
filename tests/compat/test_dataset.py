"""StreamingDataset usage from LitData's README, run with both engines on the same dataset."""

from __future__ import annotations

import os
import shutil
from typing import Any

import pytest

from tests.compat.conftest import both
from tests.support.litdata_version import LITDATA_076

pytestmark = pytest.mark.interop


def test_len_getitem_slice_iteration(data_dir: str) -> None:
    def scenario(ld: Any) -> Any:
        ds = ld.StreamingDataset(data_dir)
        return len(ds), ds[3], ds[49], ds[2:5], [s["index"] for s in ds]

    a, b = both(scenario)
    assert a == b
    assert a[0] == 50


def test_shuffle_covers_everything_and_depends_on_seed(data_dir: str) -> None:
    # exact shuffled orders are engine-specific (allowed: LitData documents no order); what users rely on is
    # "every sample once", "same seed → same order", "other seed → other order", "differs from unshuffled"
    def scenario(ld: Any) -> Any:
        def order(seed: int) -> list[int]:
            return [s["index"] for s in ld.StreamingDataset(data_dir, shuffle=True, seed=seed)]

        a, again, other = order(7), order(7), order(8)
        return sorted(a) == list(range(50)), a == again, a != other, a != list(range(50))

    a, b = both(scenario)
    assert a == b == (True, True, True, True)


def test_subsample_and_upsample_lengths(data_dir: str) -> None:
    def scenario(ld: Any) -> Any:
        half = ld.StreamingDataset(data_dir, subsample=0.5)
        up = ld.StreamingDataset(data_dir, subsample=1.5)
        return len(half), len(up), len({s["index"] for s in half}), sorted({s["index"] for s in up}) == list(range(50))

    a, b = both(scenario)
    assert a == b
    assert a[0] == 25


def test_transform_single_and_list(data_dir: str) -> None:
    def scenario(ld: Any) -> Any:
        one = ld.StreamingDataset(data_dir, transform=lambda s: s["index"] * 2)
        chain = ld.StreamingDataset(data_dir, transform=[lambda s: s["index"] * 2, lambda x: x + 1])
        return one[4], chain[4], [x for x in chain][:5]

    a, b = both(scenario)
    assert a == b == (8, 9, [1, 3, 5, 7, 9])


def test_max_cache_size_and_dir(data_dir: str) -> None:
    def scenario(ld: Any) -> Any:
        from importlib import import_module

        Dir = import_module(f"{ld.__name__}.streaming.resolver").Dir
        small = ld.StreamingDataset(data_dir, max_cache_size="10MB")
        via_dir = ld.StreamingDataset(Dir(path=data_dir))
        return len(list(small)), len(via_dir), via_dir[7]["index"]

    a, b = both(scenario)
    assert a == b == (50, 50, 7)


def test_get_len_per_workers_and_batch(data_dir: str) -> None:
    def scenario(ld: Any) -> Any:
        ds = ld.StreamingDataset(data_dir)
        return ds.get_len(2, 4), ds.get_len(1, 8), ld.StreamingDataset(data_dir, drop_last=True).get_len(2, 4)

    a, b = both(scenario)
    assert a == b


def test_tokens_loader_blocks(tokens_dir: str) -> None:
    def scenario(ld: Any) -> Any:
        from importlib import import_module

        TokensLoader = import_module(f"{ld.__name__}.streaming.item_loader").TokensLoader
        ds = ld.StreamingDataset(tokens_dir, item_loader=TokensLoader(block_size=10))
        return len(ds), ds[5], [x.tolist() for x in ds][-1]

    a, b = both(scenario)
    assert a == b


def _own_copy(src: str, dst: Any) -> str:
    shutil.copytree(src, dst)
    return str(dst)


def test_generator_fn_zstd_chunk_bytes(zstd_dir: str, tmp_path: Any) -> None:
    def scenario(ld: Any) -> Any:
        # LitData 0.2.76 reading a local dataset of whole-file zstd chunks replaces each chunk-R-I.zstd.bin by its
        # decompressed chunk-R-I.bin in the dataset folder: each engine reads a copy of its own
        d = _own_copy(zstd_dir, tmp_path / ld.__name__) if LITDATA_076 else zstd_dir
        ds = ld.StreamingDataset(d)
        return len(ds), [(s["index"], s["value"]) for s in ds]

    a, b = both(scenario)
    assert a == b
    assert a[0] == 60


@pytest.mark.skipif(not LITDATA_076, reason="LitData 0.2.68 leaves the dataset folder as it is")
def test_reads_a_zstd_dataset_after_litdata_076_read_it(zstd_dir: str, tmp_path: Any) -> None:
    import litdata

    import streamscope

    d = _own_copy(zstd_dir, tmp_path / "read-by-litdata")
    want = [(s["index"], s["value"]) for s in litdata.StreamingDataset(d)]
    assert not any(n.endswith(".zstd.bin") for n in os.listdir(d))  # the fact this test stands on
    assert [(s["index"], s["value"]) for s in streamscope.StreamingDataset(d)] == want


def test_mixed_leaf_types(mixed_dir: str) -> None:
    def scenario(ld: Any) -> Any:
        ds = ld.StreamingDataset(mixed_dir)
        return len(ds), ds[5], [s for s in ds][-1]

    a, b = both(scenario)
    assert a == b
    assert a[0] == 25


def test_mixed_leaf_types_batched(mixed_dir: str) -> None:
    def scenario(ld: Any) -> Any:
        # variable-length tensors do not stack (torch's default collate raises in both): batches as lists
        return list(ld.StreamingDataLoader(ld.StreamingDataset(mixed_dir), batch_size=4, collate_fn=lambda xs: xs))

    a, b = both(scenario)
    assert a == b
    assert isinstance(a, list) and len(a) == 7


def test_manual_epochs_with_set_epoch(data_dir: str) -> None:
    def scenario(ld: Any) -> Any:
        ds = ld.StreamingDataset(data_dir, shuffle=True, seed=11)
        first = [s["index"] for s in ds]
        ds.set_epoch(5)
        fifth = [s["index"] for s in ds]
        ds2 = ld.StreamingDataset(data_dir, shuffle=True, seed=11)
        ds2.set_epoch(5)
        fifth2 = [s["index"] for s in ds2]
        return fifth != first, fifth == fifth2, sorted(fifth) == list(range(50))

    a, b = both(scenario)
    assert a == b == (True, True, True)


def test_full_pass_advances_epoch(data_dir: str) -> None:
    def scenario(ld: Any) -> Any:
        ds = ld.StreamingDataset(data_dir, shuffle=True, seed=11)
        first = [s["index"] for s in ds]
        again = [s["index"] for s in ds]
        return first != again, sorted(again) == list(range(50))

    a, b = both(scenario)
    assert a == b == (True, True)
