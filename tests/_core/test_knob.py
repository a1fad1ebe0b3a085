"""The Knob type: values checked against type and bounds, the step grid (snap, moved), on every declared live knob."""

import pytest
from hypothesis import given as hgiven
from hypothesis import strategies as st

from streamscope._core import config
from streamscope._core.errors import ConfigError

LIVE = [config.KNOBS[n] for n in config.live_names()]
NUMERIC_LIVE = [k for k in LIVE if k.kind is not bool]


@pytest.mark.parametrize("knob", NUMERIC_LIVE, ids=lambda k: k.name)
@hgiven(data=st.data())
def test_check_accepts_exactly_the_values_within_bounds(knob, data):
    lo, hi = knob.bounds
    value = data.draw(st.integers(min_value=lo - 3 * knob.step, max_value=hi + 3 * knob.step))
    if lo <= value <= hi:
        assert knob.check(value) == value
    else:
        with pytest.raises(ConfigError, match=rf"knob {knob.name}: .* outside its bounds"):
            knob.check(value)


@pytest.mark.parametrize("knob", NUMERIC_LIVE, ids=lambda k: k.name)
@pytest.mark.parametrize("bad", [True, 2.5, None, [1], "lots"])
def test_check_rejects_the_wrong_type_naming_the_knob(knob, bad):
    with pytest.raises(ConfigError, match=f"knob {knob.name}"):
        knob.check(bad)


@pytest.mark.parametrize("knob", NUMERIC_LIVE, ids=lambda k: k.name)
@hgiven(value=st.floats(min_value=-1e19, max_value=1e19, allow_nan=False))
def test_snap_lands_on_the_step_grid_within_bounds(knob, value):
    lo, hi = knob.bounds
    out = knob.snap(value)
    assert lo <= out <= hi
    assert (out - lo) % knob.step == 0
    assert knob.snap(out) == out  # idempotent
    clamped = min(max(value, lo), hi)
    assert abs(out - clamped) <= knob.step  # the nearest grid point (one step below hi when hi is off the grid)


@pytest.mark.parametrize("knob", NUMERIC_LIVE, ids=lambda k: k.name)
@hgiven(data=st.data())
def test_moved_goes_by_whole_steps_and_stops_at_the_bounds(knob, data):
    lo, hi = knob.bounds
    value = data.draw(st.integers(min_value=lo, max_value=hi))
    steps = data.draw(st.integers(min_value=-50, max_value=50))
    out = knob.moved(value, steps)
    assert lo <= out <= hi
    assert out == min(max(value + steps * knob.step, lo), hi)
    assert knob.check(out) == out
