"""Worker-to-loop hand-off: groups packed into one shared-memory block, reordered into batch order."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from streamscope.engine.batching import Group, Reorder, batch_bytes, grouped, pack


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
    from streamscope.engine.dataloader import StreamingDataLoader
    from streamscope.engine.dataset import StreamingDataset
    from tests.engine._data import write_dataset

    monkeypatch.setenv("STREAMSCOPE_LOADER_GROUP_BYTES", str(group_bytes))
    d = write_dataset(str(tmp_path / "d"), 77, chunk_size=9)
    ref = [b["index"].tolist() for b in StreamingDataLoader(StreamingDataset(d, shuffle=True), batch_size=5)]
    got = [
        b["index"].tolist() for b in StreamingDataLoader(StreamingDataset(d, shuffle=True), batch_size=5, num_workers=2)
    ]
    assert got == ref


def test_arena_pool_reuses_freed_slots_and_never_busy_ones():
    from streamscope.engine.batching import MAX_SLOTS, ArenaFlags, ArenaPool

    flags = ArenaFlags(2)
    pool = ArenaPool(flags.flags, worker_id=1, arena_bytes=4096)
    first = pool.acquire(100)
    assert first.slot == MAX_SLOTS and first.tensor.numel() == 4096  # worker 1's first slot
    flags.flags[first.slot] = 1  # sent, still held by the loop
    second = pool.acquire(100)
    assert second.slot == MAX_SLOTS + 1 and second.tensor.untyped_storage().data_ptr() != (
        first.tensor.untyped_storage().data_ptr()
    )
    flags.flags[first.slot] = 0  # the loop dropped it
    again = pool.acquire(100)
    assert again is first and again.used == 0
    big = pool.acquire(10_000)  # a larger arena replaces the free slot's small one
    assert big.slot == first.slot and big.tensor.numel() == 10_000
    for k in range(MAX_SLOTS):
        flags.flags[MAX_SLOTS + k] = 1
    assert pool.acquire(100).slot == -1  # every slot busy: an unpooled block


def test_arena_flags_free_a_slot_only_when_the_group_is_dropped():
    from streamscope.engine.batching import Arena, ArenaFlags

    flags = ArenaFlags(1)
    arena = Arena(3, 1024)
    view = arena.take(16)
    assert view is not None and arena.take(2000) is None
    g = Group([(0, view)])
    g.slot, g.anchor = 3, arena.tensor
    flags.flags[3] = 1
    del arena, view
    flags.watch(g)
    assert g.anchor is None
    flags.release_dropped()
    assert flags.flags[3] == 1  # the group still holds the tensor
    g.clear()
    flags.release_dropped()
    assert flags.flags[3] == 0


def _storage_inode(t: torch.Tensor) -> int:
    import os

    fd, _ = t.untyped_storage()._share_fd_cpu_()
    return os.fstat(fd).st_ino


def test_loader_reuses_arenas_when_batches_are_dropped(tmp_path, monkeypatch):
    from streamscope.engine.dataloader import StreamingDataLoader
    from streamscope.engine.dataset import StreamingDataset
    from tests.engine._data import image_sample, write_dataset

    monkeypatch.setenv("STREAMSCOPE_LOADER_GROUP_BYTES", "1")  # one batch per group: many groups
    d = write_dataset(str(tmp_path / "d"), 240, image_sample, chunk_size=40)
    ref = [b["image"].clone() for b in StreamingDataLoader(StreamingDataset(d, shuffle=True), batch_size=8)]
    inodes, n = set(), 0
    for j, b in enumerate(StreamingDataLoader(StreamingDataset(d, shuffle=True), batch_size=8, num_workers=2)):
        assert torch.equal(b["image"], ref[j])
        inodes.add(_storage_inode(b["image"]))
        n += 1
        del b
    assert n == len(ref) == 30
    assert len(inodes) < n  # the workers decoded later groups into arenas the loop had dropped


def test_loader_never_overwrites_batches_the_loop_keeps(tmp_path, monkeypatch):
    from streamscope.engine.dataloader import StreamingDataLoader
    from streamscope.engine.dataset import StreamingDataset
    from tests.engine._data import image_sample, write_dataset

    monkeypatch.setenv("STREAMSCOPE_LOADER_GROUP_BYTES", "1")
    d = write_dataset(str(tmp_path / "d"), 240, image_sample, chunk_size=40)
    ref = [b["image"].clone() for b in StreamingDataLoader(StreamingDataset(d, shuffle=True), batch_size=8)]
    kept = list(StreamingDataLoader(StreamingDataset(d, shuffle=True), batch_size=8, num_workers=2))
    assert len(kept) == 30  # more groups than pooled slots (2 workers x MAX_SLOTS)
    for j, b in enumerate(kept):
        assert torch.equal(b["image"], ref[j]), f"batch {j} was overwritten"


def _counted(n: int, log: list[str]):
    """``n`` batches of 1,000 bytes; ``log`` notes when the generator ends (its cleanup ran)."""
    try:
        for j in range(n):
            yield j, torch.zeros(1000, dtype=torch.uint8)
    finally:
        log.append("ended")


@settings(max_examples=60, deadline=None)
@given(n=st.integers(0, 40), group_bytes=st.integers(1, 9000), off_by=st.sampled_from([None, -2, -1, 0, 1, 2]))
def test_grouped_delivers_every_batch_and_marks_only_a_final_group_sent_after_the_end(n, group_bytes, off_by):
    log: list[str] = []
    total = -1 if off_by is None else max(0, n + off_by)
    seen: list[tuple[bool, bool]] = []  # per group: marked last, generator ended before it was sent
    got = []
    for g in grouped(_counted(n, log), group_bytes=group_bytes, total=total):
        seen.append((g.last, bool(log)))
        got += [j for j, _ in g]
    assert got == list(range(n))
    assert all(not last for last, _ in seen[:-1])  # only the final group can be the last
    assert all(ended for last, ended in seen if last)  # a group marked last went out after the generator ended
    if n and total == n:
        assert seen[-1] == (True, True)  # the announced count: the final group always waits for the end


class _FreezeLog:
    """Stands for the ``gc`` module in batching: notes each ``freeze`` by pid in a file (O_APPEND, one line)."""

    path = ""

    @staticmethod
    def freeze() -> None:
        with open(_FreezeLog.path, "a") as f:
            f.write(f"{os.getpid()}\n")


@pytest.mark.parametrize("workers", [0, 2])
def test_a_worker_freezes_its_inherited_heap_once(tmp_path, monkeypatch, workers):
    """A full collection in a forked worker would visit (and copy the pages of) every object it inherited."""
    from streamscope.engine import batching
    from streamscope.engine.dataloader import StreamingDataLoader
    from streamscope.engine.dataset import StreamingDataset
    from tests.engine._data import write_dataset

    _FreezeLog.path = str(tmp_path / "frozen.txt")
    monkeypatch.setattr(batching, "gc", _FreezeLog)
    d = write_dataset(str(tmp_path / "d"), 40, chunk_size=8)
    loader = StreamingDataLoader(StreamingDataset(d), batch_size=4, num_workers=workers, persistent_workers=workers > 0)
    for _ in range(2):
        assert sum(1 for _ in loader) == 10
    if workers:
        loader._iterator._shutdown_workers()
    pids = Path(_FreezeLog.path).read_text().split() if os.path.exists(_FreezeLog.path) else []
    assert len(pids) == workers and len(set(pids)) == workers and str(os.getpid()) not in pids


def test_reorder_counts_a_group_s_bytes_as_its_batches_are_handed_out():
    """The loader's bytes (streamscope.loader.bytes) follow its samples: a group counts in proportion to its
    batches handed out, not all at once when it arrives (issue 31: MB/s jumped while samples/s did not)."""
    r = Reorder(0, count_bytes=True)
    g = Group([(0, "a"), (2, "c"), (4, "e"), (6, "g")])
    g.nbytes = 4000
    r.add(g)
    assert r.bytes == 4000 and r.delivered_bytes() == 0
    seen = []
    for j in (1, 3, 5, 7):  # the other worker's batches, one at a time
        h = Group([(j, "x")])
        h.nbytes = 10
        r.add(h)
        for _ in r.ready():
            seen.append(r.delivered_bytes())
    assert seen == [1000, 1010, 2010, 2020, 3020, 3030, 4030, 4040]  # never less than a read before
    assert r.delivered_bytes() == r.bytes == 4040 and r._groups[1][-1][0] == [7]  # handed out: folded in
    r.add((8, {"x": torch.zeros(25, dtype=torch.uint8)}))  # a single batch: counted as it comes
    assert list(r.ready())[0][0] == 8 and r.delivered_bytes() == 4065
    # the workers list each group's batch numbers (the loop's thread need not)
    items = [(j, torch.zeros(1000, dtype=torch.uint8)) for j in range(0, 20, 2)]
    assert [g.numbers for g in grouped(iter(items), group_bytes=3000)] == [[0], [2, 4, 6], [8, 10, 12], [14, 16, 18]]


def _walked(batch):
    """``batch_bytes`` the generic way: a shallow copy is no batch a collator built."""
    return batch_bytes(dict(batch) if isinstance(batch, dict) else list(batch) if isinstance(batch, list) else batch)


@pytest.mark.parametrize(
    "sample",
    [
        lambda i: {"img": np.full((3, 4, 5), i, np.uint8), "label": i, "name": f"s{i}", "w": float(i)},
        lambda i: {"t": torch.full((2, 3), i, dtype=torch.float16), "flag": bool(i % 2)},
        lambda i: (np.arange(i, i + 6, dtype=np.int32), i),
    ],
    ids=["dict", "tensor", "tuple"],
)
def test_a_collated_batch_counts_the_bytes_the_walk_counts(tmp_path, sample):
    """A loop with no workers counts each batch's bytes from its collator (``collate.LAST``): the same number
    as walking the batch's tensors, for every column kind the collator builds."""
    from streamscope import StreamingDataLoader, StreamingDataset, optimize
    from streamscope.engine import collate

    d = str(tmp_path / "ds")
    optimize(fn=sample, inputs=list(range(40)), output_dir=d, chunk_bytes=1 << 12, num_workers=1)
    n = 0
    for batch in StreamingDataLoader(StreamingDataset(d), batch_size=6):
        assert collate.LAST[0] is batch  # the column-wise path built it
        assert batch_bytes(batch) == _walked(batch) > 0
        n += 1
    assert n == 7


def test_tokens_batches_count_their_bytes(tmp_path):
    from streamscope import StreamingDataLoader, StreamingDataset, TokensLoader, optimize
    from streamscope.engine import collate

    d = str(tmp_path / "tok")
    optimize(
        fn=lambda i: torch.arange(i, i + 50, dtype=torch.int32),
        inputs=list(range(20)),
        output_dir=d,
        chunk_size=4 * 50 * 8,
        item_loader=TokensLoader(),
        num_workers=1,
    )
    ds = StreamingDataset(d, item_loader=TokensLoader(block_size=16))
    for batch in StreamingDataLoader(ds, batch_size=4):
        assert collate.LAST[0] is batch and batch_bytes(batch) == batch.nbytes == _walked([batch])
