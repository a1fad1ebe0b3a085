"""Per-process metrics snapshots: published as files, merged into one :class:`MetricsSnapshot`.

Each process of a run writes its snapshot atomically to ``<metrics dir>/<pid>.json`` (periodically and at exit,
:func:`write_snapshot`); the main process reads them (:func:`read_snapshots`, unchanged files are not parsed
again) and merges them with its own live numbers (:func:`merge`), so DataLoader and optimize workers, which are
separate processes, show up in one :class:`MetricsSnapshot`.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from streamscope._core.procs import pid_alive
from streamscope.events.registry import METRICS, Instrument, by_name
from streamscope.recording.metrics import SpanStats, add_seconds

#: Counters in seconds: their values are summed over processes on a ns grid (see :func:`add_seconds`).
_SECONDS = frozenset(m.name for m in METRICS if m.instrument is Instrument.COUNTER and m.unit == "s")

__all__ = ["MetricsSnapshot", "add_snapshot", "forget_snapshot", "merge", "read_snapshots", "write_snapshot"]


@dataclass
class MetricsSnapshot:
    """Metrics of the whole loader: the main process merged with its worker processes.

    Attributes:
        spans: ``"cat/name"`` -> :class:`SpanStats` summed over processes.
        instants: ``"cat/name"`` -> count of instant events.
        gauges: ``"cat/name"`` -> last value, summed over processes still running (e.g. bytes in flight).
        events: events aggregated.
        dropped: events dropped because a buffer was full.
        sink_errors: failed sink exports.
        processes: pid -> that process's own numbers (events, dropped, sink_errors, alive, final).
        values: the processes' reported values (:mod:`.instruments`), by snapshot key (``"<metric>|<attrs>"``):
            counters summed over every process, the finished ones included; gauges and up-down counters summed
            over the processes still running.
        gauges_max: ``"cat/name"`` -> the largest last value among processes still running (e.g. the bytes of a
            cache directory its workers share).
        open_spans: ``"cat/name"`` -> spans open in the processes still running (as of their last snapshot).
    """

    spans: dict[str, SpanStats] = field(default_factory=dict)
    instants: dict[str, int] = field(default_factory=dict)
    gauges: dict[str, float] = field(default_factory=dict)
    events: int = 0
    dropped: int = 0
    sink_errors: int = 0
    processes: dict[int, dict[str, Any]] = field(default_factory=dict)
    values: dict[str, float] = field(default_factory=dict)
    gauges_max: dict[str, float] = field(default_factory=dict)
    open_spans: dict[str, int] = field(default_factory=dict)

    def span(self, name: str, cat: str | None = None) -> SpanStats:
        """Stats of span ``name`` in ``cat`` (default: category of the same name); empty if never seen."""
        return self.spans.get(f"{cat or name}/{name}", SpanStats())

    def copy(self, processes: bool = True) -> MetricsSnapshot:
        """A copy sharing nothing mutable with this one. (``copy.deepcopy`` took ~7 ms once the per-process map
        held the 2,000 processes of 1,000 epochs with non-persistent workers; this takes a tenth.)
        ``processes=False`` leaves the per-process map out (what a read of the metrics does not need)."""
        return MetricsSnapshot(
            spans={k: replace(v, buckets=list(v.buckets)) for k, v in self.spans.items()},
            instants=dict(self.instants),
            gauges=dict(self.gauges),
            events=self.events,
            dropped=self.dropped,
            sink_errors=self.sink_errors,
            processes={pid: dict(p) for pid, p in self.processes.items()} if processes else {},
            values=dict(self.values),
            gauges_max=dict(self.gauges_max),
            open_spans=dict(self.open_spans),
        )

    def to_dict(self) -> dict[str, Any]:
        """Plain dict (for JSON, exporters and the tuner)."""
        d = asdict(self)
        for k, v in self.spans.items():
            d["spans"][k]["mean_s"] = v.mean_s
        return d


#: Parsed snapshots by path, with the (inode, mtime, size) they were read at: a run with non-persistent workers
#: leaves two files per epoch, read at every flush of the main process; unchanged files are not parsed again
#: (every write is a new file renamed into place, so a rewrite always has a new inode).
_SNAP_CACHE: dict[str, tuple[tuple[int, int, int], dict[str, Any]]] = {}


def read_snapshots(directory: str) -> dict[int, dict[str, Any]]:
    """Every ``<pid>.json`` snapshot in ``directory`` (unreadable or half-written files are skipped).

    A file unchanged since it was last read (same inode, mtime and size) is not parsed again.
    """
    out: dict[int, dict[str, Any]] = {}
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return out
    for e in entries:
        n = e.name
        if not n.endswith(".json"):
            continue
        try:
            pid = int(n[:-5])
            st = e.stat()
            key = (st.st_ino, st.st_mtime_ns, st.st_size)
            hit = _SNAP_CACHE.get(e.path)
            if hit is not None and hit[0] == key:
                out[pid] = hit[1]
                continue
            with open(e.path, encoding="utf-8") as f:
                snap = json.load(f)
        except (ValueError, OSError):
            continue
        if isinstance(snap, dict):
            out[pid] = snap
            if len(_SNAP_CACHE) > 100_000:
                _SNAP_CACHE.clear()
            _SNAP_CACHE[e.path] = (key, snap)
    return out


def write_snapshot(directory: str, snap: dict[str, Any]) -> None:
    """Publish ``snap`` as ``<directory>/<pid>.json`` atomically (tmp file + rename)."""
    pid = snap["pid"]
    final = os.path.join(directory, f"{pid}.json")
    tmp = os.path.join(directory, f".{pid}.json.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(snap, f, default=str)
    os.replace(tmp, final)


def merge(
    snaps: dict[int, dict[str, Any]], base: MetricsSnapshot | None = None, processes: bool = True
) -> MetricsSnapshot:
    """Sum per-process snapshots (on top of a copy of ``base``) into one :class:`MetricsSnapshot`.

    ``processes=False``: the result's per-process map is left empty (cheaper to copy from ``base``)."""
    out = base.copy(processes) if base is not None else MetricsSnapshot()
    for pid, s in sorted(snaps.items()):
        add_snapshot(out, pid, s)
    if not processes:
        out.processes = {}
    return out


