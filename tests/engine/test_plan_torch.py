"""The plan under a real torch DataLoader with worker processes: order, resume, epoch boundaries, DDP ranks."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
from torch.utils.data import DataLoader, IterableDataset, get_worker_info  # noqa: E402

from streamscope.engine.plan import make_plan  # noqa: E402
from streamscope.engine.resume import ResumeState  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")

SIZES = [7, 3, 12, 1, 9, 5]  # 37 samples


def _plan(epoch, rank=0, world_size=1, batch_size=4):
    return make_plan(
        SIZES,
        world_size=world_size,
        rank=rank,
        batch_size=batch_size,
        drop_last=False,
        shuffle=True,
        seed=1234,
        epoch=epoch,
        shuffle_buffer=6,
    )


class PlanBatches(IterableDataset):
    """Yields ``(batch_index, sample ids)`` for the batches of this worker, from ``start`` on."""

    def __init__(self, epoch: int, start: int, rank: int = 0, world_size: int = 1) -> None:
        self.epoch, self.start, self.rank, self.world_size = epoch, start, rank, world_size

    def __iter__(self):
        info = get_worker_info()
        w, nw = (info.id, info.num_workers) if info is not None else (0, 0)
        plan = _plan(self.epoch, self.rank, self.world_size)  # each worker process builds its own plan
        for j in plan.batches_for_worker(w, nw, self.start):
            c, i = plan.batch_arrays(j)
            yield j, [int(x) for x in (c * 100 + i)]


def _run(epoch, start, num_workers, rank=0, world_size=1, stop_after=None):
    """Iterate like a training loop; return the (batch, ids) pairs received (stopping early if asked)."""
    loader = DataLoader(PlanBatches(epoch, start, rank, world_size), batch_size=None, num_workers=num_workers)
    got = []
    for j, ids in loader:
        got.append((int(j), ids))
        if stop_after is not None and len(got) == stop_after:
            break
    return got


@pytest.mark.parametrize("num_workers", [0, 2, 3])
def test_loader_receives_batches_in_plan_order(num_workers):
    plan = _plan(1)
    got = _run(1, 0, num_workers)
    assert [j for j, _ in got] == list(range(plan.num_batches))
    assert [ids for _, ids in got] == [[c * 100 + i for c, i in plan.batch(j)] for j in range(plan.num_batches)]


@pytest.mark.parametrize(("before", "after", "stop"), [(2, 0, 3), (0, 2, 5), (2, 3, 9), (3, 2, 1)])
def test_resume_mid_epoch_after_worker_change(before, after, stop):
    plan = _plan(1)
    seen = _run(1, 0, before, stop_after=stop)
    state = json.loads(json.dumps(plan.state(len(seen))))  # what a checkpoint file holds
    epoch, start = ResumeState.from_dict(state).start(_plan(1))
    assert (epoch, start) == (1, stop)
    rest = _run(epoch, start, after)
    assert [j for j, _ in seen + rest] == list(range(plan.num_batches))
    assert seen + rest == _run(1, 0, 0)  # exactly the uninterrupted epoch


def test_resume_across_epoch_boundary_two_ranks():
    """World size 2: checkpoint at the end of epoch 1 and mid epoch 2, resume with other worker counts."""
    for rank in range(2):
        full = [(1, x) for x in _run(1, 0, 0, rank, 2)] + [(2, x) for x in _run(2, 0, 0, rank, 2)]
        k = _plan(1, rank, 2).num_batches
        assert k == _plan(1, 1 - rank, 2).num_batches  # both ranks step together
        stream = [(1, x) for x in _run(1, 0, 2, rank, 2)]
        state = _plan(1, rank, 2).state(len(stream))  # checkpoint after the last batch of epoch 1
        epoch, start = ResumeState.from_dict(state).start(_plan(1, rank, 2))
        assert (epoch, start) == (2, 0)
        part = _run(epoch, start, 0, rank, 2, stop_after=2)
        stream += [(2, x) for x in part]
        epoch, start = ResumeState.from_dict(_plan(2, rank, 2).state(len(part))).start(_plan(2, rank, 2))
        stream += [(2, x) for x in _run(epoch, start, 3, rank, 2)]
        assert stream == full
    ids = [i for r in range(2) for e in (1, 2) for _, b in _run(e, 0, 0, r, 2) for i in b]
    assert sorted(ids) == sorted([c * 100 + i for c, s in enumerate(SIZES) for i in range(s)] * 2)
