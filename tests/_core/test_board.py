"""The knob board: where its values come from, pins, the tuner's proposals, and reads from other processes."""

from __future__ import annotations

import gc
import multiprocessing
import pickle
import weakref
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamscope._core import board as kb
from streamscope._core import config
from streamscope._core.board import BoardGroup, KnobBoard
from streamscope._core.errors import ConfigError

Change = tuple[str, Any, Any, str, str]


@pytest.fixture(autouse=True)
def _clean(monkeypatch: pytest.MonkeyPatch) -> Any:
    for name in config.live_names():
        for var in config.KNOBS[name].env:
            monkeypatch.delenv(var, raising=False)
    config.reset()
    yield
    config.reset()


def board(base: dict[str, tuple[Any, bool, str]] | None = None) -> tuple[KnobBoard, list[Change]]:
    seen: list[Change] = []
    return KnobBoard(base, lambda *change: seen.append(change)), seen


def test_a_board_starts_from_the_dataset_and_the_defaults():
    b, seen = board({"prefetch_depth": (6, False, "max_pre_download"), "max_cache_size": (10**9, True, "size")})
    assert set(b.names) == set(config.live_names())
    assert b.value("prefetch_depth") == 6 and not b.pinned("prefetch_depth")
    assert b.value("max_cache_size") == 10**9 and b.pinned("max_cache_size")  # an argument the user gave
    assert b.value("download_concurrency") == config.KNOBS["download_concurrency"].value_default
    assert b.value("prefetch_head_first") is True and not b.pinned("download_concurrency")
    assert b.source("max_cache_size") == "argument" and b.source("download_concurrency") == "default"
    assert seen == [] and b.version() == 0 and b.owned


def test_an_environment_variable_wins_over_the_argument_and_pins(monkeypatch):
    monkeypatch.setenv("MAX_CACHE_SIZE", "5GB")
    monkeypatch.setenv("STREAMSCOPE_DOWNLOAD_CONCURRENCY", "9")
    monkeypatch.setenv("STREAMSCOPE_PREFETCH_DEPTH", "0")  # the unset value: the dataset's own setting
    b, _ = board({"prefetch_depth": (3, False, "max_pre_download"), "max_cache_size": (10**9, True, "size")})
    assert b.value("max_cache_size") == 5_000_000_000 and b.pinned("max_cache_size")
    assert b.value("download_concurrency") == 9 and b.pinned("download_concurrency")
    assert b.source("download_concurrency") == "STREAMSCOPE_DOWNLOAD_CONCURRENCY"
    assert b.value("prefetch_depth") == 3 and not b.pinned("prefetch_depth")


@pytest.mark.parametrize(
    ("var", "raw", "message"),
    [
        ("STREAMSCOPE_PREFETCH_DEPTH", "5000", r"STREAMSCOPE_PREFETCH_DEPTH='5000'.*outside its bounds 0\.\.4096"),
        ("STREAMSCOPE_DOWNLOAD_CONCURRENCY", "fast", r"STREAMSCOPE_DOWNLOAD_CONCURRENCY='fast'.*whole number"),
        ("STREAMSCOPE_PREFETCH_HEAD_FIRST", "maybe", r"STREAMSCOPE_PREFETCH_HEAD_FIRST='maybe'.*boolean"),
        ("MAX_CACHE_SIZE", "-3GB", r"MAX_CACHE_SIZE='-3GB'.*cannot parse size"),
    ],
)
def test_a_bad_environment_value_fails_the_board_naming_the_variable(monkeypatch, var, raw, message):
    monkeypatch.setenv(var, raw)
    with pytest.raises(ConfigError, match=message):
        board()


def test_a_bad_argument_fails_the_board_naming_the_argument():
    with pytest.raises(ConfigError, match=r"max_pre_download=9000 \(knob prefetch_depth\).*outside its bounds"):
        board({"prefetch_depth": (9000, True, "max_pre_download")})
    with pytest.raises(ConfigError, match="not a live knob"):
        board({"cache_dir": ("/tmp", True, "cache_dir")})


