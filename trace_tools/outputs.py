"""Output writers for ``convert``: Chrome JSON (plain or gzip) and native Perfetto protobuf, both streamed.

Both consume the items of :class:`trace_tools.model.Normalizer` as they come and hold no more than the
identities already declared (processes, threads, lanes, counters). Output goes to a temporary file next to the
target and is renamed into place only when complete, so a failed conversion never leaves a file that looks done.
"""

from __future__ import annotations

import gzip
import io
import json
import math
import os
from typing import IO, Any

from streamscope._core.optional import require
from trace_tools.errors import TraceToolError
from trace_tools.model import Lane, Point, Proc, Span

#: Chrome/Perfetto process ids of later runs are offset by this much, so a reused pid gets its own process.
RUN_PID_STRIDE = 1 << 22


def typed(value: str) -> int | float | str:
    """A numeric-looking arg string as a number, anything else unchanged."""
    if not value or len(value) > 40:
        return value
    c = value[0]
    if c.isdigit() or (c == "-" and len(value) > 1):
        try:
            return int(value)
        except ValueError:
            try:
                f = float(value)
            except ValueError:
                return value
            return f if f == f and f not in (float("inf"), float("-inf")) else value
    return value


def us_to_ns(us: float) -> int:
    """Microseconds (a float of epoch magnitude) to integer nanoseconds without the float rounding of ``us * 1000``."""
    whole = math.floor(us)
    return max(0, int(whole) * 1000 + round((us - whole) * 1000.0))


def out_pid(proc: Proc) -> int:
    """The pid used in outputs: the real pid, offset for runs after the first."""
    return proc.pid + proc.run * RUN_PID_STRIDE


class AtomicOutput:
    """A file written under a temporary name and renamed to ``path`` on :meth:`commit`.

    Raises:
        TraceToolError: when the directory does not exist or is not writable.
    """

    def __init__(self, path: str, binary: bool) -> None:
        self.path = path
        directory = os.path.dirname(os.path.abspath(path))
        if os.path.isdir(path):
            raise TraceToolError(f"{path}: is a directory, give a file name for the output")
        if not os.path.isdir(directory):
            raise TraceToolError(f"{path}: cannot write, directory {directory} does not exist")
        self.tmp = os.path.join(directory, f".{os.path.basename(path)}.tmp-{os.getpid()}")
        try:
            raw = open(self.tmp, "wb")  # noqa: SIM115 - closed in commit/abort
        except OSError as exc:
            raise TraceToolError(f"{path}: cannot write ({exc.strerror or exc})") from None
        self._raw = raw
        self.binary: IO[bytes] = raw
        self.gz: gzip.GzipFile | None = None
        self._buffered: io.BufferedWriter | None = None
        if path.endswith(".gz"):
            self.gz = gzip.GzipFile(filename="", mode="wb", fileobj=raw, compresslevel=3, mtime=0)
            # GzipFile (before 3.12) compresses on every write call: hand it large blocks
            self._buffered = io.BufferedWriter(self.gz, buffer_size=1 << 20)  # type: ignore[arg-type]
            self.binary = self._buffered
        self.text: IO[str] | None = None if binary else io.TextIOWrapper(self.binary, encoding="utf-8", newline="")

    def commit(self) -> None:
        """Flush, close and rename into place."""
        try:
            if self.text is not None:
                self.text.flush()
                self.text.detach()
            if self._buffered is not None:
                self._buffered.flush()
                self._buffered.detach()
            if self.gz is not None:
                self.gz.close()
            self._raw.close()
            os.replace(self.tmp, self.path)
        except OSError as exc:
            self.abort()
            raise TraceToolError(f"{self.path}: cannot write ({exc.strerror or exc})") from None

    def abort(self) -> None:
        """Close and delete the temporary file."""
        for closer in (self._buffered, self.gz, self._raw):
            try:
                if closer is not None:
                    closer.close()
            except (OSError, ValueError):
                pass
        try:
            os.unlink(self.tmp)
        except OSError:
            pass


def _args(args: dict[str, str], env: dict[str, str]) -> dict[str, int | float | str]:
    """Event args as typed values, without the rank/worker context the process already carries."""
    return {k: typed(v) for k, v in args.items() if env.get(k) != v}


_ENCODE = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode


