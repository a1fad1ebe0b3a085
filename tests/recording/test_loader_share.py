"""A loader worker's share (recording/loader_share.py): its items, then its trace parcel; end to end in
tests/engine/test_trace_handover.py."""

from __future__ import annotations

import pickle

from streamscope.engine.batching import Group, Reorder
from streamscope.recording import loader_share
from streamscope.recording.loader_share import ParcelAcks, Ticket
from tests.engine.test_batching import _counted

_PARCEL = Ticket(parcel=True)
_NONE = Ticket()


def test_a_worker_share_parcel_rides_with_the_last_group_else_comes_alone(monkeypatch):
    monkeypatch.setattr(loader_share, "_hand_over", lambda ticket: "PARCEL")
    last = Group([(2, "c")])
    last.last = True
    items = list(_PARCEL.share(iter([Group([(0, "a"), (1, "b")]), last])))
    assert items == [[(0, "a"), (1, "b")], [(2, "c")]] and items[1].parcel == "PARCEL" and items[0].parcel is None
    assert Reorder(0).add(items[1]) == "PARCEL" and items[1].parcel is None  # the loop takes it once
    # no group marked last (e.g. batches sent one by one): the parcel is an item of its own, after the last one
    assert list(_PARCEL.share(iter([(0, "a"), (1, "b")]))) == [(0, "a"), (1, "b"), "PARCEL"]
    assert list(_PARCEL.share(iter([Group([(0, "a")])])))[-1] == "PARCEL"
    # without parcels nothing is attached and nothing added
    assert list(_NONE.share(iter([last]))) == [[(2, "c")]] and last.parcel is None


def test_an_abandoned_worker_share_closes_its_batch_generator_first():
    log: list[str] = []
    share = _NONE.share(_counted(5, log))
    assert next(share)[0] == 0
    share.close()  # the loop left early
    assert log == ["ended"]


def test_a_ticket_pickles_for_spawned_workers():
    # (its shared arrays go to spawned workers only as they start: pickled here without them)
    back = pickle.loads(pickle.dumps(Ticket(parcel=True, workers=3)))
    assert back == Ticket(parcel=True, workers=3) and back.ring is None and back.acks is None


def test_acks_abandon_only_the_parcels_not_taken():
    acks = ParcelAcks(3)
    acks.flags[1] = loader_share.PARCEL_RECEIVED
    acks.abandon_rest()
    assert list(acks.flags) == [loader_share.PARCEL_ABANDONED, loader_share.PARCEL_RECEIVED, 2]
