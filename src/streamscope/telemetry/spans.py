"""The span encoder: which trace events become OpenTelemetry spans, with what parent, links and attributes.

A pure function of the events (plus the open spans each thread carries across batches); no OpenTelemetry import.
:class:`SpanEncoder` turns an :class:`~streamscope.events.EventBatch` into :class:`Op` records that a transport
replays: :mod:`.otel` through OpenTelemetry's tracer in a rank's main process, or :mod:`.spool` writes the
selected events to a file that main process reads (a worker that writes its own events exports nothing).

What becomes a span (the span rate is bounded: per-sample and per-batch work is aggregated, never a span):

* ``epoch``-category spans (a loader's epoch, its plan, ``optimize``/``map``): always; they are the parents
  of the rank's other spans by time (a worker's download that began during an epoch is a child of it).
* chunk-level work: the ``download``, ``read``, ``decompress``, ``delete``, ``prefetch`` and ``cache`` spans,
  except the per-batch and per-item ones (:data:`PER_ITEM_NAMES`: ``decode_batch``, ``key_lookup``, ...).
* ``stall``: the training loop's waits of at least ``otel_stall_min`` (10 ms: with no
  workers every batch's decoding is a wait, and waits that short are in the metrics).
* ``crash`` and ``tune`` instants: zero-length spans (a crash with status ERROR). Other instants (a retry, a
  hedge) become events of the span open on their thread.
* Never: the ``sample``, ``batch`` and ``lock`` categories and counter samples: the metrics count them.

The transport then applies a token bucket (``otel_span_rate``) to everything but epochs, crashes and failed spans.

Parents: a ``B``/``E`` span's parent is the span open on its thread when it began; a span with no such parent is
the child of the rank's epoch span during which it began. Links: a ``read`` or ``decompress`` span of a chunk
links to that chunk's ``download`` span (matched by the chunk file's name without its suffixes:
``chunk-0-3.zstd.bin``, ``chunk-0-3.bin`` and ``chunk-0-3.bin.download.1234`` are one chunk).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any, NamedTuple

from streamscope.events import kinds as ek
from streamscope.events.bus import BULK, Bulk, as_list
from streamscope.events.exporters import EventBatch
from streamscope.storage.redact import redact

__all__ = [
    "DOWNLOAD",
    "ESSENTIAL_CATEGORIES",
    "INSTANT_SPANS",
    "LINKED_CATEGORIES",
    "MAX_ORPHANS",
    "MAX_STR",
    "Op",
    "PER_ITEM_CATEGORIES",
    "PER_ITEM_NAMES",
    "SpanEncoder",
    "attribute_value",
    "attributes",
    "chunk_stem",
    "selected",
]


#: Categories whose events never become spans: one per sample, batch or lock operation (the metrics count them).
PER_ITEM_CATEGORIES = frozenset({ek.SAMPLE.cat, ek.BATCH.cat, ek.LOCK.cat})
#: Events of span categories done per batch or per item: aggregated, never a span.
PER_ITEM_NAMES = frozenset(
    kind.name
    for kind in (ek.DECODE_BATCH, ek.KEY_LOOKUP, ek.READ_ITEM, ek.OPTIMIZE_INPUT, ek.OPTIMIZE_FN, ek.SERIALIZE)
)
#: Spans never held back by the rate bound.
ESSENTIAL_CATEGORIES = frozenset({ek.EPOCH.cat, ek.CRASH.cat})
#: Instants that become zero-length spans (others become events of the span open on their thread).
INSTANT_SPANS = frozenset({ek.CRASH.cat, ek.TUNER.cat})
#: Spans that a chunk's reads link to, and the spans that link to them.
DOWNLOAD = (ek.DOWNLOAD.name, ek.DOWNLOAD.cat)
LINKED_CATEGORIES = frozenset({ek.READ.cat, ek.DECOMPRESS.cat})
_STALL, _CRASH = ek.STALL.cat, ek.CRASH.cat
#: Most ends kept waiting for their begins (see :meth:`SpanEncoder.encode`).
MAX_ORPHANS = 4096
#: Longest string attribute value (characters).
MAX_STR = 256

#: Field name -> attribute name where OpenTelemetry's semantic conventions have one; others: ``streamscope.<f>``.
_SEMCONV = {"url": "url.full", "exception": "exception.type", "error": "exception.message"}
#: Fields that are not attributes: ``dur`` is the span's length, ``value`` a counter's.
_SKIP = frozenset({"dur", "value"})


class Op(NamedTuple):
    """One step for the transport.

    ``kind``: ``start`` (a ``B``: the span opens), ``end`` (its ``E``), ``whole`` (a complete span: ``t1`` set),
    ``note`` (an event of the open span ``parent``). ``key`` names the span within the run (``(pid, n)``);
    ``parent`` the key of its parent span (None: find one by time); ``stem`` the chunk it downloads or reads.
    Times are Unix-epoch nanoseconds.
    """

    kind: str
    key: tuple[int, int] | None
    name: str
    cat: str
    t0: int
    t1: int
    attrs: dict[str, Any]
    parent: tuple[int, int] | None
    pid: int
    error: str | None = None
    stem: str | None = None


def selected(event: tuple[Any, ...]) -> bool:
    """Whether ``event`` may become a span or a span's event (cheap: a worker filters with it before spooling)."""
    ph, name, cat = event[0], event[1], event[2]
    return ph != "C" and cat not in PER_ITEM_CATEGORIES and name not in PER_ITEM_NAMES