def add_snapshot(out: MetricsSnapshot, pid: int, snap: dict[str, Any]) -> bool:
    """Add one process's snapshot to ``out``; False (and ``out`` unchanged) when the snapshot is damaged."""
    trial = MetricsSnapshot()
    try:
        _merge_one(trial, pid, snap)  # a foreign or damaged file in the run directory is not a reason to fail
    except (TypeError, ValueError, AttributeError):
        return False
    out.events += trial.events
    out.dropped += trial.dropped
    out.sink_errors += trial.sink_errors
    for k, st in trial.spans.items():
        have = out.spans.get(k)
        if have is None:
            out.spans[k] = st
        else:
            have.merge(st)
    for k, n in trial.instants.items():
        out.instants[k] = out.instants.get(k, 0) + n
    for k, g in trial.gauges.items():
        out.gauges[k] = out.gauges.get(k, 0.0) + g
    for k, g in trial.gauges_max.items():
        out.gauges_max[k] = max(out.gauges_max.get(k, g), g)
    for k, v in trial.values.items():
        out.values[k] = _add_value(k, out.values.get(k, 0.0), v)
    for k, n in trial.open_spans.items():
        out.open_spans[k] = out.open_spans.get(k, 0) + n
    out.processes.update(trial.processes)
    return True


def forget_snapshot(path: str) -> None:
    """Drop ``path`` from the parse cache (its file was removed)."""
    _SNAP_CACHE.pop(path, None)


def _merge_one(out: MetricsSnapshot, pid: int, s: dict[str, Any]) -> None:
    """Add one process's snapshot to ``out`` (raises on a damaged snapshot)."""
    # (not s.get("alive", <default>): the default would be computed, a /proc read, even when the key is there)
    alive = bool(s["alive"]) if "alive" in s else not s.get("final", False) and pid_alive(pid)
    out.events += int(s.get("events", 0))
    out.dropped += int(s.get("dropped", 0))
    out.sink_errors += int(s.get("sink_errors", 0))
    for k, v in s.get("spans", {}).items():
        st = out.spans.get(k)
        if st is None:
            st = out.spans[k] = SpanStats()
        st.merge(SpanStats(**v))
    for k, n in s.get("instants", {}).items():
        out.instants[k] = out.instants.get(k, 0) + int(n)
    if alive:
        for k, g in s.get("gauges", {}).items():
            out.gauges[k] = out.gauges.get(k, 0.0) + float(g)
            out.gauges_max[k] = max(out.gauges_max.get(k, float(g)), float(g))
        for name, cat, _tid, _fields in s.get("open") or []:
            k = f"{cat}/{name}"
            out.open_spans[k] = out.open_spans.get(k, 0) + 1
    for k, v in (s.get("values") or {}).items():
        if alive or _cumulative(k):
            out.values[k] = _add_value(k, out.values.get(k, 0.0), float(v))
    out.processes[pid] = {
        "events": int(s.get("events", 0)),
        "dropped": int(s.get("dropped", 0)),
        "sink_errors": int(s.get("sink_errors", 0)),
        "alive": alive,
        "final": bool(s.get("final", False)),
    }


def _add_value(k: str, a: float, b: float) -> float:
    """``a + b`` for the value of key ``k``: on the ns grid for a counter of seconds (a sum that never goes down
    whichever way its terms are grouped), plainly otherwise."""
    return add_seconds(a, b) if k.partition("|")[0] in _SECONDS else a + b


def _cumulative(k: str) -> bool:
    """True for the key of a counter (its value counts once its process is done); False for anything else."""
    try:
        return by_name(k.partition("|")[0]).instrument is Instrument.COUNTER
    except KeyError:
        return False
