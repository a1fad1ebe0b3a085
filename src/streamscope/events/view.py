"""A typed read of the merged metrics, keyed by the registry: what exporters, dashboards and the tuner read.

:func:`build` turns a merged :class:`~streamscope.events.snapshots.MetricsSnapshot` (the main process and its
workers, the finished ones included) into data points ``(metric, attributes, value | histogram)`` of the metrics
in :mod:`.registry`. ``streamscope.events.metrics_view()`` reads it in the main process without side effects: it
flushes nothing and scans no file (the flusher's last tick did), see :meth:`Recorder.read_view`.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from streamscope._core import board
from streamscope.events.instruments import parse_key
from streamscope.events.metrics import SpanStats
from streamscope.events.registry import BUCKETS_S, METRICS, STAGES, Instrument, M, Metric, by_name
from streamscope.events.snapshots import MetricsSnapshot

__all__ = ["Histogram", "MetricsView", "Point", "build", "node_rank"]


@dataclass(frozen=True)
class Histogram:
    """A histogram point: ``counts[i]`` values at most ``bounds[i]`` (above the previous bound); the last count
    holds the values above every bound."""

    bounds: tuple[float, ...]
    counts: tuple[int, ...]
    count: int
    sum: float
    max: float

    def quantile(self, q: float) -> float:
        """Upper bound of the bucket where a fraction ``q`` of the values is reached (the max past the bounds)."""
        if not self.count:
            return 0.0
        seen = 0
        for i, c in enumerate(self.counts):
            seen += c
            if seen >= q * self.count:
                return self.bounds[i] if i < len(self.bounds) else self.max
        return self.max

    @staticmethod
    def of(st: SpanStats | None) -> Histogram:
        if st is None:
            return Histogram(BUCKETS_S, (0,) * (len(BUCKETS_S) + 1), 0, 0.0, 0.0)
        return Histogram(BUCKETS_S, tuple(st.buckets), st.count, st.total_s, st.max_s)


class Point(NamedTuple):
    """One data point: a metric, its attributes (sorted name/value pairs), and a value or a histogram."""

    metric: Metric
    attributes: tuple[tuple[str, str], ...]
    value: float = 0.0
    histogram: Histogram | None = None

    @property
    def attrs(self) -> dict[str, str]:
        return dict(self.attributes)


#: Attribute tuples already built, by (base attributes, extra attributes): a read builds few new ones.
_ATTRS: dict[tuple[Any, ...], tuple[tuple[str, str], ...]] = {}


@dataclass(frozen=True)
class MetricsView:
    """Data points of every registry metric at one moment (``time_ns``, Unix epoch), see :func:`build`."""

    points: tuple[Point, ...]
    time_ns: int = 0
    _index: dict[str, list[Point]] = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        for p in self.points:
            self._index.setdefault(p.metric.name, []).append(p)

    def of(self, metric: Metric) -> list[Point]:
        """The points of ``metric`` (each attribute set once)."""
        return list(self._index.get(metric.name, ()))

    def _match(self, metric: Metric, attrs: dict[str, Any]) -> list[Point]:
        want = {k: str(v) for k, v in attrs.items()}
        return [p for p in self._index.get(metric.name, ()) if all(p.attrs.get(k) == v for k, v in want.items())]

    def value(self, metric: Metric, **attrs: Any) -> float:
        """The sum of ``metric``'s values over the points whose attributes include ``attrs`` (0 when none)."""
        if metric.instrument is Instrument.HISTOGRAM:
            raise TypeError(f"{metric.name} is a histogram: use histogram()")
        return float(sum(p.value for p in self._match(metric, attrs)))

    def histogram(self, metric: Metric, **attrs: Any) -> Histogram:
        """``metric``'s histogram over the points whose attributes include ``attrs`` (merged)."""
        if metric.instrument is not Instrument.HISTOGRAM:
            raise TypeError(f"{metric.name} is not a histogram")
        hs = [p.histogram for p in self._match(metric, attrs) if p.histogram is not None]
        if not hs:
            return Histogram.of(None)
        counts = [sum(c) for c in zip(*(h.counts for h in hs))]
        return Histogram(
            hs[0].bounds, tuple(counts), sum(h.count for h in hs), sum(h.sum for h in hs), max(h.max for h in hs)
        )


def _loop_wait(snap: MetricsSnapshot) -> SpanStats | None:
    """The loop's waits in the loader's ``next()``: its ``stall`` spans (every wait, the one that found the end of
    an epoch included), or the gaps between its ``batch`` spans when stalls are not recorded."""
    st = snap.spans.get("stall/stall")
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
    return snap.spans.get("stall/stall")


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
    put(M.LOADER_WAIT_DURATION, hist=Histogram.of(_batch_waits(snap)))
    for stage in STAGES:  # every stage, idle included, as the processes settled it (events.attribution)
        put(M.LOADER_WAIT_STAGE, snap.values.get(f"{M.LOADER_WAIT_STAGE.name}|stage={stage}", 0.0), stage=stage)

    dl = snap.spans.get("download/download")
    put(M.DOWNLOAD_DURATION, hist=Histogram.of(dl))
    put(M.DOWNLOAD_BYTES, dl.bytes if dl is not None else 0)
    put(M.DOWNLOAD_ERRORS, dl.errors if dl is not None else 0)
    put(M.DOWNLOAD_RETRIES, snap.instants.get("download/retry", 0))
    put(M.CACHE_SIZE, snap.gauges_max.get("cache/cache_bytes", 0.0))
    evicted = snap.spans.get("delete/delete")
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
            put(metric, hist=Histogram.of(None) if metric.instrument is Instrument.HISTOGRAM else None)
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
