"""The tracing API every stage calls. A no-op until enabled.

Contract for call sites (stable; the recorder and sinks behind it may change):

* ``ACTIVE`` is the set of active category names. It is mutated in place, never rebound, so a module may
  hold a reference. Hot paths guard with one membership test: ``if "sample" in ACTIVE: ...``.
* ``span(name, cat, **fields)`` is a context manager that records a begin/end pair (``B``/``E``) when
  ``cat`` is active; the end is recorded on normal exit, on exceptions and on generator close.
* ``instant(name, cat, **fields)`` records a point event (``I``), e.g. a crash or a retry.
* ``counter(name, cat, value, **fields)`` records a counter sample (``C``), e.g. bytes in flight.

Field values should be ints, floats, bools or short strings; URLs must already have credentials removed.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

CATEGORIES: tuple[str, ...] = (
    "epoch",
    "batch",
    "sample",
    "download",
    "read",
    "decompress",
    "delete",
    "prefetch",
    "lock",
    "crash",
    "stall",
    "tune",
    "cache",
)

ACTIVE: set[str] = set()

# Recorded events: (ph, name, cat, ts_ns, pid, tid, fields)
Event = tuple[str, str, str, int, int, int, dict[str, Any]]
_buffer: list[Event] = []


def enabled(cat: str) -> bool:
    """True when category ``cat`` is being recorded."""
    return cat in ACTIVE


def _record(ph: str, name: str, cat: str, fields: dict[str, Any]) -> None:
    _buffer.append((ph, name, cat, time.monotonic_ns(), os.getpid(), threading.get_ident(), fields))


@contextmanager
def _span(name: str, cat: str, fields: dict[str, Any]) -> Iterator[dict[str, Any]]:
    _record("B", name, cat, fields)
    try:
        yield fields
    finally:
        _record("E", name, cat, fields)


@contextmanager
def _nothing() -> Iterator[dict[str, Any]]:
    yield {}


def span(name: str, cat: str, **fields: Any):  # type: ignore[no-untyped-def]
    """Record a begin/end pair around the ``with`` body when ``cat`` is active.

    The yielded dict may be updated inside the body (e.g. ``f["bytes"] = n``); the end event carries it.
    """
    if cat not in ACTIVE:
        return _nothing()
    return _span(name, cat, fields)


def instant(name: str, cat: str, **fields: Any) -> None:
    """Record a point event when ``cat`` is active."""
    if cat in ACTIVE:
        _record("I", name, cat, fields)


def counter(name: str, cat: str, value: float, **fields: Any) -> None:
    """Record a counter sample when ``cat`` is active."""
    if cat in ACTIVE:
        fields["value"] = value
        _record("C", name, cat, fields)


def drain() -> list[Event]:
    """Take and clear the events recorded so far in this process (tests and sinks use this)."""
    out = list(_buffer)
    _buffer.clear()
    return out
