"""Shared helpers: write synthetic logs in streamscope's line layout, read outputs back."""

from __future__ import annotations

import gzip
import json
import os
from dataclasses import dataclass, field

DATA = os.path.join(os.path.dirname(__file__), "data")
STREAMSCOPE_LOG = os.path.join(DATA, "streamscope_small.log")
LITDATA_LOG = os.path.join(DATA, "litdata_small.log")

T0 = 1_700_000_000_000_000


def line(ph: str, name: str, cat: str, ts: float, pid: int = 1, tid: int = 1, worker: int | None = None, **args) -> str:
    """One event line in streamscope's layout (ts first, ph last, every struct field present)."""
    wws, wr = (1, 0) if worker is None else (4, worker)
    a = "".join(f"{k}: {v}; " for k, v in args.items())
    return (
        f"ts: {T0 + ts:.3f}; pid: {pid}; tid: {tid}; name: {name}; cat: {cat}; cname: generic_work; dur: 0; s: t; {a}"
        f"dist_world_size: 1; dist_global_rank: {args.get('rank', 0)}; dist_num_nodes: 1; "
        f"worker_world_size: {wws}; worker_rank: {wr}; ph: {ph};\n"
    )


def span(
    name: str, cat: str, b: float, e: float, pid: int = 1, tid: int = 1, worker: int | None = None, **args
) -> list[str]:
    """A B line and an E line."""
    return [line("B", name, cat, b, pid, tid, worker, **args), line("E", name, cat, e, pid, tid, worker, **args)]


def write_log(path: str, lines: list[str]) -> str:
    with open(path, "w") as f:
        f.writelines(lines)
    return path


def _strict(token: str) -> None:
    raise ValueError(f"non-standard JSON constant {token} in the output")


def load_chrome(path: str) -> dict:
    """Parse a Chrome JSON output back (gzip or plain), refusing NaN/Infinity like strict JSON parsers do."""
    if path.endswith(".gz"):
        with gzip.open(path, "rt", encoding="utf-8") as f:
            return json.load(f, parse_constant=_strict)
    with open(path, encoding="utf-8") as f:
        return json.load(f, parse_constant=_strict)


@dataclass
class PerfettoView:
    """What a native trace contains, recovered from the protobuf alone."""

    processes: dict[int, str] = field(default_factory=dict)  # uuid -> process name
    labels: dict[int, list[str]] = field(default_factory=dict)  # uuid -> process labels
    threads: dict[int, tuple[int, int]] = field(default_factory=dict)  # uuid -> (parent uuid, tid)
    tracks: dict[int, tuple[int, str]] = field(default_factory=dict)  # lane uuid -> (parent uuid, name)
    counters: dict[int, tuple[int, str]] = field(default_factory=dict)
    slices: list[dict] = field(default_factory=list)  # name, cat, ts, dur (ns), track, args, flows
    instants: list[dict] = field(default_factory=list)
    counter_values: dict[str, list[float]] = field(default_factory=dict)
    unbalanced: dict[int, int] = field(default_factory=dict)

    def process_of(self, track: int) -> str:
        parent, _ = self.tracks[track]
        tparent, _ = self.threads[parent]
        return self.processes[tparent]


def load_perfetto(path: str) -> PerfettoView:
    """Parse a .pftrace back with perfetto_trace_pb2 and rebuild slices from begin/end per track."""
    from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

    trace = pb.Trace()
    with open(path, "rb") as f:
        trace.ParseFromString(f.read())
    v = PerfettoView()
    stacks: dict[int, list[dict]] = {}
    packets = sorted(
        (p for p in trace.packet if p.HasField("track_event")), key=lambda p: p.timestamp
    )  # the trace processor sorts by timestamp too
    for p in trace.packet:
        if p.HasField("track_descriptor"):
            td = p.track_descriptor
            if td.HasField("process"):
                v.processes[td.uuid] = td.process.process_name
                v.labels[td.uuid] = list(td.process.process_labels)
            elif td.HasField("thread"):
                v.threads[td.uuid] = (td.parent_uuid, td.thread.tid)
            elif td.HasField("counter"):
                v.counters[td.uuid] = (td.parent_uuid, td.name)
            else:
                v.tracks[td.uuid] = (td.parent_uuid, td.name)
    for p in packets:
        e = p.track_event
        args = {}
        for a in e.debug_annotations:
            which = a.WhichOneof("value")
            args[a.name] = getattr(a, which) if which else None
        if e.type == pb.TrackEvent.TYPE_SLICE_BEGIN:
            stacks.setdefault(e.track_uuid, []).append(
                {"name": e.name, "cat": list(e.categories), "ts": p.timestamp, "track": e.track_uuid, "args": args,
                 "flows": list(e.flow_ids), "term": list(e.terminating_flow_ids)}
            )  # fmt: skip
        elif e.type == pb.TrackEvent.TYPE_SLICE_END:
            st = stacks.get(e.track_uuid)
            if not st:
                v.unbalanced[e.track_uuid] = v.unbalanced.get(e.track_uuid, 0) - 1
                continue
            s = st.pop()
            s["dur"] = p.timestamp - s["ts"]
            s["args"].update(args)
            v.slices.append(s)
        elif e.type == pb.TrackEvent.TYPE_INSTANT:
            v.instants.append(
                {"name": e.name, "cat": list(e.categories), "ts": p.timestamp, "track": e.track_uuid, "args": args}
            )
        elif e.type == pb.TrackEvent.TYPE_COUNTER:
            name = v.counters[e.track_uuid][1]
            val = e.double_counter_value if e.HasField("double_counter_value") else e.counter_value
            v.counter_values.setdefault(name, []).append(val)
    for uuid, st in stacks.items():
        if st:
            v.unbalanced[uuid] = len(st)
    return v
