"""From parsed lines to spans, instants and counters, in one streaming pass with bounded state.

:class:`Normalizer` matches ``B``/``E`` pairs on a stack per (run, pid, tid, name) (an ``E`` carrying a ``chunk``
closes the innermost open span of the same chunk, so concurrent downloads in one thread pair up correctly), names
processes by rank and worker, places each span on a *lane* (one track per thread and category; a second lane
when a span of the same name is already open there, so every lane nests properly), links a chunk's ``download``
to the ``read`` spans of that chunk that follow (flow ids), detects logs that mix several runs, and records every
problem it sees in :class:`Problems`. State is proportional to what is open at one time, not to the log size.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from streamscope.events import CATEGORIES
from streamscope.events import kinds as ek
from trace_tools.parse import RawEvent

KNOWN_CATEGORIES = frozenset(CATEGORIES)
KNOWN_PH = frozenset({"B", "E", "X", "I", "C", "M"})

#: Rank/worker context written on every line; outputs show it once per process (process labels).
ENV_FIELDS = ("dist_world_size", "dist_global_rank", "dist_num_nodes", "worker_world_size", "worker_rank")

#: A thread's timestamps jumping back by more than this many microseconds start a new run (pid reuse).
RUN_GAP_US = 10_000_000.0

#: At most this many chunks wait for their read to link a flow to; the oldest is forgotten beyond it.
MAX_PENDING_FLOWS = 65536

#: Training-loop spans: they run in the main process and are not "worker activity".
LOOP_CATEGORIES = frozenset({ek.EPOCH.cat, ek.BATCH.cat, ek.STALL.cat, ek.TUNER.cat})

#: Names of the span around one epoch of the training loop (cat epoch): LitData's and streamscope's.
LOOP_SPAN_NAMES = frozenset({"dataloader", ek.EPOCH.name})


#: Spans of the write path (``optimize``/``map`` and their helpers), by name: logs written before the write path had
#: categories of its own (``upload``, ``write``) put ``upload`` in ``download`` and ``chunk_write`` in ``read``.
WRITE_PATH_NAMES = frozenset(
    {
        kind.name
        for kind in (
            ek.OPTIMIZE_INPUT,
            ek.OPTIMIZE_FN,
            ek.SERIALIZE,
            ek.CHUNK_WRITE,
            ek.UPLOAD,
            ek.INDEX_MERGE,
            ek.OVERWRITE,
            ek.RESHARD,
            ek.BUILD_KEYS_INDEX,
            ek.COPY,
        )
    }
)

#: Categories only the write path logs.
WRITE_PATH_CATEGORIES = frozenset({ek.UPLOAD.cat, ek.CHUNK_WRITE.cat})

#: Categories a DataLoader worker logs while it reads (unless the span's name is the write path's).
LOADER_CATEGORIES = frozenset(
    kind.cat
    for kind in (ek.DOWNLOAD, ek.READ, ek.DECOMPRESS, ek.SAMPLE, ek.PREFETCH, ek.CACHE_BYTES, ek.DELETE, ek.LOCK)
)

#: A worker's role, by what it logs, and the word its label carries.
ROLE_WORDS = {"loader": "loader worker", "optimize": "optimize worker", "": "worker"}


def event_role(cat: str, name: str) -> str:
    """``"optimize"`` for an event of the write path, ``"loader"`` for one of the read path, else ``""``."""
    if cat in WRITE_PATH_CATEGORIES or name in WRITE_PATH_NAMES:
        return "optimize"
    if cat in LOADER_CATEGORIES:
        return "loader"
    return ""


def is_loop_event(ev: RawEvent) -> bool:
    """True for events only the training loop (main process) logs: batch, stall, and the epoch span."""
    return ev.cat in (ek.BATCH.cat, ek.STALL.cat) or (ev.cat == ek.EPOCH.cat and ev.name in LOOP_SPAN_NAMES)


@dataclass
class Problems:
    """Counts per problem kind, with the first few examples of each."""

    counts: dict[str, int] = field(default_factory=dict)
    examples: dict[str, list[str]] = field(default_factory=dict)

    def add(self, kind: str, text: str, limit: int = 3) -> None:
        """Count one problem of ``kind``; keep ``text`` if fewer than ``limit`` examples are kept."""
        self.counts[kind] = self.counts.get(kind, 0) + 1
        lst = self.examples.setdefault(kind, [])
        if len(lst) < limit:
            lst.append(text)


@dataclass(slots=True)
class Proc:
    """A process of one run, named by rank and worker."""

    run: int
    pid: int
    rank: int
    worker: int | None
    label: str
    uuid: int
    index: int
    version: int = 0
    env: dict[str, str] = field(default_factory=dict)
    role: str = ""  # "loader" | "optimize" | "" (not known yet): what the process logged first (event_role)


@dataclass(slots=True)
class Lane:
    """One track: a thread's spans of one category (``j`` > 0 when same-name spans overlap)."""

    proc: Proc
    tid: int
    cat: str
    j: int
    uuid: int
    thread_uuid: int
    chrome_tid: int
    name: str
    open: list = field(default_factory=list)


