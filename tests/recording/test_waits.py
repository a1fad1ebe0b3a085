"""recording/waits.py: the ring of the loop's waits, as the loader observer writes it."""

from __future__ import annotations

import multiprocessing as mp

from streamscope.recording.waits import WaitRing


def test_open_wait_is_begin_without_a_python_frame():
    a, b = WaitRing(2, mp.get_context("fork")), WaitRing(2, mp.get_context("fork"))
    a.begin(5_000)
    b.open_wait(5_000)
    assert a.head() == b.head() == (0, 5_000)  # a wait in progress, none complete
    b.end(5_000, 9_000)
    assert b.head() == (1, 0) and [x.tolist() for x in b.waits(0, 1)] == [[5_000], [9_000]]