def test_the_tuner_moves_what_the_user_did_not_set():
    b, seen = board({"prefetch_depth": (2, False, "max_pre_download")})
    assert b.propose("prefetch_depth", 8, "waits on downloads") is True
    assert b.value("prefetch_depth") == 8 and not b.pinned("prefetch_depth") and b.source("prefetch_depth") == "tuner"
    assert seen == [("prefetch_depth", 2, 8, "tuner", "waits on downloads")]
    assert b.version() == 1 and b.seq("prefetch_depth") == 1
    assert b.propose("prefetch_depth", 8) is True and b.version() == 1  # no change: no event, no new version
    assert len(seen) == 1


def test_the_tuner_never_moves_a_pinned_knob(monkeypatch):
    monkeypatch.setenv("STREAMSCOPE_DOWNLOAD_CONCURRENCY", "3")
    b, seen = board({"prefetch_depth": (4, True, "max_pre_download")})
    assert b.propose("prefetch_depth", 9, "x") is False
    assert b.propose("download_concurrency", 12, "x") is False
    b.set("raw_prefetch", 5)  # set by the user on the board
    assert b.propose("raw_prefetch", 7) is False
    assert (b.value("prefetch_depth"), b.value("download_concurrency"), b.value("raw_prefetch")) == (4, 3, 5)
    assert seen == [("raw_prefetch", -1, 5, "user", "")]


def test_a_proposal_is_validated_like_a_setting():
    b, seen = board()
    with pytest.raises(ConfigError, match=r"knob download_concurrency: 99 is outside its bounds 1\.\.32"):
        b.propose("download_concurrency", 99)
    with pytest.raises(ConfigError, match="knob prefetch_depth: expected int, got float"):
        b.propose("prefetch_depth", 2.5)
    with pytest.raises(ConfigError, match="'cache_dir' is not a live knob"):
        b.propose("cache_dir", "/tmp")
    assert seen == [] and b.version() == 0


@settings(max_examples=60, deadline=None)
@given(name=st.sampled_from(config.live_names()), value=st.integers(min_value=-(2**61), max_value=2**61))
def test_a_proposal_lands_exactly_when_in_bounds(name, value):
    b, _ = board()
    k = config.KNOBS[name]
    lo, hi = k.bounds
    if k.kind is bool:
        value = bool(value % 2)
    before = b.value(name)
    if k.kind is bool or lo <= value <= hi:
        assert b.propose(name, value) is True and b.value(name) == value
        assert b.reader(name)() == value
    else:
        with pytest.raises(ConfigError, match=f"knob {name}"):
            b.propose(name, value)
        assert b.value(name) == before


def test_set_value_reaches_every_board_of_the_process_and_reset_restores_them():
    a, seen_a = board({"prefetch_depth": (2, False, "max_pre_download")})
    c, seen_c = board({"prefetch_depth": (5, True, "max_pre_download")})
    config.set_value("prefetch_depth", 7)
    assert a.value("prefetch_depth") == c.value("prefetch_depth") == 7
    assert a.pinned("prefetch_depth") and a.source("prefetch_depth") == "set_value"
    assert seen_a == [("prefetch_depth", 2, 7, "user", "")] and seen_c == [("prefetch_depth", 5, 7, "user", "")]
    assert a.propose("prefetch_depth", 9) is False
    config.set_value("prefetch_depth", 0)  # the unset value: each dataset's own setting again
    assert (a.value("prefetch_depth"), c.value("prefetch_depth")) == (2, 5)
    config.set_value("prefetch_depth", 3)
    config.reset("prefetch_depth")
    assert (a.value("prefetch_depth"), c.value("prefetch_depth")) == (2, 5)
    assert not a.pinned("prefetch_depth") and c.pinned("prefetch_depth")
    config.set_value("trace_level", "off")  # not a live knob: no board moves
    assert a.version() == 4


def test_set_on_the_board_as_the_dataset_setting_survives_a_reset():
    b, _ = board({"prefetch_depth": (2, False, "max_pre_download")})
    b.set("prefetch_depth", 6, base=True)
    config.set_value("prefetch_depth", 1)
    config.reset("prefetch_depth")
    assert b.value("prefetch_depth") == 6 and b.pinned("prefetch_depth")


