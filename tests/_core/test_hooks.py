"""The hook registry: a lower layer asks, the package root provides (when it is imported, before any submodule)."""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys

import pytest

from streamscope._core import hooks


def test_unknown_hook_names_the_provided_ones():
    with pytest.raises(KeyError, match="autotuner"):
        hooks.get("nope")
    assert hooks.find("nope") is None


def test_provided_hook_wins(monkeypatch):
    monkeypatch.setattr(hooks, "_provided", {})
    with pytest.raises(KeyError, match="provided: none"):
        hooks.get(hooks.AUTOTUNER)  # no default imported from a dotted path any more
    hooks.provide(hooks.AUTOTUNER, len)
    assert hooks.get(hooks.AUTOTUNER) is len


def test_the_root_provides_the_autotuner_and_imports_it_when_asked(monkeypatch):
    import streamscope
    import streamscope.api.autotune as autotune

    assert hooks.get(hooks.AUTOTUNER) in (streamscope._autotuner, autotune.attach)  # attach provides itself
    attached = []
    monkeypatch.setattr(autotune, "attach", lambda loader: attached.append(loader) or "tuner")
    assert streamscope._autotuner("loader") == "tuner" and attached == ["loader"]


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


_PROBE = """
import sys
import streamscope.engine.dataset  # what a spawned DataLoader worker imports to unpickle its dataset
from streamscope._core import hooks
from streamscope.recording.processor import factory_of
names = [hooks.AUTOTUNER, hooks.FIRST_USE, hooks.OTEL_ENTRY, hooks.sink("litracer")]
print("streamscope" in sys.modules, [hooks.find(n) is not None for n in names], factory_of("litracer").__name__)
"""


def _spawned_probe(queue):
    import streamscope.engine.dataset  # noqa: F401  (the one import a spawned worker makes before unpickling)

    queue.put(
        [n for n in (hooks.AUTOTUNER, hooks.FIRST_USE, hooks.OTEL_ENTRY, hooks.sink("litracer")) if hooks.find(n)]
    )


def test_a_process_that_imports_only_a_submodule_has_every_hook():
    """Python imports ``streamscope/__init__.py`` before any submodule, so a process that imports only the engine
    (a spawned DataLoader worker unpickling its dataset) has the hooks the root provides: the Litracer sink too."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("STREAMSCOPE_", "LITDATA_"))}
    r = subprocess.run([sys.executable, "-c", _PROBE], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split("\n")[0] == "True [True, True, True, True] _litracer_sink", r.stdout


def test_the_litracer_sink_has_one_name():
    from streamscope.recording.processor import DEFAULT_SINK
    from streamscope.trace import LITRACER_SINK

    assert LITRACER_SINK == DEFAULT_SINK == "litracer"


def test_a_spawned_multiprocessing_child_has_every_hook():
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    p = ctx.Process(target=_spawned_probe, args=(queue,))
    p.start()
    try:
        got = queue.get(timeout=120)
    finally:
        p.join(timeout=60)
    assert got == [hooks.AUTOTUNER, hooks.FIRST_USE, hooks.OTEL_ENTRY, hooks.sink("litracer")]
    assert p.exitcode == 0