@dataclass(slots=True)
class Span:
    """A begin/end pair (``e`` is ``None`` until the end is seen). Times in microseconds."""

    proc: Proc
    tid: int
    name: str
    cat: str
    b: float
    e: float | None
    args: dict[str, str]
    lane: Lane
    line: int
    flow_in: int | None = None
    flow_out: int | None = None
    end_args: dict[str, str] | None = None


@dataclass(slots=True)
class Point:
    """An instant (``ph`` I) or a counter sample (``ph`` C)."""

    kind: str
    proc: Proc
    tid: int
    name: str
    cat: str
    ts: float
    args: dict[str, str]
    lane: Lane | None
    value: float = 0.0
    counter_uuid: int = 0


def _int_arg(args: dict[str, str], *keys: str) -> int | None:
    for k in keys:
        v = args.get(k)
        if v not in (None, ""):
            try:
                return int(float(v))
            except ValueError:
                return None
    return None


class Normalizer:
    """Turns :class:`RawEvent` lines into ``("B"|"E"|"U", Span)`` and ``("I"|"C", Point)`` items.

    ``"U"`` items are spans still open at the end of the log (yielded by :meth:`finish`).
    """

    def __init__(self, categories: frozenset[str] | None = None) -> None:
        self.keep = categories
        self.problems = Problems()
        self.runs = 1
        self._procs: dict[int, Proc] = {}
        self._main_pid: dict[tuple[int, int], int] = {}  # (run, rank) -> pid that started an epoch
        self._loop_pid: dict[tuple[int, int], int] = {}  # (run, rank) -> pid that logged loop events
        self._provisional: dict[tuple[int, int], Proc] = {}  # (run, rank) -> ambiguous pid taken as main
        self._lanes: dict[tuple[int, int, int, str], list[Lane]] = {}
        self._threads: dict[tuple[int, int, int], int] = {}
        self._stacks: dict[tuple[int, int, int, str], list[Span]] = {}
        self._last_ts: dict[tuple[int, int, int], float] = {}
        self._counters: dict[tuple[int, int, str], int] = {}
        self._chrome_tids: dict[int, int] = {}
        self._flows: dict[tuple[int, str], int] = {}
        self._uuid = 0
        self._flow = 0
        self._nproc = 0

    # -- identities -------------------------------------------------------------------------------------------
    def _next_uuid(self) -> int:
        self._uuid += 1
        return self._uuid

    def _proc(self, ev: RawEvent) -> Proc:
        p = self._procs.get(ev.pid)
        if p is not None:
            return p
        return self._new_proc(ev, self.runs - 1)

    def _new_proc(self, ev: RawEvent, run: int) -> Proc:
        a = ev.args
        rank = _int_arg(a, "dist_global_rank", "rank") or 0
        wws = _int_arg(a, "worker_world_size")
        wr = _int_arg(a, "worker_rank", "worker")
        rkey = (run, rank)
        self._nproc += 1
        env = {k: a[k] for k in ENV_FIELDS if k in a}
        p = Proc(run, ev.pid, rank, None, "", self._next_uuid(), self._nproc, 0, env)
        self._procs[ev.pid] = p
        if is_loop_event(ev) or wr is None or wws in (None, 0):
            worker = None
        elif wws == 1 and wr == 0:
            # LitData and streamscope write worker_world_size 1 / worker_rank 0 in the main process too: the
            # main process is the one that logs loop events; until one does, the first such pid is taken as main
            main = self._loop_pid.get(rkey)
            worker = 0 if (main is not None and main != ev.pid) or rkey in self._provisional else None
            if worker is None:
                self._provisional[rkey] = p
        else:
            worker = wr
        self._set_label(p, worker)
        return p

    def _set_label(self, p: Proc, worker: int | None) -> None:
        p.worker = worker
        label = f"rank {p.rank} · " + ("main" if worker is None else f"{ROLE_WORDS[p.role]} {worker}")
        p.label = f"run {p.run + 1} · {label}" if p.run else label
        p.version += 1

    def _loop_seen(self, proc: Proc) -> None:
        """``proc`` logged a training-loop event: it is its rank's main process."""
        rkey = (proc.run, proc.rank)
        if self._loop_pid.get(rkey) == proc.pid:
            return
        self._loop_pid[rkey] = proc.pid
        prov = self._provisional.pop(rkey, None)
        if prov is not None and prov is not proc and prov.worker is None:
            self._set_label(prov, 0)
        if proc.worker is not None:
            self._set_label(proc, None)

    def _lane(self, proc: Proc, tid: int, cat: str, name: str) -> Lane:
        key = (proc.run, proc.pid, tid, cat)
        lanes = self._lanes.get(key)
        if lanes is None:
            lanes = self._lanes[key] = []
        for lane in lanes:
            if not any(s.name == name for s in lane.open):
                return lane
        tkey = (proc.run, proc.pid, tid)
        tu = self._threads.get(tkey)
        if tu is None:
            tu = self._threads[tkey] = self._next_uuid()
        ct = self._chrome_tids.get(proc.uuid, 0) + 1
        self._chrome_tids[proc.uuid] = ct
        j = len(lanes)
        lane = Lane(proc, tid, cat, j, self._next_uuid(), tu, ct, f"tid {tid} · {cat}" + (f" #{j + 1}" if j else ""))
        lanes.append(lane)
        return lane

    # -- the pass ---------------------------------------------------------------------------------------------
    def feed(self, ev: RawEvent) -> tuple[str, object] | list[tuple[str, object]] | None:
        """Process one event line: ``None``, one item, or a list of items (``X`` gives a begin and an end)."""
        ph = ev.ph
        if ph not in KNOWN_PH:
            self.problems.add("unknown_ph", f"line {ev.line}: ph {ev.ph!r}")
            return None
        if ph == "M":
            return None
        if ev.cat not in KNOWN_CATEGORIES:
            self.problems.add("unknown_category", f"line {ev.line}: cat {ev.cat!r} (name {ev.name!r})")
        proc = self._proc(ev)
        self._check_run(ev, proc)
        proc = self._procs[ev.pid]
        if is_loop_event(ev):
            self._loop_seen(proc)
        if not proc.role:
            role = event_role(ev.cat, ev.name)
            if role:
                # a DataLoader worker and an optimize worker both log worker_rank 0..N-1: what they log tells them
                # apart (the first telling event decides, so a label changes at most once for this)
                proc.role = role
                if proc.worker is not None:
                    self._set_label(proc, proc.worker)
        if self.keep is not None and ev.cat not in self.keep:
            return None
        if ph == "B":
            return "B", self._begin(ev, proc, ev.ts)
        elif ph == "E":
            span = self._end(ev, proc)
            return None if span is None else ("E", span)
        elif ph == "X":
            span = self._begin(ev, proc, ev.ts)
            span.e = ev.ts + max(ev.dur, 0.0)
            self._close(span)
            return [("B", span), ("E", span)]
        elif ph == "I":
            lane = self._lane(proc, ev.tid, ev.cat, "\0instant")
            return "I", Point("I", proc, ev.tid, ev.name, ev.cat, ev.ts, ev.args, lane)
        elif ph == "C":
            raw = ev.args.get("value")
            try:
                value = float(raw) if raw is not None else float("nan")
            except ValueError:
                value = float("nan")
            if not math.isfinite(value):
                self.problems.add("bad_counter", f"line {ev.line}: counter {ev.name!r} value {raw!r}")
                return None
            ckey = (proc.run, proc.pid, ev.name)
            cu = self._counters.get(ckey)
            if cu is None:
                cu = self._counters[ckey] = self._next_uuid()
            return "C", Point("C", proc, ev.tid, ev.name, ev.cat, ev.ts, ev.args, None, value, cu)
        return None

    def _check_run(self, ev: RawEvent, proc: Proc) -> None:
        tkey = (proc.run, ev.pid, ev.tid)
        last = self._last_ts.get(tkey)
        if last is not None and ev.ts < last:
            back = last - ev.ts
            self.problems.add(
                "ts_backwards", f"line {ev.line}: pid {ev.pid} tid {ev.tid} ts goes back {back:.3f} us ({ev.name})"
            )
            if back > RUN_GAP_US:
                self._start_run(ev, f"pid {ev.pid} reused: its timestamps jump back {back / 1e6:.1f} s")
                proc = self._procs[ev.pid]
                tkey = (proc.run, ev.pid, ev.tid)
        self._last_ts[tkey] = ev.ts
        if ev.ph == "B" and ev.cat == ek.EPOCH.cat and ev.name in LOOP_SPAN_NAMES:
            rkey = (proc.run, proc.rank)
            main = self._main_pid.get(rkey)
            if main is None:
                self._main_pid[rkey] = ev.pid
            elif main != ev.pid:
                self._start_run(ev, f"rank {proc.rank} starts a second training loop in pid {ev.pid} (was {main})")
                proc = self._procs[ev.pid]
                self._main_pid[(proc.run, proc.rank)] = ev.pid

    def _start_run(self, ev: RawEvent, why: str) -> None:
        self.runs += 1
        self.problems.add("mixed_runs", f"line {ev.line}: run {self.runs} starts ({why})")
        self._new_proc(ev, self.runs - 1)

    def _begin(self, ev: RawEvent, proc: Proc, ts: float) -> Span:
        lane = self._lane(proc, ev.tid, ev.cat, ev.name)
        span = Span(proc, ev.tid, ev.name, ev.cat, ts, None, ev.args, lane, ev.line)
        lane.open.append(span)
        if ev.ph == "B":
            self._stacks.setdefault((proc.run, ev.pid, ev.tid, ev.name), []).append(span)
        chunk = ev.args.get("chunk")
        if chunk:
            fkey = (proc.run, chunk)
            if ev.name == ek.DOWNLOAD.name:
                self._flow += 1
                flows = self._flows
                flows.pop(fkey, None)
                flows[fkey] = span.flow_out = self._flow
                if len(flows) > MAX_PENDING_FLOWS:
                    del flows[next(iter(flows))]
            elif ev.name == ek.READ.name:
                fid = self._flows.get(fkey)
                if fid is not None:
                    span.flow_in = span.flow_out = fid
            elif ev.name == ek.DELETE.name:
                self._flows.pop(fkey, None)
        return span

    def _close(self, span: Span) -> None:
        open_ = span.lane.open
        if open_ and open_[-1] is span:
            open_.pop()
        else:
            self.problems.add(
                "improper_nesting", f"line {span.line}: {span.name} ends while a later span on its track is open"
            )
            open_.remove(span)

    def _end(self, ev: RawEvent, proc: Proc) -> Span | None:
        stack = self._stacks.get((proc.run, ev.pid, ev.tid, ev.name))
        if not stack:
            self.problems.add("unmatched_E", f"line {ev.line}: E {ev.name!r} (pid {ev.pid} tid {ev.tid}) has no B")
            return None
        idx = len(stack) - 1
        chunk = ev.args.get("chunk")
        if chunk is not None and stack[idx].args.get("chunk", chunk) != chunk:
            for i in range(idx - 1, -1, -1):
                if stack[i].args.get("chunk") == chunk:
                    idx = i
                    break
        span = stack.pop(idx)
        if ev.ts < span.b:
            self.problems.add("ts_backwards", f"line {ev.line}: E {ev.name!r} before its B (line {span.line})")
        span.e = max(ev.ts, span.b)
        if ev.args:
            changed = {k: v for k, v in ev.args.items() if span.args.get(k) != v}
            if changed:
                span.end_args = changed
            merged = dict(span.args)
            merged.update(ev.args)
            span.args = merged
        self._close(span)
        return span

    def finish(self) -> Iterator[tuple[str, object]]:
        """Yield the spans never closed (``"U"``) and count them as problems."""
        for stack in self._stacks.values():
            for span in stack:
                self.problems.add(
                    "unmatched_B", f"line {span.line}: B {span.name!r} (pid {span.proc.pid} tid {span.tid}) never ends"
                )
                yield "U", span
        self._stacks.clear()

    def run(self, events: Iterable[RawEvent]) -> Iterator[tuple[str, object]]:
        """Feed every event and then finish."""
        feed = self.feed
        for ev in events:
            r = feed(ev)
            if r is None:
                continue
            if type(r) is list:
                yield from r
            else:
                yield r  # type: ignore[misc]
        yield from self.finish()
