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
