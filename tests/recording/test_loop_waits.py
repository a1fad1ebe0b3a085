"""The wait split of a loop with no workers, from its timeline: the waits a take cuts off reach the loop's share
before anyone sees them taken, and every wait is split once, exactly, whatever the order of takes and folds;
a real loader at num_workers=0 splits its waits with no ring in shared memory."""

from __future__ import annotations

import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streamscope import events as ev
from streamscope.api.tracing import enable_metrics
from streamscope.engine.dataloader import StreamingDataLoader
from streamscope.engine.dataset import StreamingDataset
from streamscope.events import kinds
from streamscope.events.registry import STAGES, M
from streamscope.events.series import Timeline
from streamscope.recording import attribution as A
from streamscope.recording.loop_waits import TimelineWaits
from tests.engine._data import image_sample, write_dataset
from tests.recording.test_attribution import _Out, _pieces
from tests.support.tracing import clean_tracer  # noqa: F401

pytestmark = pytest.mark.usefixtures("clean_tracer")

US = 1000


def _timeline() -> Timeline:
    b, st_ = kinds.BATCH, kinds.STALL
    return Timeline((b.name, b.cat, "batch", {}), (st_.name, st_.cat, "batch", {}))


def test_a_take_hands_the_waits_to_the_listener_before_the_cut():
    tl, tw = _timeline(), TimelineWaits(since=5)
    seen = []

    def listener(times, codes):
        seen.append((list(times), list(codes), len(tl.marks)))  # the events are still there: not yet cut
        tw.taken(times, codes)

    tl.listener = listener
    for t, code in ((10, None), (30, ~0), (35, 0), (60, ~1), (62, 1)):
        tl.mark(t)
        if code is not None:
            tl.put(code)
    assert tw.head() == (0, 5)
    tl.take()
    assert seen == [([10, 30, 35, 60, 62], [~0, 0, ~1, 1], 5)]
    assert tw.head() == (2, 62) and len(tl.marks) == 1  # the open event begins at 62
    b, e = tw.waits(0, 2)
    assert list(b) == [10, 35] and list(e) == [30, 60] and tw.end_time(1) == 60
    assert tw.end_of(1) is None
    tl.finish()
    tw.close()
    assert tw.end_of(1) == 2


def test_the_loops_share_counts_its_waits_as_decoding_but_for_its_spans():
    out = _Out()
    tl, tw = _timeline(), TimelineWaits(since=0)
    tw.listen(tl)
    att = A.Attributor(tw, 0, out.add, 0)
    tl.mark(0)
    tl.mark(40 * US)
    tl.put(~0)  # a wait of 40 µs
    tl.mark(50 * US)
    tl.put(0)
    att.fold(45 * US, _pieces([(A.DOWNLOAD, 5 * US, 15 * US), (A.READ, 30 * US, 34 * US)], 0, 45 * US), tw.head(), False)
    assert sum(out.split().values()) == 0  # not taken yet: nothing settled, nothing lost
    tl.take()
    att.fold(60 * US, _pieces([], 45 * US, 60 * US), tw.head(), False)
    got = out.split()
    assert got == {"download": 0.01, "decompress": 0.0, "read": 0.004, "decode": 0.026, "idle": 0.0}


@st.composite
def _loops(draw):
    """A loop's back-to-back waits and batches (µs), the clock's exclusive segments, and the times of takes and
    folds; the share starts at 0."""
    n = draw(st.integers(0, 8))
    t = draw(st.integers(0, 5))
    bounds = [(t, None)]
    for j in range(n):
        t += draw(st.integers(1, 40))
        bounds.append((t, ~j))  # a wait ends
        t += draw(st.integers(0, 10))
        bounds.append((t, j))  # its batch ends
    end = t + draw(st.integers(0, 20))
    cuts = sorted(draw(st.lists(st.integers(0, end), max_size=14)))
    segs = [(draw(st.integers(0, 3)), b, e) for b, e in zip(cuts[::2], cuts[1::2]) if e > b]
    takes = draw(st.lists(st.integers(0, end), max_size=5))
    folds = draw(st.lists(st.integers(0, end), max_size=5))
    return bounds, end, segs, takes, folds


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_loops())
def test_every_wait_is_split_once_whatever_the_order_of_takes_and_folds(loop):
    """Each stage's total is the exact overlap of the segments with the waits, the rest of each wait decode (the
    loop's own process); the stages sum to the waits."""
    bounds, end, segs, takes, folds = loop
    out = _Out()
    tl, tw = _timeline(), TimelineWaits(since=0)
    tw.listen(tl)
    att = A.Attributor(tw, 0, out.add, 0)
    segs_ns = [(s, b * US, e * US) for s, b, e in segs]
    actions = [(t, 0, "mark", code) for t, code in bounds]
    actions += [(t, 1, "take", None) for t in takes] + [(t, 2, "fold", None) for t in folds]
    last = 0
    for t, _, kind, code in sorted(actions, key=lambda a: (a[0], a[1])):
        if kind == "mark":
            tl.mark(t * US)
            if code is not None:
                tl.put(code)
        elif kind == "take":
            tl.take()
        else:
            att.fold(t * US, _pieces(segs_ns, last, t * US), tw.head(), final=False)
            last = t * US
    tl.finish()
    tw.close()
    att.fold(end * US, _pieces(segs_ns, last, end * US), tw.head(), final=True)
    want = [0] * 5
    waits = [(a[0], b[0]) for a, b in zip(bounds, bounds[1:]) if b[1] is not None and b[1] < 0]
    for w0, w1 in waits:
        for s, b, e in segs:
            want[s] += max(0, min(e, w1) - max(b, w0))
    want[A.DECODE] += sum(w1 - w0 for w0, w1 in waits) - sum(want[:4])
    assert out.split() == pytest.approx({s: v / 1000 for s, v in zip(STAGES, want)}, abs=1e-6)
    assert att.done


def test_a_loader_with_no_workers_splits_its_waits_with_no_ring(tmp_path):
    data = write_dataset(str(tmp_path / "images"), 120, image_sample, chunk_size=20)
    enable_metrics()
    loader = StreamingDataLoader(StreamingDataset(data), batch_size=4, num_workers=0)
    for _ in range(2):
        for _ in loader:
            time.sleep(0.001)  # a training step
    assert loader._observer.wait_ring is None  # nothing in shared memory, nothing stored per wait
    ev.flush()
    view = ev.metrics_view()
    wait = view.value(M.LOADER_WAIT)
    parts = {s: view.value(M.LOADER_WAIT_STAGE, stage=s) for s in STAGES}
    assert wait > 0 and sum(parts.values()) == pytest.approx(wait, rel=1e-6)
    assert parts["idle"] == 0 and parts["decode"] > 0, parts
