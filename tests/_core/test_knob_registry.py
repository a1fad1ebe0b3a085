"""The knob registry: resolution order (set_value, environment, default), errors naming the variable or the knob,
declaring, and parameters' defaults told apart from given values."""

import pytest
from hypothesis import given as hgiven
from hypothesis import strategies as st

from streamscope._core import config, knob_registry
from streamscope._core.errors import ConfigError

LIVE = [config.KNOBS[n] for n in config.live_names()]
NUMERIC_LIVE = [k for k in LIVE if k.kind is not bool]


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


def test_a_live_knob_without_bounds_cannot_be_declared():
    with pytest.raises(ConfigError, match="bounds and a step"):
        config.knob("test_unbounded_live", 1, "x", "STREAMSCOPE_TEST_UNBOUNDED", "doc", live=True)
    assert "test_unbounded_live" not in config.KNOBS


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


def test_set_value_validates_and_names_the_knob():
    with pytest.raises(ConfigError, match=r"knob prefetch_depth: -1 is outside its bounds 0\.\.4096"):
        config.set_value("prefetch_depth", -1)
    with pytest.raises(ConfigError, match="knob download_concurrency: expected int, got float"):
        config.set_value("download_concurrency", 2.5)
    with pytest.raises(ConfigError, match="knob trace_flush_interval: expected float, got list"):
        config.set_value("trace_flush_interval", [1.0])
    assert "prefetch_depth" not in knob_registry._overrides and "download_concurrency" not in knob_registry._overrides
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
