"""The metrics view built from the merged snapshots: :func:`build` turns a merged
:class:`~streamscope.recording.snapshots.MetricsSnapshot` (the main process and its workers, the finished ones
included) into a :class:`~streamscope.events.view.MetricsView` of the registry's metrics. The recorder reads it in
the main process without side effects (``streamscope.events.metrics_view()``): it flushes nothing and scans no file
(the flusher's last tick did).
"""

from __future__ import annotations

import os
import time
from typing import Any

from streamscope._core import board
from streamscope.events import kinds
from streamscope.events.instruments import parse_key
from streamscope.events.registry import BUCKETS_S, METRICS, STAGES, Instrument, M, Metric, by_name
from streamscope.events.view import Histogram, MetricsView, Point
from streamscope.recording.metrics import SpanStats
from streamscope.recording.snapshots import MetricsSnapshot

__all__ = ["build", "histogram", "node_rank"]

#: Attribute tuples already built, by (base attributes, extra attributes): a read builds few new ones.
_ATTRS: dict[tuple[Any, ...], tuple[tuple[str, str], ...]] = {}


def histogram(st: SpanStats | None) -> Histogram:
    """The histogram point of a span's statistics (an empty one for None)."""
    if st is None:
        return Histogram.empty()
    return Histogram(BUCKETS_S, tuple(st.buckets), st.count, st.total_s, st.max_s)


def _loop_wait(snap: MetricsSnapshot) -> SpanStats | None:
    """The loop's waits in the loader's ``next()``: its ``stall`` spans (every wait, the one that found the end of
    an epoch included), or the gaps between its ``batch`` spans when stalls are not recorded."""
    st = snap.spans.get(kinds.STALL.key)
    if st is not None and st.count:
        return st
    return snap.spans.get("batch/data_wait")


def _batch_waits(snap: MetricsSnapshot) -> SpanStats | None:
    """The loop's wait for each batch, one value per batch handed to it (0 for a batch that was ready: one that
    came in a group with the batch before it, or was held after arriving out of order): the gaps between its
    ``batch`` spans. Its ``stall`` spans when no ``batch`` span is recorded (one value per wait in ``next()``,
    none for a ready batch)."""
    st = snap.spans.get("batch/data_wait")
    if st is not None and st.count:
        return st
    return snap.spans.get(kinds.STALL.key)


def build(snap: MetricsSnapshot, rank: int = 0, node: int = 0, time_ns: int | None = None) -> MetricsView:
    """The data points of every registry metric in ``snap`` (a merged snapshot of one rank's processes), with
    this rank's ``rank`` and ``node`` attributes and the live knobs' values now (from the knob board of the
    loader that iterated last, see :func:`streamscope._core.board.live_values`)."""
    plain = (("node", str(node)), ("rank", str(rank)))
    pts: list[Point] = []
    have: set[str] = set()

    def put(metric: Metric, value: float = 0.0, hist: Histogram | None = None, **attrs: Any) -> None:
        key = plain
        if attrs:
            ck = (plain, tuple(attrs.items()))
            key = _ATTRS.get(ck)  # type: ignore[assignment]
            if key is None:
                key = tuple(sorted({**dict(plain), **{k: str(v) for k, v in attrs.items()}}.items()))
                if len(_ATTRS) < 4096:
                    _ATTRS[ck] = key
        pts.append(Point(metric, key, float(value), hist))
        have.add(metric.name)

    wait = _loop_wait(snap)
    put(M.LOADER_WAIT, wait.total_s if wait is not None else 0.0)
    put(M.LOADER_WAIT_DURATION, hist=histogram(_batch_waits(snap)))
    for stage in STAGES:  # every stage, idle included, as the processes settled it (recording.attribution)
        put(M.LOADER_WAIT_STAGE, snap.values.get(f"{M.LOADER_WAIT_STAGE.name}|stage={stage}", 0.0), stage=stage)

    dl = snap.spans.get(kinds.DOWNLOAD.key)
    put(M.DOWNLOAD_DURATION, hist=histogram(dl))
    put(M.DOWNLOAD_BYTES, dl.bytes if dl is not None else 0)
    put(M.DOWNLOAD_ERRORS, dl.errors if dl is not None else 0)
    put(M.DOWNLOAD_RETRIES, snap.instants.get(kinds.RETRY.key, 0))
    put(M.CACHE_SIZE, snap.gauges_max.get(kinds.CACHE_BYTES.key, 0.0))
    evicted = snap.spans.get(kinds.DELETE.key)
    put(M.CACHE_EVICTIONS, evicted.count if evicted is not None else 0)
    put(M.EVENTS_DROPPED, snap.dropped)
    put(M.EXPORT_ERRORS, snap.sink_errors + snap.values.get(M.EXPORT_ERRORS.name, 0.0))  # sinks' and exporters' own

    done = set(have)
    for k, v in sorted(snap.values.items()):
        name, attrs = parse_key(k)
        if name in done:
            continue
        try:
            metric = by_name(name)
        except KeyError:
            continue
        attrs = {a: x for a, x in attrs.items() if a in metric.attributes}
        put(metric, v, None, **attrs)
    for metric in METRICS:  # a metric of the rank as a whole is there from the start, at 0
        if metric.name not in have and set(metric.attributes) <= {"rank", "node"}:
            put(metric, hist=Histogram.empty() if metric.instrument is Instrument.HISTOGRAM else None)
    for name, value in board.live_values().items():  # the knob board the workers read (config without one)
        put(M.KNOB_VALUE, value, knob=name)
    return MetricsView(tuple(pts), time.time_ns() if time_ns is None else time_ns)


def node_rank(rank: int) -> int:
    """This process's node: ``GROUP_RANK`` / ``NODE_RANK`` when set, else ``rank // LOCAL_WORLD_SIZE``."""
    for var in ("GROUP_RANK", "NODE_RANK"):
        raw = os.environ.get(var)
        if raw:
            try:
                return int(raw)
            except ValueError:
                pass
    try:
        local = int(os.environ.get("LOCAL_WORLD_SIZE") or 0)
    except ValueError:
        local = 0
    return rank // local if local > 0 else 0
