"""The recorded events every sink and exporter gets in the sink contract (tests/events/test_sink_contract.py).

One fixed list, as the event bus records it (recording order: a complete ``X`` event is recorded when it ends,
after events that began later; a bulk entry stands for several ``X`` events), with the values that break naive
encoders: ``;`` and newlines in values, unicode, credentials in URLs and in an error message, a span whose end is
recorded after another thread's events (a prefetch that began on one thread and whose end comes once a download
on another thread is over), an instant, a counter, a bulk entry and a crash.

Imported by the test and by the OTLP scenario script it runs in a process of its own (``_sink_contract_otlp.py``):
both must build the same events, so they are built here, from a pid only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from streamscope.events import BULK, Bulk, EventBatch
from streamscope.events.bus import Event

__all__ = [
    "ACCESS_KEY",
    "ENV",
    "Expected",
    "OFFSET_NS",
    "SECRETS",
    "T0_NS",
    "WORKER_TID",
    "MAIN_TID",
    "batch",
    "contract_events",
    "expected",
]

#: CLOCK_MONOTONIC of the first event, and the anchor that makes it a Unix time (2023-11-14T22:13:20Z).
T0_NS = 5_000_000_000_000
OFFSET_NS = 1_700_000_000_000_000_000 - T0_NS
MAIN_TID, WORKER_TID = 140_001, 140_002
ENV = {"dist_world_size": 1, "dist_global_rank": 0, "dist_num_nodes": 1, "worker_world_size": 1, "worker_rank": 0}

ACCESS_KEY = "AKIAIOSFODNN7EXAMPLE"
SECRET_KEY = "wJalrXUtnFEMIK7MDENGbPxRfiCYEXAMPLEKEY"
SIGNATURE = "5d672d79c15b13162d9279b0855cfba6789a8edb4c82c400e06b5924a6f2b5d7"
SAS = "sv2024ZZsigHIDDENsasTOKEN"
#: What must appear in no output (the parts of credentials that a naive encoder copies).
SECRETS = (ACCESS_KEY, SECRET_KEY, SIGNATURE, SAS)

TRICKY = "a;b; c\nsecond line\r\nthird\u2028 ünïcødé 数据 🚀"
S3_URL = f"s3://{ACCESS_KEY}:{SECRET_KEY}@bucket/ds/chunk-0-3.bin?X-Amz-Signature={SIGNATURE}&x-id=GetObject"
AZ_URL = f"https://acct.blob.core.windows.net/out/chunk-1-0.bin?sv=2024&sig={SAS}"


def _us(x: float) -> int:
    return T0_NS + int(x * 1000)


def contract_events(pid: int) -> list[Event]:
    """The fixed events of process ``pid``, in recording order (``ts_ns`` CLOCK_MONOTONIC, see :data:`T0_NS`)."""
    M, W = MAIN_TID, WORKER_TID
    e: list[Event] = [
        ("B", "epoch", "epoch", _us(0), pid, M, {"epoch": 0, "workers": 1}),
        ("B", "stall", "stall", _us(10), pid, M, {"batch": 0}),
        ("B", "prefetch", "prefetch", _us(20), pid, W, {"chunk": 3}),
        ("B", "download", "download", _us(30), pid, W, {"chunk": 3, "url": S3_URL}),
        ("I", "retry", "download", _us(40), pid, W, {"attempt": 2, "error": f"ConnectionError: reset; {TRICKY}"}),
        ("C", "cache_bytes", "cache", _us(45), pid, W, {"value": 4096}),
        ("E", "download", "download", _us(5_000), pid, W, {"chunk": 3, "url": S3_URL, "bytes": 4096}),
        ("B", "lock", "lock", _us(5_010), pid, W, {"op": "increment", "count": 1}),
        ("E", "lock", "lock", _us(5_020), pid, W, {"op": "increment", "count": 1}),
        ("X", "decompress", "decompress", _us(5_100), pid, W, {"chunk": 3, "note": TRICKY, "dur": 900.0}),
        ("B", "read", "read", _us(6_100), pid, W, {"chunk": 3, "file": "chunk-0-3.bin", "label": TRICKY}),
        ("E", "read", "read", _us(7_000), pid, W, {"chunk": 3, "file": "chunk-0-3.bin", "label": TRICKY}),
        # the samples of a batch decoded together: one bulk entry for four X events
        (
            BULK,
            "sample",
            "sample",
            _us(7_100),
            pid,
            W,
            Bulk(4, _us(7_500), {"chunk": [3] * 4, "item": [0, 1, 2, 3]}, None, None, {"dataset": "ünï;data"}),
        ),  # fmt: skip
        ("B", "cache", "cache", _us(7_600), pid, W, {"chunk": 3, "status": "hit"}),
        ("E", "cache", "cache", _us(7_700), pid, W, {"chunk": 3, "status": "hit"}),
        ("B", "delete", "delete", _us(7_800), pid, W, {"chunk": 2}),
        ("E", "delete", "delete", _us(7_900), pid, W, {"chunk": 2}),
        ("B", "upload", "upload", _us(8_000), pid, W, {"chunk": 0, "url": AZ_URL}),
        ("E", "upload", "upload", _us(9_000), pid, W, {"chunk": 0, "url": AZ_URL, "bytes": 1024}),
        ("B", "chunk_write", "write", _us(9_100), pid, W, {"chunk": 0}),
        ("E", "chunk_write", "write", _us(9_200), pid, W, {"chunk": 0}),
        # the main thread's stall (20 ms: long enough to be a span in OTLP) ends after the worker's events
        ("E", "stall", "stall", _us(20_010), pid, M, {"batch": 0}),
        ("B", "batch", "batch", _us(20_020), pid, M, {"batch": 0, "epoch": 0}),
        ("E", "batch", "batch", _us(20_500), pid, M, {"batch": 0, "epoch": 0}),
        # the prefetch began on the worker thread; its end is recorded there (Span keeps its thread) after the
        # main thread's events
        ("E", "prefetch", "prefetch", _us(20_600), pid, W, {"chunk": 3}),
        ("I", "tune", "tune", _us(21_000), pid, M, {"knob": "max_pre_download", "reason": f"wait up; {TRICKY}"}),
        (
            "I",
            "crash",
            "crash",
            _us(22_000),
            pid,
            M,
            {"exception": "RuntimeError", "error": f"RuntimeError: boom at {S3_URL}\nTraceback; line"},
        ),  # fmt: skip
        ("E", "epoch", "epoch", _us(30_000), pid, M, {"epoch": 0, "workers": 1}),
    ]
    return e


def batch(pid: int) -> EventBatch:
    """The events as the batch processor hands them to an exporter."""
    return EventBatch(contract_events(pid), OFFSET_NS, dict(ENV))


@dataclass(frozen=True)
class Expected:
    """One logical event an output must hold once: a span (B/E pair or X), an instant or a counter sample."""

    kind: str  # "span", "instant" or "counter"
    name: str
    cat: str
    start_ns: int  # Unix-epoch ns
    end_ns: int  # = start_ns for instants and counters
    tid: int


def expected(pid: int) -> list[Expected]:
    """What :func:`contract_events` stands for, one entry per logical event (bulk entries expanded)."""
    out: list[Expected] = []
    open_: dict[tuple[int, str, str], list[int]] = {}
    for ph, name, cat, ts, _pid, tid, fields in contract_events(pid):
        t = ts + OFFSET_NS
        if ph == "B":
            open_.setdefault((tid, name, cat), []).append(t)
        elif ph == "E":
            out.append(Expected("span", name, cat, open_[(tid, name, cat)].pop(), t, tid))
        elif ph == "X":
            f: Any = fields
            out.append(Expected("span", name, cat, t, t + int(f["dur"] * 1000), tid))
        elif ph == BULK:
            b: Any = fields
            share = (b.t1 - ts) // b.n
            out += [Expected("span", name, cat, t + k * share, t + (k + 1) * share, tid) for k in range(b.n)]
        elif ph == "I":
            out.append(Expected("instant", name, cat, t, t, tid))
        elif ph == "C":
            out.append(Expected("counter", name, cat, t, t, tid))
    assert not any(open_.values())
    return sorted(out, key=lambda x: (x.start_ns, x.name))
