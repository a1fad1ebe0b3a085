import pathlib

import pytest
from hypothesis import given as hgiven
from hypothesis import strategies as st

from streamscope._core import config, knobs
from streamscope._core.errors import ConfigError, StreamscopeError
from streamscope._core.units import parse_bytes

LIVE = [config.KNOBS[n] for n in config.live_names()]


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


def test_every_live_knob_declares_bounds_a_step_and_a_number_type():
    assert {"prefetch_depth", "download_concurrency", "max_cache_size", "raw_concurrency", "raw_prefetch"} <= {
        k.name for k in LIVE
    }
    for k in LIVE:
        lo, hi = k.bounds
        assert k.kind in (int, float, bool) and lo <= k.default_value() <= hi and k.step > 0, k


def test_a_size_knob_takes_units_from_the_environment(monkeypatch):
    monkeypatch.delenv("STREAMSCOPE_MAX_CACHE_SIZE", raising=False)
    monkeypatch.setenv("MAX_CACHE_SIZE", "2GB")
    assert config.get("max_cache_size") == 2_000_000_000
    monkeypatch.setenv("MAX_CACHE_SIZE", "lots")
    with pytest.raises(ConfigError, match="MAX_CACHE_SIZE='lots'.*cannot parse size"):
        config.get("max_cache_size")


@hgiven(st.integers(min_value=0, max_value=2**80))
def test_parse_bytes_keeps_whole_numbers_exact(n):
    """A float would round sizes above 2**53 (the environment gives strings)."""
    assert parse_bytes(str(n)) == n
    assert parse_bytes(f"{n}KiB") == n * 1024


def test_every_declaring_module_is_imported():
    """A module of _core/knobs that the package does not import would declare nothing."""
    on_disk = {p.stem for p in pathlib.Path(knobs.__file__).parent.glob("*.py")} - {"__init__"}
    assert {m.__name__.rsplit(".", 1)[1] for m in config.DECLARED} == on_disk
