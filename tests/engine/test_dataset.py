"""StreamingDataset: length, random access, iteration order, epochs, transform, subsample, tokens."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from streamscope.engine.dataset import StreamingDataset
from streamscope.format.item_loader import TokensLoader
from tests.engine._data import image_sample, write_dataset


@pytest.fixture
def ds_dir(tmp_path):
    return write_dataset(str(tmp_path / "ds"), 95, chunk_size=10)


def test_len_getitem_and_order(ds_dir):
    ds = StreamingDataset(ds_dir)
    assert len(ds) == 95
    assert ds[0] == {"index": 0, "name": "s0"}
    assert ds[94] == {"index": 94, "name": "s94"}
    assert ds[-1]["index"] == 94
    assert [s["index"] for s in ds[10:13]] == [10, 11, 12]
    assert [s["index"] for s in ds] == list(range(95))


def test_index_out_of_range(ds_dir):
    ds = StreamingDataset(ds_dir)
    with pytest.raises(IndexError, match="95"):
        ds[95]
    with pytest.raises(IndexError):
        ds[-96]


def test_shuffle_is_deterministic_per_epoch(ds_dir):
    a = StreamingDataset(ds_dir, shuffle=True, seed=7)
    b = StreamingDataset(ds_dir, shuffle=True, seed=7)
    ea = [s["index"] for s in a]
    assert ea == [s["index"] for s in b]
    assert sorted(ea) == list(range(95)) and ea != list(range(95))
    a.set_epoch(2)
    e2 = [s["index"] for s in a]
    assert sorted(e2) == list(range(95)) and e2 != ea


def test_transform_single_and_list(ds_dir):
    ds = StreamingDataset(ds_dir, transform=lambda s: s["index"] * 2)
    assert ds[3] == 6
    ds2 = StreamingDataset(ds_dir, transform=[lambda s: s["index"], lambda x: x + 1])
    assert [x for x in ds2][:3] == [1, 2, 3]


@pytest.mark.parametrize("factor", [0.5, 1.5])
def test_subsample(ds_dir, factor):
    ds = StreamingDataset(ds_dir, subsample=factor)
    got = [s["index"] for s in ds]
    assert len(got) == len(ds) == int(95 * factor)
    assert set(got) <= set(range(95))
    if factor > 1:
        assert set(got) == set(range(95))  # one full copy plus a part


def test_plain_dataloader_workers_yield_every_sample_once(ds_dir):
    ds = StreamingDataset(ds_dir, shuffle=True)
    dl = DataLoader(ds, batch_size=4, num_workers=2)
    seen = [int(i) for b in dl for i in b["index"]]
    assert sorted(seen) == list(range(95))


def test_tokens_loader_blocks(tmp_path):
    d = write_dataset(
        str(tmp_path / "tok"),
        20,
        lambda i: torch.arange(i * 100, i * 100 + 100, dtype=torch.int32),
        chunk_size=500,
        tokens_loader=TokensLoader(),
    )
    ds = StreamingDataset(d, item_loader=TokensLoader(block_size=50))
    # 4 chunks of 500 tokens -> 10 blocks each
    assert len(ds) == 40
    assert torch.equal(ds[0], torch.arange(0, 50, dtype=torch.int32))
    assert torch.equal(ds[11], torch.arange(550, 600, dtype=torch.int32))
    blocks = list(ds)
    assert torch.equal(torch.cat(blocks), torch.arange(0, 2000, dtype=torch.int32))


def test_image_samples_roundtrip(tmp_path):
    d = write_dataset(str(tmp_path / "img"), 30, image_sample, chunk_size=7)
    ds = StreamingDataset(d)
    s = ds[12]
    ref = image_sample(12)
    assert np.array_equal(s["image"], ref["image"]) and s["label"] == 12 and s["name"] == "img12"


def test_train_test_split(ds_dir):
    from streamscope.engine import train_test_split

    ds = StreamingDataset(ds_dir)
    train, val, test = train_test_split(ds, [0.7, 0.2, 0.1], seed=3)
    parts = [[s["index"] for s in d] for d in (train, val, test)]
    assert [len(p) for p in parts] == [int(95 * 0.7), int(95 * 0.2), int(95 * 0.1)]
    assert len(set().union(*map(set, parts))) == sum(len(p) for p in parts)  # disjoint
    assert [len(d) for d in (train, val, test)] == [len(p) for p in parts]
    assert [s["index"] for s in ds] == list(range(95))  # the original is untouched
    again = train_test_split(StreamingDataset(ds_dir), [0.7, 0.2, 0.1], seed=3)
    assert [s["index"] for s in again[1]] == parts[1]
    with pytest.raises(ValueError):
        train_test_split(ds, [0.7, 0.5])


def test_dataset_level_state_dict_resume(ds_dir):
    ds = StreamingDataset(ds_dir, shuffle=True, seed=9)
    ds.set_batch_size(8)
    state = ds.state_dict(num_samples_yielded=24, num_workers=0, batch_size=8)  # 24 samples into epoch 1
    full = [s["index"] for s in ds]
    ds2 = StreamingDataset(ds_dir, shuffle=True, seed=9)
    ds2.load_state_dict(state)
    assert [s["index"] for s in ds2] == full[24:]
    other = StreamingDataset(ds_dir, shuffle=False, seed=9)
    with pytest.raises(ValueError, match="shuffle"):
        other.load_state_dict(state)
    forced = StreamingDataset(ds_dir, shuffle=False, seed=9, force_override_state_dict=True)
    forced.load_state_dict(state)  # accepted: the saved epoch restarts from its beginning
    assert sorted(s["index"] for s in forced) == list(range(95))
