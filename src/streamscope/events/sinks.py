"""Sink plugins: what the flusher hands batches of events to.

A sink is any object with ``export(batch)``, ``force_flush()`` and ``shutdown()``. Sinks live in higher
layers (``streamscope.trace``) and are made known to ``events`` in one of two ways:

* ``events.add_sink(factory)``: a zero-argument callable returning a sink, called lazily in every process
  that records events (again in a forked child, which never reuses its parent's sink objects);
* the environment variable ``STREAMSCOPE_TRACE_SINKS``: a comma list of ``module:attr`` dotted paths to such
  factories (a class works), resolved with importlib at the first export. This is how a spawned DataLoader
  or optimize worker gets its sink without anyone calling ``enable_tracer`` in it.

A sink must not block for long and may raise: the recorder counts the error, reports it once on stderr and
carries on; the data path never sees it.
"""

from __future__ import annotations

import importlib
import os
import pickle
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from streamscope.events.bus import Event


@dataclass(frozen=True)
class EventBatch:
    """Events of one process handed to a sink.

    A sink whose class sets ``mixed_batches = True`` may also get the events of several processes in one
    batch (the recorder then writes what other processes handed over together with its own, see
    :class:`Parcel`): ``envs`` holds the fields of every process but the recording one.

    Attributes:
        events: tuples ``(ph, name, cat, ts_ns, pid, tid, fields)`` in recording order per process; ``ts_ns``
            is CLOCK_MONOTONIC nanoseconds.
        epoch_offset_ns: add to ``ts_ns`` for Unix-epoch nanoseconds (one anchor shared by every process
            of a run, so timestamps compare across processes).
        env: rank/worker fields of the recording process (``dist_world_size`` ... ``worker_rank``).
        envs: pid -> rank/worker fields of the other processes whose events the batch holds (mixed batches).
    """

    events: list[Event]
    epoch_offset_ns: int
    env: dict[str, int]
    envs: dict[int, dict[str, int]] = field(default_factory=dict)

    def env_of(self, pid: int) -> dict[str, int]:
        """The rank/worker fields of process ``pid``'s events."""
        return self.envs.get(pid, self.env) if self.envs else self.env


class Parcel:
    """Trace events one process hands to another of its run to write (a DataLoader worker's last events, sent
    to the main process with its batches: a short-lived worker then neither opens the log nor encodes).

    Attributes:
        pid: the process that recorded them.
        events: as in :class:`EventBatch` (already aggregated into the sender's metrics).
        env: the sender's rank/worker fields.
        snapshot: the sender's metrics snapshot as it hands the parcel over (None without a metrics directory):
            it need not write one at exit unless it records more.
        tag: the sender's number for the receiver (a DataLoader worker's id), -1 when none.
    """

    __slots__ = ("pid", "events", "env", "snapshot", "tag")

    def __init__(
        self,
        pid: int,
        events: list[Event],
        env: dict[str, int],
        snapshot: dict[str, Any] | None = None,
        tag: int = -1,
    ) -> None:
        self.pid = pid
        self.events = events
        self.env = env
        self.snapshot = snapshot
        self.tag = tag

    def __reduce__(self) -> tuple[Any, ...]:
        return (Parcel, (self.pid, self.events, self.env, self.snapshot, self.tag))

    def __repr__(self) -> str:
        return f"Parcel(pid={self.pid}, events={len(self.events)})"


def spool_path(directory: str, pid: int) -> str:
    """Where process ``pid`` leaves a parcel nobody has taken yet as it exits (see :func:`write_spool`)."""
    return os.path.join(directory, f"parcel-{pid}.pkl")


def write_spool(directory: str, parcel: Parcel) -> None:
    """Leave ``parcel`` in the run directory, whole or not at all (written aside, then renamed)."""
    path = spool_path(directory, parcel.pid)
    tmp = f"{path}.tmp"
    with open(tmp, "wb") as f:
        pickle.dump(parcel, f, protocol=pickle.HIGHEST_PROTOCOL)
    os.replace(tmp, path)


def take_spool(directory: str, pid: int) -> Parcel | None:
    """The parcel process ``pid`` left (None when it left none), removed from the run directory.

    Raises:
        pickle.UnpicklingError, EOFError, OSError, ...: a damaged file (removed all the same).
    """
    try:
        with open(spool_path(directory, pid), "rb") as f:
            parcel = pickle.load(f)
    except FileNotFoundError:
        return None
    finally:
        drop_spool(directory, pid)
    return parcel if isinstance(parcel, Parcel) else None


def drop_spool(directory: str, pid: int) -> None:
    """Remove the parcel process ``pid`` left in the run directory, if any (unread)."""
    try:
        os.remove(spool_path(directory, pid))
    except OSError:
        pass


@runtime_checkable
class Sink(Protocol):
    """What the recorder calls. Encoding belongs to the sink's encoder; transport to the sink."""

    def export(self, batch: EventBatch) -> None:
        """Take a batch of events (called from the flusher thread)."""

    def force_flush(self) -> None:
        """Push anything buffered to its destination."""

    def shutdown(self) -> None:
        """Flush and release resources; called once at process exit."""


SinkFactory = Callable[[], Sink]


def resolve(spec: str) -> SinkFactory:
    """Import ``module:attr`` and return the factory it names.

    Raises:
        ImportError, AttributeError: when the path does not resolve.
    """
    mod, _, attr = spec.strip().partition(":")
    if not mod or not attr:
        raise ImportError(f"sink spec {spec!r} is not of the form 'package.module:Factory'")
    obj: object = importlib.import_module(mod)
    for part in attr.split("."):
        obj = getattr(obj, part)
    if not callable(obj):
        raise TypeError(f"sink spec {spec!r} does not name a callable")
    return obj  # type: ignore[return-value]


def parse_specs(raw: str) -> list[str]:
    """Split a ``STREAMSCOPE_TRACE_SINKS`` value into its dotted paths (order kept, duplicates removed)."""
    out: list[str] = []
    for p in raw.split(","):
        p = p.strip()
        if p and p not in out:
            out.append(p)
    return out