def test_a_reader_holds_the_memory_not_the_board():
    b, _ = board({"prefetch_depth": (2, False, "max_pre_download")})
    read = b.reader("prefetch_depth")
    flag = b.reader("prefetch_head_first")
    assert read() == 2 and flag() == 1
    b.propose("prefetch_depth", 11)
    b.propose("prefetch_head_first", False)
    assert read() == 11 and flag() == 0
    ref = weakref.ref(b)
    was = gc.isenabled()
    gc.disable()
    try:
        del b
        assert ref() is None  # freed at once: no reference cycle through the board
    finally:
        if was:
            gc.enable()
    assert read() == 11  # the memory lives as long as a reader


def test_pickled_outside_a_process_start_a_board_is_a_detached_copy():
    b, _ = board({"prefetch_depth": (2, True, "max_pre_download")})
    b.propose("raw_prefetch", 3)
    copy = pickle.loads(pickle.dumps(b))
    assert copy.snapshot() == b.snapshot() and copy.pinned("prefetch_depth") and not copy.pinned("raw_prefetch")
    assert copy.owned
    copy.propose("raw_prefetch", 9)
    assert b.value("raw_prefetch") == 3


def test_the_active_board_gives_the_metrics_their_knob_values():
    b, _ = board({"prefetch_depth": (3, False, "max_pre_download")})
    assert kb.active() is b
    b.propose("download_concurrency", 6)
    values = kb.live_values()
    assert values["prefetch_depth"] == 3.0 and values["download_concurrency"] == 6.0
    other, _ = board({"prefetch_depth": (9, False, "max_pre_download")})
    assert kb.live_values()["prefetch_depth"] == 9.0
    b.activate()
    assert kb.live_values()["prefetch_depth"] == 3.0
    del b, other
    gc.collect()
    assert kb.active() is None
    config.set_value("prefetch_depth", 4)  # no board: this process's knobs
    assert kb.live_values()["prefetch_depth"] == 4.0


def test_a_group_reads_the_first_and_writes_all():
    a, _ = board({"prefetch_depth": (2, False, "max_pre_download")})
    c, _ = board({"prefetch_depth": (2, False, "max_pre_download")})
    g = BoardGroup([a, c])
    assert g.propose("prefetch_depth", 5) is True
    assert (a.value("prefetch_depth"), c.value("prefetch_depth"), g.reader("prefetch_depth")()) == (5, 5, 5)
    c.set("download_concurrency", 2)
    assert g.pinned("download_concurrency") and g.propose("download_concurrency", 8) is False
    assert a.value("download_concurrency") != 8
    BoardGroup([a, c]).activate()  # a group made on demand: the metrics follow its first board
    assert kb.active() is a


# --- other processes ---------------------------------------------------------------------------------


def _child_reads(b: KnobBoard, go: Any, out: Any) -> None:
    read = b.reader("prefetch_depth")
    out.put(("before", read(), b.version()))
    go.wait(30)
    out.put(("after", read(), b.version(), b.pinned("prefetch_depth")))
    try:
        b.propose("prefetch_depth", 1)
        out.put(("write", "allowed"))
    except ConfigError as exc:
        out.put(("write", str(exc)))


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_another_process_reads_what_its_parent_sets_and_cannot_write(method):
    ctx = multiprocessing.get_context(method)
    b, _ = board({"prefetch_depth": (2, False, "max_pre_download")})
    go, out = ctx.Event(), ctx.Queue()
    p = ctx.Process(target=_child_reads, args=(b, go, out))
    p.start()
    try:
        assert out.get(timeout=60) == ("before", 2, 0)
        b.propose("prefetch_depth", 12, "test")
        go.set()
        assert out.get(timeout=30) == ("after", 12, 1, False)
        tag, message = out.get(timeout=30)
        assert tag == "write" and "written by the process that created it" in message
    finally:
        p.join(30)
    assert p.exitcode == 0
    assert b.value("prefetch_depth") == 12
