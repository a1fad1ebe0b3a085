"""The run's processes as the main process sees them: their newest snapshots, the done ones retired.

The process that created the run directory (the *owner*: the training process, one per rank) keeps, per process
of its run, the newest snapshot it has: the file the process published or the one its parcel brought
(:mod:`.handover`). Each snapshot carries its process's start time (``token``), which tells a worker apart from
a later process with the same pid. At every flush of the owner (its flusher's tick, ``flush_tracer()``, exit):

* the directory is scanned once (:func:`~streamscope.recording.snapshots.read_snapshots`; unchanged files are not
  parsed again) and the result kept (:attr:`RunCollector.files`): reading the metrics does not scan again;
* a process that is done (final snapshot, or dead) is *retired*: the spans its last snapshot lists as open are
  closed (an ``E`` with ``aborted: 1``: a worker killed outright, e.g. SIGKILL, or torch's SIGTERM + ``_exit(0)``
  after a worker error), its numbers join one running total (:attr:`RunCollector.retired`) and its file is
  removed. A run with non-persistent DataLoader workers starts two processes an epoch; a flush then reads only
  the files of the processes still running.
* a dead process whose parcel may still come (:func:`RunCollector.repair`'s ``parcel_may_come``: its spool file
  in the run directory, or adopted and not taken in yet) is not retired yet: its parcel's snapshot is newer than
  its file. Retired on the file, the process would count twice once the parcel came. As a last guard, a
  snapshot of a process already retired (same pid and start time) is ignored: counted less, never twice.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, overload

from streamscope._core.procs import pid_alive
from streamscope.events.bus import Event
from streamscope.recording.snapshots import MetricsSnapshot, add_snapshot, forget_snapshot, merge, read_snapshots

__all__ = ["ExportFn", "RunCollector", "close_for", "current", "newest", "older", "same_process"]


#: Writes repair events (the ``E`` of spans a dead process left open) to this process's exporters.
ExportFn = Callable[[list[Event]], None]


class RunCollector:
    """What the owner of a run knows of its other processes.

    Attributes:
        parcel_snaps: pid -> the newest snapshot a parcel of that process brought.
        files: pid -> the snapshot files as of the last scan (see :meth:`repair`).
        retired: the summed numbers of the run's processes that are done.
        stuck: done processes whose snapshot file could not be removed (never added twice).
        gone: (pid, start token) of the processes retired lately (a later snapshot of one is not counted again).
    """

    #: Retired processes remembered in :attr:`gone`.
    GONE = 4096

    def __init__(self) -> None:
        self.parcel_snaps: dict[int, dict[str, Any]] = {}
        self.files: dict[int, dict[str, Any]] = {}
        self.retired = MetricsSnapshot()
        self.stuck: set[int] = set()
        self.gone: OrderedDict[tuple[int, Any], None] = OrderedDict()

    def note(self, pid: int, snapshot: dict[str, Any]) -> None:
        """A parcel of process ``pid`` brought ``snapshot``: keep it if it is the newer (not if that process was
        retired already)."""
        if (pid, snapshot.get("token")) in self.gone:
            return
        self.parcel_snaps[pid] = newest(self.parcel_snaps.get(pid), snapshot)

    def repair(
        self,
        directory: str,
        me: int,
        now: int,
        export: ExportFn,
        parcel_may_come: Callable[[int], bool] | None = None,
    ) -> None:
        """Scan the run directory; close the spans that dead processes left open (their last snapshot lists them)
        and retire the snapshots of processes that are done (see module doc). ``parcel_may_come(pid)``: True
        while a parcel of that process may still arrive (asked after the process is seen dead)."""
        files = read_snapshots(directory)
        for pid in set(files) | set(self.parcel_snaps):
            if pid == me or pid in self.stuck:
                continue
            file, handed = files.get(pid), self.parcel_snaps.get(pid)
            if file is not None and (pid, file.get("token")) in self.gone:  # retired; its file came back
                self._forget_file(directory, pid)
                files.pop(pid, None)
                file = None
                if handed is None:
                    continue
            if not same_process(file, handed):  # the older of two processes with this pid is gone
                if older(file, handed):  # type: ignore[arg-type]
                    self._retire(directory, pid, file, now, export, remove_file=True)  # type: ignore[arg-type]
                    files.pop(pid, None)
                    file = None
                else:
                    self._retire(directory, pid, handed, now, export, drop_handed=True)  # type: ignore[arg-type]
                    handed = None
            snap = newest(file, handed)
            if snap is None or (not snap.get("final") and pid_alive(pid)):
                continue
            if not snap.get("final") and parcel_may_come is not None and parcel_may_come(pid):
                continue  # dead, but its newer snapshot is on its way
            self._retire(
                directory, pid, snap, now, export, remove_file=file is not None, drop_handed=handed is not None
            )
            files.pop(pid, None)
        self.files = files

    def _retire(
        self,
        directory: str,
        pid: int,
        snap: dict[str, Any],
        now: int,
        export: ExportFn,
        remove_file: bool = False,
        drop_handed: bool = False,
    ) -> None:
        """Add a done process's numbers to :attr:`retired` (closing what it left open) and forget its snapshot
        (its file, the one a parcel brought)."""
        if not snap.get("final"):
            close_for(pid, snap, now, export)
        if remove_file:
            self._forget_file(directory, pid)
        if drop_handed:
            self.parcel_snaps.pop(pid, None)
        add_snapshot(self.retired, pid, snap)
        self.gone[(pid, snap.get("token"))] = None
        while len(self.gone) > self.GONE:
            self.gone.popitem(last=False)

    def _forget_file(self, directory: str, pid: int) -> None:
        path = os.path.join(directory, f"{pid}.json")
        try:
            os.remove(path)
        except OSError:
            self.stuck.add(pid)  # left in place: never added twice
        forget_snapshot(path)

    def current(self, me: int, directory: str | None, scan: bool = True) -> dict[int, dict[str, Any]]:
        """pid -> the snapshot that stands for each other process of the run still counted (not retired).

        ``scan``: read the directory now (what ``streamscope.metrics()`` does); else use the last scan, whose
        processes were alive then unless their snapshot was final (a dead one was retired by that scan's repair).
        """
        if not scan:
            snaps = {pid: {**s, "alive": not s.get("final")} for pid, s in self.files.items()}
        else:
            snaps = read_snapshots(directory) if directory else {}
        snaps.pop(me, None)
        for pid, handed in self.parcel_snaps.items():
            if not scan:
                handed = {**handed, "alive": not handed.get("final")}
            snaps[pid] = current(snaps.get(pid), handed)  # type: ignore[assignment]
        return snaps

    def merged(
        self, me: int, own: dict[str, Any], directory: str | None, scan: bool = True, processes: bool = True
    ) -> MetricsSnapshot:
        """This process's ``own`` snapshot merged with the run's other processes and the retired ones
        (``processes=False``: without the per-process map)."""
        snaps = self.current(me, directory, scan)
        snaps[me] = own
        return merge(snaps, base=self.retired, processes=processes)


def close_for(pid: int, snap: dict[str, Any], now: int, export: ExportFn) -> None:
    """Write an ``E`` (``aborted: 1``) for every span a dead process left open; count them in ``snap``."""
    fixes: list[Event] = []
    env = snap.get("env") or {}
    for name, cat, tid, fields in snap.get("open") or []:
        f = dict(fields)
        f.update(env)
        f["aborted"] = 1
        fixes.append(("E", str(name), str(cat), now, pid, int(tid), f))
    if fixes:
        export(fixes)
    snap["final"] = True
    snap["open"] = []
    spans = snap.setdefault("spans", {})
    for e in fixes:
        st = spans.setdefault(f"{e[2]}/{e[1]}", {})
        st["aborted"] = int(st.get("aborted", 0)) + 1


def older(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """True when snapshot ``a`` is from a process that started before ``b``'s."""
    try:
        return int(a.get("token", 0)) < int(b.get("token", 0))
    except (TypeError, ValueError):
        return False


def same_process(a: dict[str, Any] | None, b: dict[str, Any] | None) -> bool:
    """False when two snapshots of one pid come from two processes (different start times)."""
    return a is None or b is None or a.get("token") == b.get("token")


def current(file: dict[str, Any] | None, handed: dict[str, Any] | None) -> dict[str, Any] | None:
    """The snapshot that stands for the process holding the pid: the later of one process's two, or the later
    process's when the pid was taken again."""
    if not same_process(file, handed):
        return handed if older(file, handed) else file  # type: ignore[arg-type]
    return newest(file, handed)


@overload
def newest(a: dict[str, Any] | None, b: dict[str, Any]) -> dict[str, Any]: ...
@overload
def newest(a: dict[str, Any] | None, b: dict[str, Any] | None) -> dict[str, Any] | None: ...
def newest(a: dict[str, Any] | None, b: dict[str, Any] | None) -> dict[str, Any] | None:
    """The later of two snapshots of one process (its numbers only grow; a final one is its last): by their
    ``seq`` (a snapshot's number in its process), then by what they counted."""
    if a is None or b is None:
        return a if b is None else b

    def rank(s: dict[str, Any]) -> tuple[int, ...]:
        return (
            int(s.get("seq", 0)),
            int(s.get("events", 0)),
            int(s.get("dropped", 0)),
            int(s.get("sink_errors", 0)),
            int(bool(s.get("final"))),
        )

    return b if rank(b) > rank(a) else a