class ChromeWriter:
    """Chrome trace-event JSON: ``{"traceEvents":[...]}``, one event per line, ``X`` events written at ``E``."""

    def __init__(self, out: IO[str]) -> None:
        self.out = out
        self.n = 0
        self._procs: dict[int, int] = {}
        self._lanes: set[int] = set()
        out.write('{"displayTimeUnit":"ms","traceEvents":[\n')

    def _emit(self, obj: dict[str, Any]) -> None:
        self.out.write((",\n" if self.n else "") + _ENCODE(obj))
        self.n += 1

    def _declare(self, proc: Proc, lane: Lane | None) -> None:
        pid = out_pid(proc)
        if self._procs.get(proc.uuid) != proc.version:
            self._procs[proc.uuid] = proc.version
            self._emit({"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": proc.label}})
            if proc.env:
                labels = ",".join(f"{k}={v}" for k, v in proc.env.items())
                self._emit({"ph": "M", "name": "process_labels", "pid": pid, "tid": 0, "args": {"labels": labels}})
            self._emit(
                {"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0, "args": {"sort_index": proc.index}}
            )
        if lane is not None and lane.uuid not in self._lanes:
            self._lanes.add(lane.uuid)
            self._emit(
                {"ph": "M", "name": "thread_name", "pid": pid, "tid": lane.chrome_tid, "args": {"name": lane.name}}
            )
            self._emit(
                {
                    "ph": "M",
                    "name": "thread_sort_index",
                    "pid": pid,
                    "tid": lane.chrome_tid,
                    "args": {"sort_index": lane.chrome_tid},
                }
            )

    def handle(self, kind: str, obj: object) -> None:
        """Write one normalizer item."""
        if kind == "E":
            s: Span = obj  # type: ignore[assignment]
            self._declare(s.proc, s.lane)
            ev: dict[str, Any] = {
                "ph": "X",
                "name": s.name,
                "cat": s.cat,
                "ts": s.b,
                "dur": (s.e or s.b) - s.b,
                "pid": out_pid(s.proc),
                "tid": s.lane.chrome_tid,
                "args": _args(s.args, s.proc.env),
            }
            if s.flow_in is not None or s.flow_out is not None:
                ev["bind_id"] = s.flow_out if s.flow_out is not None else s.flow_in
                if s.flow_in is not None:
                    ev["flow_in"] = True
                if s.flow_out is not None:
                    ev["flow_out"] = True
            self._emit(ev)
        elif kind == "U":
            s = obj  # type: ignore[assignment]
            self._declare(s.proc, s.lane)
            args = _args(s.args, s.proc.env)
            args["unfinished"] = True
            self._emit(
                {
                    "ph": "B",
                    "name": s.name,
                    "cat": s.cat,
                    "ts": s.b,
                    "pid": out_pid(s.proc),
                    "tid": s.lane.chrome_tid,
                    "args": args,
                }
            )
        elif kind == "I":
            p: Point = obj  # type: ignore[assignment]
            self._declare(p.proc, p.lane)
            self._emit(
                {
                    "ph": "i",
                    "s": "t",
                    "name": p.name,
                    "cat": p.cat,
                    "ts": p.ts,
                    "pid": out_pid(p.proc),
                    "tid": p.lane.chrome_tid if p.lane else 0,
                    "args": _args(p.args, p.proc.env),
                }
            )
        elif kind == "C":
            p = obj  # type: ignore[assignment]
            self._declare(p.proc, None)
            self._emit(
                {"ph": "C", "name": p.name, "cat": p.cat, "ts": p.ts, "pid": out_pid(p.proc), "args": {p.name: p.value}}
            )

    def close(self, meta: dict[str, Any]) -> None:
        """Finish the JSON document."""
        self.out.write('\n],"otherData":' + json.dumps(meta, separators=(",", ":")) + "}\n")


def _annotate(ev: Any, args: dict[str, str], env: dict[str, str]) -> None:
    for k, v in args.items():
        if env.get(k) == v:
            continue
        a = ev.debug_annotations.add()
        a.name = k
        t = typed(v)
        if isinstance(t, bool):
            a.bool_value = t
        elif isinstance(t, int) and -(1 << 63) <= t < (1 << 63):
            a.int_value = t
        elif isinstance(t, float):
            a.double_value = t
        else:
            a.string_value = str(v)


class PerfettoWriter:
    """Native Perfetto ``TracePacket`` stream: track descriptors on first sight, slice begin/end as they come."""

    SEQ = 0x5353  # trusted_packet_sequence_id for every packet we write

    def __init__(self, out: IO[bytes]) -> None:
        feature = "writing a native Perfetto trace (.pftrace)"
        self.pb = require("perfetto.protos.perfetto.trace.perfetto_trace_pb2", feature)
        proto_builder = require("perfetto.trace_builder.proto_builder", feature)
        self.builder = proto_builder.StreamingTraceProtoBuilder(out)
        self.n = 0
        self._declared: set[int] = set()
        #: each counter track's category, as its descriptor declares it
        self._counter_cats: dict[int, str] = {}
        self._proc_versions: dict[int, int] = {}
        self._synthetic_tid = 1 << 30

    def _packet(self, ts_us: float | None = None) -> Any:
        p = self.builder.create_packet()
        p.trusted_packet_sequence_id = self.SEQ
        if self.n == 0:
            p.sequence_flags = self.pb.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED
        if ts_us is not None:
            p.timestamp = us_to_ns(ts_us)
        return p

    def _write(self, p: Any) -> None:
        self.builder.write_packet(p)
        self.n += 1

    def _declare_proc(self, proc: Proc) -> None:
        if self._proc_versions.get(proc.uuid) == proc.version:
            return
        self._proc_versions[proc.uuid] = proc.version
        p = self._packet()
        td = p.track_descriptor
        td.uuid = proc.uuid
        td.process.pid = out_pid(proc)
        td.process.process_name = proc.label
        td.process.process_labels.extend(f"{k}={v}" for k, v in proc.env.items())
        self._write(p)

    def _declare_lane(self, lane: Lane) -> None:
        self._declare_proc(lane.proc)
        if lane.thread_uuid not in self._declared:
            self._declared.add(lane.thread_uuid)
            tid = lane.tid
            if not 0 < tid < (1 << 31):
                self._synthetic_tid += 1
                tid = self._synthetic_tid
            p = self._packet()
            td = p.track_descriptor
            td.uuid = lane.thread_uuid
            td.parent_uuid = lane.proc.uuid
            td.thread.pid = out_pid(lane.proc)
            td.thread.tid = tid
            td.thread.thread_name = f"tid {lane.tid}"
            self._write(p)
        if lane.uuid not in self._declared:
            self._declared.add(lane.uuid)
            p = self._packet()
            td = p.track_descriptor
            td.uuid = lane.uuid
            td.parent_uuid = lane.thread_uuid
            td.name = lane.name
            self._write(p)

    def handle(self, kind: str, obj: object) -> None:
        """Write one normalizer item."""
        pb = self.pb
        if kind == "B":
            s: Span = obj  # type: ignore[assignment]
            self._declare_lane(s.lane)
            p = self._packet(s.b)
            e = p.track_event
            e.type = pb.TrackEvent.TYPE_SLICE_BEGIN
            e.track_uuid = s.lane.uuid
            e.name = s.name
            e.categories.append(s.cat)
            _annotate(e, s.args, s.proc.env)
            if s.flow_out is not None:
                e.flow_ids.append(s.flow_out)
            elif s.flow_in is not None:
                e.terminating_flow_ids.append(s.flow_in)
            self._write(p)
        elif kind == "E":
            s = obj  # type: ignore[assignment]
            p = self._packet(s.e)
            e = p.track_event
            e.type = pb.TrackEvent.TYPE_SLICE_END
            e.track_uuid = s.lane.uuid
            if s.end_args:
                _annotate(e, s.end_args, s.proc.env)
            self._write(p)
        elif kind == "I":
            pt: Point = obj  # type: ignore[assignment]
            assert pt.lane is not None
            self._declare_lane(pt.lane)
            p = self._packet(pt.ts)
            e = p.track_event
            e.type = pb.TrackEvent.TYPE_INSTANT
            e.track_uuid = pt.lane.uuid
            e.name = pt.name
            e.categories.append(pt.cat)
            _annotate(e, pt.args, pt.proc.env)
            self._write(p)
        elif kind == "C":
            pt = obj  # type: ignore[assignment]
            if pt.counter_uuid not in self._declared:
                self._declare_proc(pt.proc)
                self._declared.add(pt.counter_uuid)
                p = self._packet()
                td = p.track_descriptor
                td.uuid = pt.counter_uuid
                td.parent_uuid = pt.proc.uuid
                td.name = pt.name
                # A counter's category belongs to its track (CounterDescriptor.categories), as a slice's is on its
                # event: without it Perfetto shows the counter under no category while Chrome's C event has one.
                if pt.cat:
                    td.counter.categories.append(pt.cat)
                self._counter_cats[pt.counter_uuid] = pt.cat
                if "bytes" in pt.name:
                    td.counter.unit = pb.CounterDescriptor.UNIT_SIZE_BYTES
                else:
                    td.counter.unit = pb.CounterDescriptor.UNIT_COUNT
                self._write(p)
            p = self._packet(pt.ts)
            e = p.track_event
            e.type = pb.TrackEvent.TYPE_COUNTER
            e.track_uuid = pt.counter_uuid
            if pt.cat != self._counter_cats[pt.counter_uuid]:
                # the track is keyed by name: a sample under another category says its own (rare, a few bytes)
                e.categories.append(pt.cat)
            if pt.value == int(pt.value) and abs(pt.value) < (1 << 62):
                e.counter_value = int(pt.value)
            else:
                e.double_counter_value = pt.value
            self._write(p)

    def close(self, meta: dict[str, Any]) -> None:
        """Nothing to finish: a Perfetto trace is a concatenation of packets."""