def chunk_stem(fields: dict[str, Any]) -> str | None:
    """The name of the chunk a span works on, without directory and suffixes (``chunk-0-3``), or None."""
    for k in ("file", "url", "path", "key"):
        v = fields.get(k)
        if isinstance(v, str) and v:
            base = os.path.basename(v.split("?", 1)[0].rstrip("/"))
            stem = base.split(".", 1)[0]
            return stem or None
    return None


def attribute_value(v: Any) -> Any:
    """An attribute value OpenTelemetry takes: numbers and booleans as they are, text redacted and capped."""
    if isinstance(v, bool) or isinstance(v, (int, float)):
        return v
    if hasattr(v, "item") and callable(v.item):  # a numpy scalar
        try:
            return attribute_value(v.item())
        except Exception:
            pass
    s = v if isinstance(v, str) else str(v)
    s = redact(s)
    return s if len(s) <= MAX_STR else s[: MAX_STR - 3] + "..."


def attributes(
    fields: dict[str, Any], env: dict[str, int], pid: int, tid: int, worker: bool, cat: str | None = None
) -> dict[str, Any]:
    """A span's attributes: its event's category (``streamscope.category``: names alone do not tell a write path's
    ``upload`` from a read path's span, and the categories are what a trace is filtered by), the event's fields
    (``streamscope.<field>``, ``url.full``, ``exception.*``) and where it ran (``process.pid``, ``thread.id``,
    ``streamscope.rank``, and ``streamscope.worker`` in a worker)."""
    out: dict[str, Any] = {}
    if cat is not None:
        out["streamscope.category"] = cat
    for k, v in fields.items():
        if k in _SKIP or v is None:
            continue
        out[_SEMCONV.get(k) or f"streamscope.{k}"] = attribute_value(v)
    out["process.pid"] = pid
    out["thread.id"] = tid
    out["streamscope.rank"] = int(env.get("dist_global_rank", 0))
    if worker:
        out["streamscope.worker"] = int(env.get("worker_rank", 0))
    return out


def _error(fields: dict[str, Any]) -> str | None:
    exc = fields.get("exception")
    if exc is None:
        return None
    return redact(str(fields.get("error") or exc))[:MAX_STR]


