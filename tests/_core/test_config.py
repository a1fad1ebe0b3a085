import pytest
from hypothesis import given as hgiven
from hypothesis import strategies as st

from streamscope._core import config
from streamscope._core.errors import ConfigError, StreamscopeError
from streamscope._core.units import parse_bytes


def test_env_then_override_then_default(monkeypatch):
    monkeypatch.delenv("STREAMSCOPE_TRACE_LEVEL", raising=False)
    monkeypatch.delenv("LITDATA_TRACE_LEVEL", raising=False)
    assert config.get("trace_level") == "off"
    monkeypatch.setenv("LITDATA_TRACE_LEVEL", "chunk")
    assert config.get("trace_level") == "chunk"
    monkeypatch.setenv("STREAMSCOPE_TRACE_LEVEL", "batch")
    assert config.get("trace_level") == "batch"
    config.set_value("trace_level", "sample")
    try:
        assert config.get("trace_level") == "sample"
    finally:
        config.reset("trace_level")
    assert config.get("trace_level") == "batch"


def test_bad_env_value_names_the_variable(monkeypatch):
    monkeypatch.setenv("STREAMSCOPE_TRACE_BUFFER_EVENTS", "lots")
    with pytest.raises(ConfigError, match="STREAMSCOPE_TRACE_BUFFER_EVENTS"):
        config.get("trace_buffer_events")


def test_unknown_knob():
    with pytest.raises(ConfigError, match="unknown knob"):
        config.get("no_such_knob")


def test_every_knob_is_documented():
    for row in config.table():
        assert row["doc"] and row["unit"] and row["env"], row


@pytest.mark.parametrize(
    "text,expected",
    [
        ("64MB", 64_000_000),
        ("100B", 100),
        ("1GiB", 2**30),
        ("1.5kb", 1500),
        (123, 123),
        ("7", 7),
        (".5MB", 500_000),  # the float forms LitData's chunk_bytes parser takes
        ("1e3", 1000),
        ("2.5e1 KB", 25_000),
        (" 64 mb ", 64_000_000),
    ],
)
def test_parse_bytes(text, expected):
    assert parse_bytes(text) == expected


@pytest.mark.parametrize("bad", ["", "MB", "12 parsecs", -1, True, None, "-5MB", "1e", "5eMB"])
def test_parse_bytes_rejects(bad):
    with pytest.raises(ConfigError):
        parse_bytes(bad)


def test_errors_keep_builtin_bases():
    assert issubclass(ConfigError, ValueError) and issubclass(ConfigError, StreamscopeError)


# --- typed values, bounds and steps ------------------------------------------------------------------

LIVE = [config.KNOBS[n] for n in config.live_names()]
NUMERIC_LIVE = [k for k in LIVE if k.kind is not bool]


def test_every_live_knob_declares_bounds_a_step_and_a_number_type():
    assert {"prefetch_depth", "download_concurrency", "max_cache_size", "raw_concurrency", "raw_prefetch"} <= {
        k.name for k in LIVE
    }
    for k in LIVE:
        lo, hi = k.bounds
        assert k.kind in (int, float, bool) and lo <= k.default_value() <= hi and k.step > 0, k


def test_a_live_knob_without_bounds_cannot_be_declared():
    with pytest.raises(ConfigError, match="bounds and a step"):
        config.knob("test_unbounded_live", 1, "x", "STREAMSCOPE_TEST_UNBOUNDED", "doc", live=True)
    assert "test_unbounded_live" not in config.KNOBS


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


@pytest.mark.parametrize("knob", NUMERIC_LIVE, ids=lambda k: k.name)
@hgiven(data=st.data())
def test_env_values_out_of_bounds_are_errors_naming_the_variable(knob, data):
    lo, hi = knob.bounds
    value = data.draw(st.integers(min_value=lo - 1000, max_value=hi + 1000))
    var = knob.env[0]
    with pytest.MonkeyPatch.context() as mp:
        for other in knob.env:
            mp.delenv(other, raising=False)
        mp.setenv(var, str(value))
        if lo <= value <= hi:
            assert config.get(knob.name) == value
        else:
            with pytest.raises(ConfigError, match=rf"environment variable {var}=.*(outside its bounds|not valid)"):
                config.get(knob.name)


@pytest.mark.parametrize("raw", ["many", "2.5", "", "0x10"])
def test_env_values_of_the_wrong_type_are_errors_naming_the_variable(raw, monkeypatch):
    monkeypatch.setenv("STREAMSCOPE_DOWNLOAD_CONCURRENCY", raw)
    with pytest.raises(ConfigError, match=r"STREAMSCOPE_DOWNLOAD_CONCURRENCY.*expected a whole number"):
        config.get("download_concurrency")


def test_a_size_knob_takes_units_from_the_environment(monkeypatch):
    monkeypatch.delenv("STREAMSCOPE_MAX_CACHE_SIZE", raising=False)
    monkeypatch.setenv("MAX_CACHE_SIZE", "2GB")
    assert config.get("max_cache_size") == 2_000_000_000
    monkeypatch.setenv("MAX_CACHE_SIZE", "lots")
    with pytest.raises(ConfigError, match="MAX_CACHE_SIZE='lots'.*cannot parse size"):
        config.get("max_cache_size")


def test_set_value_validates_and_names_the_knob():
    with pytest.raises(ConfigError, match=r"knob prefetch_depth: -1 is outside its bounds 0\.\.4096"):
        config.set_value("prefetch_depth", -1)
    with pytest.raises(ConfigError, match="knob download_concurrency: expected int, got float"):
        config.set_value("download_concurrency", 2.5)
    with pytest.raises(ConfigError, match="knob trace_flush_interval: expected float, got list"):
        config.set_value("trace_flush_interval", [1.0])
    assert "prefetch_depth" not in config._overrides and "download_concurrency" not in config._overrides
    config.set_value("max_cache_size", "3GB")  # text is parsed like the environment's
    try:
        assert config.get("max_cache_size") == 3_000_000_000
    finally:
        config.reset("max_cache_size")


def test_default_arg_is_equal_to_its_value_but_not_given():
    two = config.default_arg(2)
    assert two == 2 and repr(two) == "2" and not config.given(two)
    assert config.given(2) and config.given(None)
    size = config.default_arg("100GB")
    assert size == "100GB" and not config.given(size) and config.given("100GB")
    with pytest.raises(TypeError):
        config.default_arg(True)


@hgiven(st.integers(min_value=0, max_value=2**80))
def test_parse_bytes_keeps_whole_numbers_exact(n):
    """A float would round sizes above 2**53 (the environment gives strings)."""
    assert parse_bytes(str(n)) == n
    assert parse_bytes(f"{n}KiB") == n * 1024
