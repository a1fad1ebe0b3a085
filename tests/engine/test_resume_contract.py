"""One resume contract for every dataset kind a StreamingDataLoader drives (issue 33): a plain StreamingDataset, a
CombinedStreamingDataset, a ParallelStreamingDataset and a StreamingRawDataset (through ``engine.mapped``).

For each kind, saved with 0 or 2 workers and resumed with 0 or 2 (the same number, and another):

* every sample is yielded once per epoch (shuffled, two epochs that differ);
* the state saved mid-epoch, written to a checkpoint file and read back into a new loader, yields exactly what the
  uninterrupted run yields after that point: the rest of that epoch, then the next epoch;
* the plans of every kind keep the one contract (``engine.plan_protocol.Plan``): identity, fingerprint, state.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch

from streamscope.engine.combined import CombinedStreamingDataset
from streamscope.engine.dataloader import StreamingDataLoader
from streamscope.engine.dataset import StreamingDataset
from streamscope.engine.parallel import ParallelStreamingDataset
from streamscope.engine.plan_protocol import Plan
from streamscope.raw import StreamingRawDataset
from tests.engine._data import write_dataset
from tests.raw.conftest import file_id, make_folder

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create")

BATCH = 4


@dataclass
class Kind:
    """How to build one dataset kind's loader, read the sample ids of a batch, and what one epoch holds."""

    make: Callable[[], Any]
    ids: Callable[[Any], list[Any]]
    universe: list[Any]


def _numbered(base: int) -> Callable[[int], dict[str, Any]]:
    return lambda i: {"index": base + i, "name": f"s{base + i}"}


def _plain(root: Path) -> Kind:
    d = write_dataset(str(root / "a"), 45, _numbered(0), chunk_size=7)
    return Kind(lambda: StreamingDataset(d), lambda b: b["index"].tolist(), list(range(45)))


def _combined(root: Path) -> Kind:
    a = write_dataset(str(root / "a"), 30, _numbered(0), chunk_size=7)
    b = write_dataset(str(root / "b"), 17, _numbered(1000), chunk_size=5)
    return Kind(
        lambda: CombinedStreamingDataset([StreamingDataset(a), StreamingDataset(b)], seed=3),
        lambda batch: batch["index"].tolist(),
        [*range(30), *range(1000, 1017)],
    )


def _parallel(root: Path) -> Kind:
    a = write_dataset(str(root / "a"), 30, _numbered(0), chunk_size=7)
    b = write_dataset(str(root / "b"), 30, _numbered(1000), chunk_size=4)
    return Kind(
        lambda: ParallelStreamingDataset([StreamingDataset(a), StreamingDataset(b)]),
        lambda batch: list(zip(batch[0]["index"].tolist(), batch[1]["index"].tolist())),
        None,  # type: ignore[arg-type]  # each dataset's samples once; checked per side below
    )


def _raw(root: Path) -> Kind:
    data = make_folder(root, 45)
    cache = str(root / "raw-cache")
    return Kind(
        lambda: StreamingRawDataset(str(data), cache_dir=cache, max_prefetch=8),
        lambda batch: [file_id(x) for x in batch],
        list(range(45)),
    )


KINDS = {"plain": _plain, "combined": _combined, "parallel": _parallel, "raw": _raw}


def _loader(kind: Kind, workers: int) -> StreamingDataLoader:
    return StreamingDataLoader(
        kind.make(),
        batch_size=BATCH,
        num_workers=workers,
        shuffle=True,
        multiprocessing_context="fork" if workers else None,
    )


def _epoch(dl: StreamingDataLoader, kind: Kind) -> list[Any]:
    return [i for b in dl for i in kind.ids(b)]


def _check_once(kind: Kind, epoch: list[Any]) -> None:
    if kind.universe is None:  # parallel: position k pairs sample k of each side, every sample of each side once
        assert sorted(a for a, _ in epoch) == list(range(30))
        assert sorted(b for _, b in epoch) == list(range(1000, 1030))
    else:
        assert sorted(epoch) == sorted(kind.universe)


@pytest.mark.parametrize(("saved_with", "resumed_with"), [(0, 0), (2, 2), (0, 2), (2, 0)])
@pytest.mark.parametrize("name", sorted(KINDS))
def test_mid_epoch_resume_yields_what_the_uninterrupted_run_yields(
    tmp_path: Path, name: str, saved_with: int, resumed_with: int
) -> None:
    kind = KINDS[name](tmp_path)
    ref = _loader(kind, saved_with)
    full = [_epoch(ref, kind), _epoch(ref, kind)]
    for e in full:
        _check_once(kind, e)
    assert full[0] != full[1]  # shuffled per epoch: the check below tells the epochs apart

    run = _loader(kind, saved_with)
    it = iter(run)
    head = [i for _ in range(5) for i in kind.ids(next(it))]  # 5 batches: mid-epoch, not a worker multiple
    torch.save(run.state_dict(), tmp_path / "ckpt.pt")
    del it

    resumed = _loader(kind, resumed_with)
    resumed.load_state_dict(torch.load(tmp_path / "ckpt.pt"))
    tail = _epoch(resumed, kind)
    assert head == full[0][: len(head)]
    assert head + tail == full[0]
    assert _epoch(resumed, kind) == full[1]


@pytest.mark.parametrize("name", sorted(KINDS))
def test_every_kinds_plan_keeps_the_plan_contract(tmp_path: Path, name: str) -> None:
    kind = KINDS[name](tmp_path)
    dl = _loader(kind, 0)
    assert len(_epoch(dl, kind)) > 0
    ds = dl.dataset
    plan = ds.plan(1, BATCH)
    assert isinstance(plan, Plan)
    assert plan.epoch == 1 and plan.num_batches > 2
    assert plan.fingerprint == ds.plan(1, BATCH).fingerprint  # identity: one order, one fingerprint
    assert plan.fingerprint != ds.plan(1, BATCH + 1).fingerprint  # another batch size is another order
    state = plan.state(2)
    assert (state["epoch"], state["batches_consumed"], state["fingerprint"]) == (1, 2, plan.fingerprint)
    assert state["plan"] == plan.describe()
    # worker w of W builds batches w, w + W, ...: two workers together build each batch once
    two = sorted([*plan.batches_for_worker(0, 2), *plan.batches_for_worker(1, 2)])
    assert two == list(range(plan.num_batches)) == list(plan.batches_for_worker(0, 0))
    assert list(plan.batches_for_worker(1, 2, start_batch=3)) == list(range(4, plan.num_batches, 2))
