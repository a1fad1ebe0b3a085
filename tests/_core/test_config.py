import pytest

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
    [("64MB", 64_000_000), ("100B", 100), ("1GiB", 2**30), ("1.5kb", 1500), (123, 123), ("7", 7)],
)
def test_parse_bytes(text, expected):
    assert parse_bytes(text) == expected


@pytest.mark.parametrize("bad", ["", "MB", "12 parsecs", -1, True, None])
def test_parse_bytes_rejects(bad):
    with pytest.raises(ConfigError):
        parse_bytes(bad)


def test_errors_keep_builtin_bases():
    assert issubclass(ConfigError, ValueError) and issubclass(ConfigError, StreamscopeError)
