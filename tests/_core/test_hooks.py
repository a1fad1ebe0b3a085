"""The hook registry: a lower layer asks, a higher layer provides (or its default provider is imported)."""

from __future__ import annotations

import pytest

from streamscope._core import hooks


def test_unknown_hook_names_the_known_ones():
    with pytest.raises(KeyError, match="autotuner"):
        hooks.get("nope")


def test_provided_hook_wins_and_the_default_is_imported_lazily(monkeypatch):
    monkeypatch.setattr(hooks, "_provided", {})
    fn = hooks.get("autotuner")
    from streamscope.api.autotune import attach

    assert fn is attach
    monkeypatch.setattr(hooks, "_provided", {})
    hooks.provide("autotuner", len)
    assert hooks.get("autotuner") is len


def test_first_use_runs_the_provided_hook_once_per_process(monkeypatch):
    calls = []
    monkeypatch.setattr(hooks, "_provided", {hooks.FIRST_USE: lambda: calls.append(1)})
    monkeypatch.setattr(hooks, "_first_use_pid", 0)
    hooks.first_use()
    hooks.first_use()
    assert calls == [1]


def test_first_use_without_a_hook_does_nothing_and_a_failing_hook_is_one_line(monkeypatch, capsys):
    monkeypatch.setattr(hooks, "_provided", {})
    monkeypatch.setattr(hooks, "_first_use_pid", 0)
    hooks.first_use()  # nothing provided: nothing to run, no error

    def broken() -> None:
        raise RuntimeError("no\nluck")

    monkeypatch.setattr(hooks, "_provided", {hooks.FIRST_USE: broken})
    monkeypatch.setattr(hooks, "_first_use_pid", 0)
    hooks.first_use()  # building a dataset never fails because of the hook
    assert capsys.readouterr().err == "streamscope: first_use hook failed: RuntimeError: no luck\n"


def test_streamscope_provides_first_use_and_it_is_cheap_without_the_variable(monkeypatch):
    import sys

    import streamscope

    assert hooks._provided[hooks.FIRST_USE] is streamscope._first_use
    monkeypatch.delenv("STREAMSCOPE_PROMETHEUS_PORT", raising=False)
    monkeypatch.delitem(sys.modules, "streamscope.telemetry.prometheus", raising=False)
    streamscope._first_use()
    assert "streamscope.telemetry.prometheus" not in sys.modules  # unset: one lookup, nothing imported
