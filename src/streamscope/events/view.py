"""A typed read of the merged metrics, keyed by the registry: what exporters, dashboards and the tuner read.

A :class:`MetricsView` holds data points ``(metric, attributes, value | histogram)`` of the metrics in
:mod:`.registry`. ``streamscope.events.metrics_view()`` returns one, read without side effects; the runtime builds
it from the merged snapshots of a rank's processes (:func:`streamscope.recording.views.build`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple

from streamscope.events.registry import BUCKETS_S, Instrument, Metric

__all__ = ["Histogram", "MetricsView", "Point"]


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
    def empty() -> Histogram:
        """No value yet, over the registry's bounds."""
        return Histogram(BUCKETS_S, (0,) * (len(BUCKETS_S) + 1), 0, 0.0, 0.0)


class Point(NamedTuple):
    """One data point: a metric, its attributes (sorted name/value pairs), and a value or a histogram."""

    metric: Metric
    attributes: tuple[tuple[str, str], ...]
    value: float = 0.0
    histogram: Histogram | None = None

    @property
    def attrs(self) -> dict[str, str]:
        return dict(self.attributes)


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
            return Histogram.empty()
        counts = [sum(c) for c in zip(*(h.counts for h in hs))]
        return Histogram(
            hs[0].bounds, tuple(counts), sum(h.count for h in hs), sum(h.sum for h in hs), max(h.max for h in hs)
        )
