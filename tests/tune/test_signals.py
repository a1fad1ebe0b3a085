"""A window's steady wait: the epoch starts' waits set apart (signals.START_WAITS), and the whole wait where the
epochs are too short to have a steady part."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streamscope.tune.signals import STEADY_MIN, Reading, Window, merge, window


def test_the_starts_waits_and_time_are_taken_out():
    # 2 s, 160 batches, 0.5 s waited of which 0.35 s in 4 start waits: outside the starts 0.15 s of 1.65 s
    w = Window(0.0, 2.0, 160, 0.5, start_waits=4, start_wait_s=0.35)
    assert w.wait_share == pytest.approx(0.25)
    assert w.steady_wait_share == pytest.approx(0.15 / 1.65)
    assert w.steady_period == pytest.approx(1.65 / 160)
    # no starts in the window: the same as the whole
    plain = Window(0.0, 2.0, 160, 0.5)
    assert plain.steady_wait_share == plain.wait_share and plain.steady_period == plain.period


def test_epochs_too_short_for_a_steady_part_keep_the_whole_wait():
    w = Window(0.0, 1.0, 20, 0.5, start_waits=int(STEADY_MIN * 20) + 1, start_wait_s=0.4)
    assert w.steady_wait_share == w.wait_share and w.steady_period == w.period


def test_windows_and_merges_carry_the_starts():
    a = Reading(t=0.0, batches=10, wait_s=0.1, start_waits=4, start_wait_s=0.08)
    b = Reading(t=1.0, batches=110, wait_s=0.4, start_waits=8, start_wait_s=0.3)
    w = window(a, b)
    assert (w.start_waits, w.start_wait_s) == (4, pytest.approx(0.22))
    m = merge([w, w])
    assert (m.start_waits, m.start_wait_s) == (8, pytest.approx(0.44))


@given(
    seconds=st.floats(0.1, 100.0),
    batches=st.integers(1, 10_000),
    wait=st.floats(0.0, 1.0),
    start=st.floats(0.0, 1.0),
    starts=st.integers(0, 1_000),
)
def test_the_steady_share_never_exceeds_the_whole(seconds, batches, wait, start, starts):
    wait_s = wait * seconds
    w = Window(0.0, seconds, batches, wait_s, start_waits=starts, start_wait_s=start * wait_s)
    assert 0.0 <= w.steady_wait_share <= w.wait_share + 1e-12
    assert w.steady_period <= w.period + 1e-12
