"""The wait split's pieces: the stage clock, the interval arithmetic, and folds that count every overlap once."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamscope.events import attribution as A
from streamscope.events.registry import STAGES, M

MS = 1_000_000


class _Clock(A.StageClock):
    """A stage clock driven by hand: (stage, begin, end) segments in ms."""

    def __init__(self) -> None:
        super().__init__()
        self.pending: list[tuple[int, int, int]] = []

    def take(self, now: int):  # type: ignore[override]
        segs = [s for s in self.pending if s[2] <= now]
        self.pending = [s for s in self.pending if s[2] > now]
        cut = [(st, b, now) for st, b, e in self.pending if b < now]  # in progress: cut at now, goes on from there
        self.pending = [(st, max(b, now), e) for st, b, e in self.pending]
        segs = sorted(segs + cut, key=lambda s: s[1])
        return (
            np.array([b for _, b, _ in segs], np.int64),
            np.array([e for _, _, e in segs], np.int64),
            np.array([s for s, _, _ in segs], np.int64),
        )


def _fold_at(att: A.Attributor, now: int, monkeypatch: pytest.MonkeyPatch, final: bool = False) -> None:
    monkeypatch.setattr(A, "_mono", lambda: now)
    att.fold(final)


def test_the_clock_shows_the_highest_priority_stage_and_never_overlaps(monkeypatch):
    t = [0]
    monkeypatch.setattr(A, "_mono", lambda: t[0])
    c = A.StageClock()
    for at, op, stage in [(0, "enter", A.DECODE), (10, "enter", A.DOWNLOAD), (30, "exit", A.DOWNLOAD), (35, "enter", A.READ),
                          (40, "exit", A.READ), (50, "exit", A.DECODE), (60, "enter", A.READ)]:  # fmt: skip
        t[0] = at
        getattr(c, op)(stage)
    s0, s1, stages = c.take(70)
    assert list(zip(s0.tolist(), s1.tolist(), stages.tolist())) == [
        (0, 10, A.DECODE), (10, 30, A.DOWNLOAD), (30, 35, A.DECODE), (35, 40, A.READ), (40, 50, A.DECODE),
        (60, 70, A.READ),
    ]  # fmt: skip
    assert c.take(80)[0].tolist() == [70]  # the read still open goes on from the cut


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 1000), st.integers(0, 100)), max_size=12),
    st.lists(st.tuples(st.integers(0, 1000), st.integers(0, 100)), max_size=12),
)
def test_covered_is_the_measure_of_the_intersection(a_list, b_list):
    def disjoint(pairs):
        out, end = [], -1
        for s, n in sorted(pairs):
            s = max(s, end)
            out.append((s, s + n))
            end = s + n
        return out

    b = disjoint(b_list)
    a = [(s, s + n) for s, n in a_list]
    got = A._covered(
        np.array([x for x, _ in a], np.int64), np.array([y for _, y in a], np.int64),
        np.array([x for x, _ in b], np.int64), np.array([y for _, y in b], np.int64),
    )  # fmt: skip
    want = [sum(max(0, min(y, e) - max(x, s)) for s, e in b) for x, y in a]
    assert got.tolist() == want


def _att(workers: int) -> tuple[A.Attributor, A.WaitRing, _Clock, dict[str, float]]:
    ring, clock, out = A.WaitRing(), _Clock(), {}
    att = A.Attributor(ring, workers, clock, lambda k, v: out.__setitem__(k, out.get(k, 0.0) + v))
    return att, ring, clock, out


def _split(out: dict[str, float]) -> dict[str, float]:
    return {s: round(out.get(f"{M.LOADER_WAIT_STAGE.name}|stage={s}", 0.0) * 1000, 6) for s in STAGES[:-1]}


def test_each_overlap_counts_once_whatever_the_order_of_folds(monkeypatch):
    """Segments and waits close in any order across folds; every (segment, wait) overlap is counted once, as
    the worker's share (one of two workers)."""
    att, ring, clock, out = _att(2)
    clock.pending = [(A.DOWNLOAD, 0, 40 * MS), (A.DECODE, 40 * MS, 100 * MS), (A.READ, 100 * MS, 130 * MS)]
    ring.end(10 * MS, 50 * MS)  # 30 ms download + 10 ms decode
    _fold_at(att, 60 * MS, monkeypatch)  # the decode segment is cut at 60: its rest comes later
    ring.begin(90 * MS)
    _fold_at(att, 95 * MS, monkeypatch)  # a wait in progress is not counted yet
    ring.end(90 * MS, 120 * MS)  # 10 ms decode + 20 ms read
    _fold_at(att, 140 * MS, monkeypatch)
    assert _split(out) == {"download": 15.0, "decompress": 0.0, "read": 10.0, "decode": 10.0}
    _fold_at(att, 200 * MS, monkeypatch)
    assert _split(out) == {"download": 15.0, "decompress": 0.0, "read": 10.0, "decode": 10.0}  # nothing twice


def test_a_final_fold_counts_the_wait_in_progress_up_to_now(monkeypatch):
    att, ring, clock, out = _att(1)
    clock.pending = [(A.DECODE, 0, 50 * MS)]
    ring.begin(20 * MS)
    _fold_at(att, 60 * MS, monkeypatch, final=True)
    assert _split(out)["decode"] == 30.0


def test_the_loops_own_process_counts_its_wait_as_decoding_but_for_its_spans(monkeypatch):
    att, ring, clock, out = _att(0)
    clock.pending = [(A.DOWNLOAD, 5 * MS, 15 * MS), (A.READ, 30 * MS, 34 * MS)]
    ring.end(0, 40 * MS)
    _fold_at(att, 50 * MS, monkeypatch)
    assert _split(out) == {"download": 10.0, "decompress": 0.0, "read": 4.0, "decode": 26.0}


def test_a_ring_keeps_the_last_waits_and_skips_the_overwritten_ones():
    ring = A.WaitRing()
    for i in range(ring.SIZE + 10):
        ring.end(i * 10, i * 10 + 5)
    k, b, e, open_since = ring.read(0)
    assert k == ring.SIZE + 10 and len(b) == ring.SIZE and b[0] == 100 and e[-1] == (ring.SIZE + 9) * 10 + 5
    assert open_since == 0
    ring.begin(7)
    k2, b2, _e2, open_since = ring.read(k)
    assert k2 == k and len(b2) == 0 and open_since == 7