class SpanEncoder:
    """Events to :class:`Op` records, keeping each thread's open spans across batches.

    Args:
        main_pid: the rank's main process (its events need no ``streamscope.worker``).
        stall_min_ns: the shortest ``stall`` that becomes a span.
    """

    def __init__(self, main_pid: int, stall_min_ns: int = 10_000_000) -> None:
        self.main_pid = main_pid
        self.stall_min_ns = stall_min_ns
        #: per thread, its open spans: (key, name, begin ns, category)
        self.stacks: dict[tuple[int, int], list[tuple[tuple[int, int], str, int, str]]] = {}
        #: per thread, ends that came before their begins: (name, end ns, attributes, error, Unix end ns)
        self.orphans: dict[tuple[int, int], list[tuple[str, int, dict[str, Any], str | None, int]]] = {}
        self._orphan_count = 0
        self._seq = 0

    def _key(self, pid: int) -> tuple[int, int]:
        self._seq += 1
        return (pid, self._seq)

    def encode(self, batch: EventBatch) -> list[Op]:
        """The ops of ``batch``'s selected events, in their order."""
        out: list[Op] = []
        off = batch.epoch_offset_ns
        stacks = self.stacks
        stack: list[tuple[tuple[int, int], str, int, str]] | None
        # in time order across the batch's processes (each thread's events are already): a chunk's download then
        # comes before the reads of that chunk by another worker, which link to it
        events = sorted((e for e in batch.events if selected(e)), key=_ts)
        for e in events:
            ph, name, cat, ts, pid, tid, fields = e
            env = batch.env_of(pid)
            worker = pid != self.main_pid
            t = ts + off
            if ph == BULK:
                out.extend(self._bulk(e, env, off, worker))
                continue
            sk = (pid, tid)
            if ph == "B":
                stack = stacks.setdefault(sk, [])
                key = self._key(pid)
                parent = stack[-1][0] if stack else None
                attrs = attributes(fields, env, pid, tid, worker, cat)
                out.append(Op("start", key, name, cat, t, 0, attrs, parent, pid, None, _stem(name, cat, fields)))
                stack.append((key, name, ts, cat))
            elif ph == "E":
                stack = stacks.get(sk) or []
                i = len(stack) - 1
                while i >= 0 and stack[i][1] != name:
                    i -= 1
                attrs = attributes(fields, env, pid, tid, worker, cat)
                if i < 0:
                    # Its begin has not come yet: a worker's last events (its spool, written at exit and read at a
                    # flush) can reach the main process before its parcel with the rest (a queue message the loop
                    # has not taken yet). The spans that parcel leaves open take these ends (_end_matched).
                    self._keep_orphan(sk, name, ts, attrs, _error(fields), t)
                    continue
                key = stack[i][0]
                del stack[i]
                if not stack:
                    del stacks[sk]
                out.append(Op("end", key, name, cat, 0, t, attrs, None, pid, _error(fields)))
            elif ph == "X":
                dur_ns = int(float(fields.get("dur", 0)) * 1000)
                if cat == _STALL and dur_ns < self.stall_min_ns:
                    continue
                attrs = attributes(fields, env, pid, tid, worker, cat)
                out.append(
                    Op(
                        "whole",
                        self._key(pid),
                        name,
                        cat,
                        t,
                        t + dur_ns,
                        attrs,
                        self._parent(sk, ts),
                        pid,
                        _error(fields),
                        _stem(name, cat, fields),
                    )
                )
            elif ph == "I":
                attrs = attributes(fields, env, pid, tid, worker, cat)
                if cat in INSTANT_SPANS:
                    err = _error(fields) if cat == _CRASH else None
                    if cat == _CRASH and err is None:
                        err = _CRASH
                    out.append(Op("whole", self._key(pid), name, cat, t, t, attrs, self._parent(sk, ts), pid, err))
                else:
                    stack = stacks.get(sk)
                    if stack:
                        out.append(Op("note", None, name, cat, t, t, attrs, stack[-1][0], pid))
        self._end_matched(out)
        return out

    def _keep_orphan(
        self, sk: tuple[int, int], name: str, ts: int, attrs: dict[str, Any], err: str | None, t: int
    ) -> None:
        if self._orphan_count >= MAX_ORPHANS:
            return  # bounded: such an end is lost, as one whose begin never comes
        self.orphans.setdefault(sk, []).append((name, ts, attrs, err, t))
        self._orphan_count += 1

    def _end_matched(self, out: list[Op]) -> None:
        """End the spans this batch left open whose ends came before it, innermost first (all of a thread's kept
        ends are later than everything of that thread in the batch)."""
        for sk in [sk for sk in self.orphans if sk in self.stacks]:
            stack = self.stacks[sk]
            left = []
            for name, te, attrs, err, t in sorted(self.orphans[sk], key=lambda o: o[1]):
                i = len(stack) - 1
                while i >= 0 and (stack[i][1] != name or stack[i][2] > te):
                    i -= 1
                if i < 0:
                    left.append((name, te, attrs, err, t))
                    continue
                key, _n, _ts, cat = stack.pop(i)
                out.append(Op("end", key, name, cat, 0, t, attrs, None, sk[0], err))
                self._orphan_count -= 1
            if left:
                self.orphans[sk] = left
            else:
                del self.orphans[sk]
            if not stack:
                del self.stacks[sk]

    def _parent(self, sk: tuple[int, int], ts: int) -> tuple[int, int] | None:
        """The span open on this thread that began before ``ts`` (None: find one by time)."""
        stack = self.stacks.get(sk)
        if stack and stack[-1][2] <= ts:
            return stack[-1][0]
        return None

    def _bulk(self, e: tuple[Any, ...], env: dict[str, int], off: int, worker: bool) -> Iterable[Op]:
        """Complete events of a bulk entry (the loop's stalls): only those that last at least the minimum."""
        _ph, name, cat, t0, pid, tid, b = e
        if not isinstance(b, Bulk) or cat != _STALL:
            return ()
        if b.starts is None or b.ends is None:
            share = max(0, b.t1 - t0) // max(1, b.n)
            spans = [(t0 + k * share, t0 + (k + 1) * share) for k in range(b.n)]
        else:
            spans = list(zip(as_list(b.starts), as_list(b.ends)))
        cols = [(k, as_list(v)) for k, v in b.cols.items()]
        out = []
        for k, (s, x) in enumerate(spans):
            if x - s < self.stall_min_ns:
                continue
            f = {c: v[k] for c, v in cols}
            f.update(b.fields)
            attrs = attributes(f, env, pid, tid, worker, cat)
            out.append(
                Op("whole", self._key(pid), name, cat, s + off, x + off, attrs, self._parent((pid, tid), s), pid)
            )
        return out

    def forget(self, pids: Iterable[int]) -> None:
        """Drop the open spans of processes that are gone (their ``E`` will not come)."""
        gone = set(pids)
        for sk in [sk for sk in self.stacks if sk[0] in gone]:
            del self.stacks[sk]
        for sk in [sk for sk in self.orphans if sk[0] in gone]:
            self._orphan_count -= len(self.orphans.pop(sk))


def _ts(e: tuple[Any, ...]) -> int:
    ts: int = e[3]
    return ts


def _stem(name: str, cat: str, fields: dict[str, Any]) -> str | None:
    if (name, cat) == DOWNLOAD or cat in LINKED_CATEGORIES:
        return chunk_stem(fields)
    return None
