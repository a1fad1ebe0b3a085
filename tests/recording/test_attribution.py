"""The wait split's pieces: the stage clock, the interval arithmetic, the ring, and shares that settle every
(wait, worker) pair once: by the worker while its share runs, by the loader's process after it ended."""

from __future__ import annotations

import multiprocessing as mp

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streamscope.events.registry import STAGES, M
from streamscope.recording import attribution as A
from streamscope.recording import waits as W

MS = 1_000_000
_E = np.empty(0, np.int64)


def _segs(*triples: tuple[int, int, int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(stage, begin ms, end ms) -> the clock's arrays in ns."""
    return (
        np.array([b * MS for _, b, _ in triples], np.int64),
        np.array([e * MS for _, _, e in triples], np.int64),
        np.array([s for s, _, _ in triples], np.int64),
    )


NONE = (_E, _E, _E)


class _Out(dict):
    def add(self, k: str, v: float) -> None:
        self[k] = self.get(k, 0.0) + v

    def split(self) -> dict[str, float]:
        """Per stage, in ms (rounded to the ns)."""
        return {s: round(self.get(f"{M.LOADER_WAIT_STAGE.name}|stage={s}", 0.0) * 1000, 6) for s in STAGES}


def _ring(workers: int, out: _Out) -> A.WaitRing:
    """A ring whose tails this test settles by hand (not by this process's flushes)."""
    ring = A.WaitRing(workers, mp.get_context("fork"))
    W.OWNERS[:] = [r for r in W.OWNERS if r() is not ring]
    assert ring.owner is not None
    ring.owner.add = out.add
    return ring


def _share(ring: A.WaitRing, workers: int, out: _Out, start_ms: int, worker: int = 0) -> A.Attributor:
    att = A.Attributor(ring, workers, out.add, start_ms * MS, worker)
    if workers > 0 and not ring.claim(worker, att.gen):
        att.done = True
    return att


def test_the_clock_shows_the_highest_priority_stage_and_never_overlaps(monkeypatch):
    t = [0]
    monkeypatch.setattr(A, "_mono", lambda: t[0])
    c = A.StageClock()
    for at, op, stage in [(0, "enter", A.DECODE), (10, "enter", A.DOWNLOAD), (30, "exit", A.DOWNLOAD), (35, "enter", A.READ),
                          (40, "exit", A.READ), (50, "exit", A.DECODE), (60, "enter", A.READ)]:  # fmt: skip
        t[0] = at
        getattr(c, op)(stage)
    t[0] = 70
    now, (s0, s1, stages) = c.take()
    assert now == 70
    assert list(zip(s0.tolist(), s1.tolist(), stages.tolist())) == [
        (0, 10, A.DECODE), (10, 30, A.DOWNLOAD), (30, 35, A.DECODE), (35, 40, A.READ), (40, 50, A.DECODE),
        (60, 70, A.READ),
    ]  # fmt: skip
    t[0] = 80
    assert c.take()[1][0].tolist() == [70]  # the read still open goes on from the cut


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
    got = W._covered(
        np.array([x for x, _ in a], np.int64), np.array([y for _, y in a], np.int64),
        np.array([x for x, _ in b], np.int64), np.array([y for _, y in b], np.int64),
    )  # fmt: skip
    want = [sum(max(0, min(y, e) - max(x, s)) for s, e in b) for x, y in a]
    assert got.tolist() == want


def test_each_wait_is_settled_once_whatever_the_order_of_folds():
    """A wait is settled at the first fold that reads it complete, with the segments up to then; folds before
    count nothing of it, folds after nothing again. One of two workers: half of each wait is its share."""
    out = _Out()
    ring = _ring(2, out)
    ring.new_iteration(2)
    att = _share(ring, 2, out, 0)
    ring.end(10 * MS, 50 * MS)  # download 10-40, decode 40-50
    att.fold(60 * MS, _segs((A.DOWNLOAD, 0, 40), (A.DECODE, 40, 60)), ring.head(), final=False)
    assert out.split() == {"download": 15.0, "decompress": 0.0, "read": 0.0, "decode": 5.0, "idle": 0.0}
    ring.begin(90 * MS)
    att.fold(95 * MS, _segs((A.DECODE, 60, 95)), ring.head(), final=False)  # a wait in progress: nothing yet
    assert sum(out.split().values()) == 20.0
    ring.end(90 * MS, 120 * MS)  # decode 90-100, read 100-120
    att.fold(140 * MS, _segs((A.DECODE, 95, 100), (A.READ, 100, 130)), ring.head(), final=False)
    assert out.split() == {"download": 15.0, "decompress": 0.0, "read": 10.0, "decode": 10.0, "idle": 0.0}
    att.fold(200 * MS, NONE, ring.head(), final=False)
    assert out.split() == {"download": 15.0, "decompress": 0.0, "read": 10.0, "decode": 10.0, "idle": 0.0}


def test_a_share_that_ends_while_the_loop_waits_leaves_the_rest_to_the_loaders_process():
    """The worker stops at 60 ms (its last batch sent) in a wait that began at 40 and ends at 100: it settles
    nothing of it, its tail does: its decoding until 60, idle from 60 to 100."""
    out = _Out()
    ring = _ring(1, out)
    ring.new_iteration(1)
    att = _share(ring, 1, out, 0)
    ring.begin(40 * MS)
    att.fold(60 * MS, _segs((A.DECODE, 30, 60)), ring.head(), final=True)
    assert out.split()["decode"] == 0.0 and att.done
    ring.end(40 * MS, 100 * MS)
    ring.owner.settle()
    assert out.split() == {"download": 0.0, "decompress": 0.0, "read": 0.0, "decode": 20.0, "idle": 40.0}
    ring.begin(120 * MS)
    ring.end(120 * MS, 150 * MS)  # after the share's end: all idle
    ring.close_iteration(1)
    assert out.split() == {"download": 0.0, "decompress": 0.0, "read": 0.0, "decode": 20.0, "idle": 70.0}
    ring.owner.settle()
    assert out.split()["idle"] == 70.0  # settled once


def test_a_wait_complete_after_the_stop_is_settled_by_the_share_with_what_it_did_until_then():
    """The head is read after the stop: a wait that ended meanwhile is complete, and the share has no segment
    after its stop, so it settles the whole wait itself (nothing left for a tail)."""
    out = _Out()
    ring = _ring(1, out)
    ring.new_iteration(1)
    att = _share(ring, 1, out, 0)
    ring.end(40 * MS, 100 * MS)  # ended at 100, read by a final fold whose clock stopped at 60
    att.fold(60 * MS, _segs((A.DECODE, 30, 60)), ring.head(), final=True)
    assert out.split() == {"download": 0.0, "decompress": 0.0, "read": 0.0, "decode": 20.0, "idle": 40.0}
    ring.close_iteration(1)
    assert sum(out.split().values()) == 60.0


def test_the_next_epochs_shares_never_count_a_wait_of_the_previous_epoch():
    """The bug this design removes: a worker whose share ended while the loop waited counted that wait up to
    its stop, and the next epoch's workers, started before the wait completed, counted it again. Now a share
    settles the waits of its own epoch only, however late it folds."""
    out = _Out()
    ring = _ring(1, out)
    g1 = ring.new_iteration(1)
    old = _share(ring, 1, out, 0)
    ring.begin(40 * MS)
    old.fold(60 * MS, _segs((A.DECODE, 30, 60)), ring.head(), final=False)
    ring.end(40 * MS, 100 * MS)  # the epoch's last wait
    ring.close_iteration(g1)
    g2 = ring.new_iteration(1)
    new = _share(ring, 1, out, 110)
    assert new.gen == g2 and new.next == 1
    ring.end(120 * MS, 130 * MS)
    new.fold(140 * MS, _segs((A.READ, 110, 140)), ring.head(), final=True)
    assert out.split() == {"download": 0.0, "decompress": 0.0, "read": 10.0, "decode": 0.0, "idle": 0.0}
    old.fold(150 * MS, NONE, ring.head(), final=True)  # a persistent worker's share of epoch 1, ended late
    assert out.split() == {"download": 0.0, "decompress": 0.0, "read": 10.0, "decode": 20.0, "idle": 40.0}
    ring.close_iteration(g2)
    assert sum(out.split().values()) == 70.0


def test_a_worker_that_never_started_its_share_is_settled_idle_and_a_late_start_counts_nothing():
    out = _Out()
    ring = _ring(2, out)
    g = ring.new_iteration(2)
    w0 = _share(ring, 2, out, 0, worker=0)
    ring.end(0, 40 * MS)
    w0.fold(50 * MS, _segs((A.DECODE, 0, 50)), ring.head(), final=True)
    ring.close_iteration(g)  # worker 1 never took its share: settled here, all idle
    assert out.split() == {"download": 0.0, "decompress": 0.0, "read": 0.0, "decode": 20.0, "idle": 20.0}
    late = _share(ring, 2, out, 60, worker=1)  # a spawned worker that starts once the epoch is over
    assert late.done
    late.fold(70 * MS, _segs((A.DECODE, 60, 70)), ring.head(), final=True)
    ring.owner.settle()
    assert sum(out.split().values()) == 40.0


def test_a_second_share_of_one_worker_in_one_epoch_counts_nothing():
    out = _Out()
    ring = _ring(1, out)
    ring.new_iteration(1)
    first, second = _share(ring, 1, out, 0), _share(ring, 1, out, 0)
    assert not first.done and second.done
    ring.end(0, 10 * MS)
    for att in (first, second):
        att.fold(20 * MS, _segs((A.DECODE, 0, 20)), ring.head(), final=False)
    assert out.split()["decode"] == 10.0


def test_the_loops_own_process_counts_its_wait_as_decoding_but_for_its_spans():
    out = _Out()
    ring = _ring(1, out)
    g = ring.new_iteration(0)
    att = _share(ring, 0, out, 0)
    ring.end(0, 40 * MS)
    att.fold(50 * MS, _segs((A.DOWNLOAD, 5, 15), (A.READ, 30, 34)), ring.head(), final=False)
    assert out.split() == {"download": 10.0, "decompress": 0.0, "read": 4.0, "decode": 26.0, "idle": 0.0}
    ring.close_iteration(g)  # no worker to settle for
    att.fold(60 * MS, NONE, ring.head(), final=True)
    assert sum(out.split().values()) == 40.0 and att.done


def test_a_ring_keeps_the_last_waits_and_skips_the_overwritten_ones():
    ring = A.WaitRing(1, mp.get_context("fork"))
    for i in range(ring.SIZE + 10):
        ring.end(i * 10, i * 10 + 5)
    k, open_since = ring.head()
    b, e = ring.waits(0, k)
    assert k == ring.SIZE + 10 and len(b) == ring.SIZE and b[0] == 100 and e[-1] == (ring.SIZE + 9) * 10 + 5
    assert open_since == 0 and ring.end_time(k - 1) == e[-1] and ring.end_time(0) == 0
    ring.begin(7)
    assert ring.head() == (k, 7) and len(ring.waits(k, k)[0]) == 0


def test_a_tail_keeps_the_last_segments_and_a_taken_slot_is_not_overwritten():
    ring = A.WaitRing(1, mp.get_context("fork"))
    n = ring.CAP + 5
    segs = (np.arange(n, dtype=np.int64) * 10, np.arange(n, dtype=np.int64) * 10 + 5, np.full(n, A.READ, np.int64))
    assert ring.put_tail(0, 1, 3, 0, 10 * n, 2, segs)
    assert not ring.put_tail(0, 3, 3, 0, 10 * n, 2, segs)  # same slot (generations 1 and 3), not taken yet
    assert ring.put_tail(0, 2, 3, 0, 10 * n, 2, segs)  # the other slot
    tails = sorted(ring.take_tails(), key=lambda t: t.gen)
    assert [(t.gen, t.next, t.workers, len(t.segs[0])) for t in tails] == [(1, 3, 2, ring.CAP), (2, 3, 2, ring.CAP)]
    assert tails[0].segs[0][0] == 50 and tails[0].segs[1][-1] == 10 * (n - 1) + 5
    assert ring.take_tails() == []


# -- the property: random epochs, waits, workers, segments and folds ------------------------------------------


def _pieces(segs: list[tuple[int, int, int]], lo: int, hi: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """What a clock taken at ``hi`` (last taken at ``lo``) returns of the segments ``(stage, b, e)``."""
    out = [(s, max(b, lo), min(e, hi)) for s, b, e in segs if min(e, hi) > max(b, lo)]
    return (
        np.array([b for _, b, _ in out], np.int64),
        np.array([e for _, _, e in out], np.int64),
        np.array([s for s, _, _ in out], np.int64),
    )


def _overlap(segs: list[tuple[int, int, int]], w0: int, w1: int) -> list[int]:
    got = [0] * 5
    for s, b, e in segs:
        got[s] += max(0, min(e, w1) - max(b, w0))
    got[A.IDLE] = (w1 - w0) - sum(got[:4])
    return got


@st.composite
def _runs(draw):
    """Epochs of one loader: each with its waits (and when the loop stored each begin), and per worker a share
    (start, stop, segments, fold times, the delay of the final fold's read), or none. A share starts before the
    next epoch begins (workers start promptly) and ends before the epoch after that begins."""
    workers = draw(st.integers(1, 3))
    t = 0
    epochs = []
    for _ in range(draw(st.integers(1, 3))):
        begin = t
        waits = []
        for _ in range(draw(st.integers(0, 6))):
            t0 = t + draw(st.integers(0, 20))
            t1 = t0 + draw(st.integers(1, 30))
            stored = t0 + draw(st.integers(0, t1 - t0 - 1))  # the begin reaches the ring a little after t0
            waits.append((t0, stored, t1))
            t = t1
        close = t + draw(st.integers(0, 10))
        t = close + draw(st.integers(1, 10))
        epochs.append([begin, waits, close, t])  # t: the next epoch's begin
    runs = []
    for g, (begin, waits, close, nxt) in enumerate(epochs):
        after_next = epochs[g + 2][0] if g + 2 < len(epochs) else nxt + 200
        shares = []
        for _ in range(workers):
            if draw(st.integers(0, 5)) == 0:
                shares.append(None)  # never starts
                continue
            start = draw(st.integers(begin, nxt - 1))
            stop = draw(st.integers(start, max(start, after_next - 20)))  # may end after its epoch (persistent)
            cuts = sorted(draw(st.lists(st.integers(start, stop), max_size=12)))
            segs = [(draw(st.integers(0, 3)), b, e) for b, e in zip(cuts[::2], cuts[1::2]) if e > b]  # exclusive
            folds = sorted(draw(st.lists(st.integers(start, stop), max_size=4)))
            shares.append((start, stop, segs, folds, draw(st.integers(0, 15))))
        runs.append((begin, waits, close, nxt, shares))
    return workers, runs


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_runs(), st.booleans())
def test_every_wait_is_split_once_among_the_workers(run, explicit_close):
    """Whatever the order of waits, folds, stops and epoch ends, each stage's total is the exact overlap of each
    worker's segments (within its share) with the waits of its epoch, idle the rest, ``1/workers`` each; the
    stages sum to the waits. (Times in µs; the shares' folds and the loader's process interleaved.)"""
    workers, epochs = run
    out = _Out()
    ring = _ring(workers, out)
    events: list[tuple[int, int, str, tuple]] = []  # (time, order at that time, kind, payload)
    want = [0] * 5
    for g, (begin, waits, close, nxt, shares) in enumerate(epochs, start=1):
        events.append((begin, 0, "iteration", (g,)))
        for t0, stored, t1 in waits:
            events.append((stored, 1, "begin", (t0,)))
            events.append((t1, 1, "end", (t0, t1)))
        if explicit_close:
            events.append((close, 2, "close", (g,)))
        # the loader's process settles a share nobody took when the epoch ends (explicitly, or as the next begins)
        fill = close if explicit_close else nxt if g < len(epochs) else None
        for w, share in enumerate(shares):
            took = share is not None and (fill is None or share[0] < fill)
            if share is not None:
                start, stop, segs, folds, delay = share
                events.append((start, 3, "start", (g, w, segs)))
                for tf in folds:
                    events.append((tf, 4, "fold", (g, w)))
                events.append((stop + delay, 5, "final", (g, w, stop)))
            for t0, _, t1 in waits:
                got = _overlap(share[2], t0, t1) if took else [0, 0, 0, 0, t1 - t0]  # type: ignore[index]
                want = [a + b for a, b in zip(want, got)]
    atts: dict[tuple[int, int], list] = {}
    for t, _, kind, p in sorted(events, key=lambda e: (e[0], e[1])):
        ns = t * 1000
        if kind == "iteration":
            assert ring.new_iteration(workers) == p[0]
        elif kind == "begin":
            ring.begin(p[0] * 1000)
        elif kind == "end":
            ring.end(p[0] * 1000, p[1] * 1000)
        elif kind == "close":
            ring.close_iteration(p[0])
        elif kind == "start":
            g, w, segs = p
            assert ring.generation()[0] == g
            att = A.Attributor(ring, workers, out.add, ns, w)
            if not ring.claim(w, att.gen):
                att.done = True
            atts[(g, w)] = [att, [(s, b * 1000, e * 1000) for s, b, e in segs], ns]
        else:
            att, segs_ns, last = atts[(p[0], p[1])]
            now = p[2] * 1000 if kind == "final" else ns
            att.fold(now, _pieces(segs_ns, last, now), ring.head(), final=kind == "final")
            atts[(p[0], p[1])][2] = now
        if t % 3 == 0:
            ring.owner.settle()  # the loader's process flushes now and then
    if not explicit_close:
        ring.new_iteration(workers)  # the next iteration ends the last one
    ring.owner.settle()
    got = out.split()  # ms
    want_ms = {s: round(v / 1000 / workers, 6) for s, v in zip(STAGES, want)}  # µs -> ms, the workers' shares
    assert got == pytest.approx(want_ms, abs=1e-5)
    total = sum(t1 - t0 for _, waits, _, _, _ in epochs for t0, _, t1 in waits) / 1000
    assert sum(got.values()) == pytest.approx(total, abs=1e-5)
