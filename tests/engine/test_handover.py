"""The trace transport between a loader and its workers (stream.handover); end to end in test_trace_handover."""

from __future__ import annotations

from streamscope.engine.batch_mode import BatchMode
from streamscope.engine.batching import Group, Reorder
from tests.engine.test_batching import _counted

_PARCEL = BatchMode(epoch=1, start=0, batch_size=1, parcel=True)
_NONE = BatchMode(epoch=1, start=0, batch_size=1)


def test_a_worker_share_parcel_rides_with_the_last_group_else_comes_alone(monkeypatch):
    from streamscope.engine import handover

    monkeypatch.setattr(handover, "_hand_over", lambda mode: "PARCEL")
    last = Group([(2, "c")])
    last.last = True
    items = list(handover.worker_share(iter([Group([(0, "a"), (1, "b")]), last]), _PARCEL))
    assert items == [[(0, "a"), (1, "b")], [(2, "c")]] and items[1].parcel == "PARCEL" and items[0].parcel is None
    assert Reorder(0).add(items[1]) == "PARCEL" and items[1].parcel is None  # the loop takes it once
    # no group marked last (e.g. batches sent one by one): the parcel is an item of its own, after the last one
    assert list(handover.worker_share(iter([(0, "a"), (1, "b")]), _PARCEL)) == [(0, "a"), (1, "b"), "PARCEL"]
    assert list(handover.worker_share(iter([Group([(0, "a")])]), _PARCEL))[-1] == "PARCEL"
    # without parcels nothing is attached and nothing added
    assert list(handover.worker_share(iter([last]), _NONE)) == [[(2, "c")]] and last.parcel is None


def test_an_abandoned_worker_share_closes_its_batch_generator_first(monkeypatch):
    from streamscope.engine import handover

    log: list[str] = []
    share = handover.worker_share(_counted(5, log), _NONE)
    assert next(share)[0] == 0
    share.close()  # the loop left early
    assert log == ["ended"]
