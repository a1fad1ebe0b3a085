"""Worker-to-loop hand-off: groups packed into one shared-memory block, reordered into batch order."""

from __future__ import annotations

import pytest
import torch

from streamscope.stream.batching import Group, Reorder, grouped, pack


def test_pack_shares_one_block_and_keeps_values():
    batches = [
        (0, {"x": torch.arange(6).reshape(2, 3), "y": torch.tensor([1.5, 2.5]), "s": ["a", "b"]}),
        (2, [torch.ones(3, dtype=torch.uint8), (torch.zeros(2, dtype=torch.bool), "t")]),
    ]
    packed = pack(Group(batches))
    assert [j for j, _ in packed] == [0, 2]
    a, b = packed[0][1], packed[1][1]
    assert torch.equal(a["x"], batches[0][1]["x"]) and torch.equal(a["y"], batches[0][1]["y"]) and a["s"] == ["a", "b"]
    assert torch.equal(b[0], batches[1][1][0]) and torch.equal(b[1][0], batches[1][1][1][0]) and b[1][1] == "t"
    ptrs = {t.untyped_storage().data_ptr() for t in (a["x"], a["y"], b[0], b[1][0])}
    assert len(ptrs) == 1 and a["x"].is_shared()


def test_grouped_first_group_is_one_batch_then_by_bytes():
    items = [(j, torch.zeros(1000, dtype=torch.uint8)) for j in range(0, 20, 2)]
    groups = list(grouped(iter(items), group_bytes=3000))
    assert [len(g) for g in groups] == [1, 3, 3, 3]
    assert [j for g in groups for j, _ in g] == [j for j, _ in items]


def test_reorder_hands_out_in_order_and_reports_gaps():
    r = Reorder(3)
    r.add(Group([(3, "a"), (5, "c")]))
    assert list(r.ready()) == [(3, "a")]
    r.add((4, "b"))
    assert list(r.ready()) == [(4, "b"), (5, "c")]
    r.add((7, "e"))
    assert list(r.ready()) == [] and r.pending() == 1 and r.expected == 6


@pytest.mark.parametrize("group_bytes", [0, 1, 10**9])
def test_loader_exact_for_any_group_size(tmp_path, monkeypatch, group_bytes):
    from streamscope.stream.dataloader import StreamingDataLoader
    from streamscope.stream.dataset import StreamingDataset
    from tests.stream._data import write_dataset

    monkeypatch.setenv("STREAMSCOPE_LOADER_GROUP_BYTES", str(group_bytes))
    d = write_dataset(str(tmp_path / "d"), 77, chunk_size=9)
    ref = [b["index"].tolist() for b in StreamingDataLoader(StreamingDataset(d, shuffle=True), batch_size=5)]
    got = [
        b["index"].tolist() for b in StreamingDataLoader(StreamingDataset(d, shuffle=True), batch_size=5, num_workers=2)
    ]
    assert got == ref
