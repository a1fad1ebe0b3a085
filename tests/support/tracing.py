"""Test helpers for the event bus: a clean tracer per test and log reading."""

from __future__ import annotations

import multiprocessing as mp
import os
import shutil
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from streamscope import events as ev
from streamscope import recording
from streamscope._core import config
from streamscope.events.bus import STATE


def _scrub_env() -> None:
    for k in list(os.environ):
        if k.startswith(
            ("STREAMSCOPE_TRACE", "STREAMSCOPE_LOG", "STREAMSCOPE_METRICS", "LITDATA_TRACE", "LITDATA_LOG")
        ):
            del os.environ[k]


@pytest.fixture
def clean_tracer() -> Iterator[None]:
    """Tracer off, env scrubbed, empty buffer before and after the test; the environment restored after."""
    saved = dict(os.environ)
    _scrub_env()
    ev.configure()
    ev.drain()
    STATE.dropped = 0
    try:
        yield
    finally:
        ev.configure()
        if (
            recording.RECORDER.owner and recording.RECORDER.metrics_dir
        ):  # this test's run directory: not left in /tmp when
            shutil.rmtree(recording.RECORDER.metrics_dir, ignore_errors=True)  # the process ends without exit handlers
            recording.RECORDER.metrics_dir = None
        recording.RECORDER.factories.clear()
        ev.drain()
        STATE.dropped = 0
        config.reset()
        os.environ.clear()
        os.environ.update(saved)


def forked_result(fn: Callable[..., Any], *args: Any, timeout: float = 30.0) -> Any:
    """What ``fn(*args)`` returns in a forked child process (which then exits)."""
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    p = ctx.Process(target=lambda: q.put(fn(*args)))
    p.start()
    try:
        return q.get(timeout=timeout)
    finally:
        p.join(timeout)
