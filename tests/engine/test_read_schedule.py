"""engine/read_schedule.py: the prefetch order and release points every dataset kind reads by."""

from __future__ import annotations

import random
import warnings

from streamscope.engine.plan import make_plan
from streamscope.engine.read_schedule import ScheduledReads, schedule_from_uses


def test_schedule_from_uses_orders_by_first_use_and_keeps_the_last():
    uses = [(0, [3, 1]), (1, [1]), (2, [0, 3]), (4, [2])]
    assert schedule_from_uses(uses) == [(3, 0, 2), (1, 0, 1), (0, 2, 2), (2, 4, 4)]
    assert schedule_from_uses([]) == []


def test_the_plans_schedule_is_what_the_workers_batches_read():
    """EpochPlan.chunk_schedule_for_worker (what StreamingDataset prefetches by) against the chunks each of the
    worker's batches actually reads, over random plans: shuffles, windows, regions, empty chunks, resumes."""
    rng = random.Random(7)
    checked = 0
    while checked < 150:
        sizes = [rng.randint(0 if rng.random() < 0.1 else 1, 40) for _ in range(rng.randint(1, 25))]
        ws = rng.choice([1, 2, 3])
        kw = dict(
            world_size=ws,
            rank=rng.randrange(ws),
            batch_size=rng.choice([1, 3, 8]),
            drop_last=rng.random() < 0.5,
            shuffle=rng.random() < 0.7,
            seed=rng.randrange(50),
            epoch=rng.randint(1, 3),
        )
        if rng.random() < 0.3:
            kw["shuffle_buffer"] = rng.choice([5, 50])
        if rng.random() < 0.2:
            kw["regions"] = [(c, 0, s // 2) for c, s in enumerate(sizes) if s > 1]
        if sum(sizes) < ws or (kw.get("regions") is not None and sum(s // 2 for s in sizes if s > 1) < ws):
            continue
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # uneven splits warn; not under test here
            plan = make_plan(sizes, **kw)
        nw = rng.choice([0, 1, 2, 3])
        wid = rng.randrange(max(1, nw))
        start = rng.randrange(plan.num_batches + 1)
        batches = plan.batches_for_worker(wid, nw, start)
        # the chunks of each batch in the order its samples read them
        read = schedule_from_uses((n, dict.fromkeys(plan.batch_arrays(j)[0].tolist())) for n, j in enumerate(batches))
        assert plan.chunk_schedule_for_worker(wid, nw, start) == read
        checked += 1


class _Reader:
    def __init__(self, cached: bool) -> None:
        self.cache = object() if cached else None
        self.log: list[object] = []

    def start(self, order: list[int]) -> None:
        self.log.append(("start", order))

    def finished_with(self, chunk: int) -> None:
        self.log.append(("release", chunk))

    def stop(self) -> None:
        self.log.append("stop")


def test_cached_readers_prefetch_in_order_and_release_after_the_last_use():
    cached, local = _Reader(True), _Reader(False)
    reads = ScheduledReads([cached, local], [[(5, 0, 1), (2, 0, 0), (7, 1, 2)], [(0, 0, 2)]])
    assert cached.log == [("start", [5, 2, 7])] and local.log == []
    for n in range(3):
        reads.batch_done(n)
    reads.stop()
    assert cached.log[1:] == [("release", 2), ("release", 5), ("release", 7), "stop"]
    assert local.log == ["stop"]  # read in place: nothing fetched, nothing released


def test_an_elastic_resumes_schedule_is_what_its_batches_read():
    """A plan continued with another world size (resume_plan) covers the samples left: its schedule too."""
    from streamscope.engine.resume import resume_plan

    sizes = [13, 7, 20, 5, 11, 9]
    order = dict(drop_last=False, shuffle=True, seed=3)
    old = make_plan(sizes, world_size=2, rank=0, batch_size=4, epoch=1, **order)
    for rank in range(3):
        plan, start = resume_plan(old.state(2), sizes, world_size=3, rank=rank, batch_size=3, **order)
        assert plan.resumed_from
        for nw, wid in ((0, 0), (2, 1)):
            batches = plan.batches_for_worker(wid, nw, start)
            read = schedule_from_uses(
                (n, dict.fromkeys(plan.batch_arrays(j)[0].tolist())) for n, j in enumerate(batches)
            )
            assert read and plan.chunk_schedule_for_worker(wid, nw, start) == read
