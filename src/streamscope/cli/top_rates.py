"""``streamscope top``'s numbers of one rank: totals and gauges from its last scrape, rates between the last two.

:func:`rank_view` turns two scrapes of an endpoint into a :class:`RankView` (the wait and its split by stage, the
flow, downloads, the cache, the knobs, the capacity model's gauges); every rate is a difference between the same
two scrapes over the time between their answers (see the comment in :func:`rank_view` for why the wait's share
is a ratio within one source).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from streamscope.cli.top_scrape import Scrape
from streamscope.events.registry import STAGES, M, Metric, prometheus_name

__all__ = ["RankView", "metric_name", "rank_view", "ranks_of"]


def metric_name(metric: Metric) -> str:
    """The exposition's name of a registry metric."""
    return prometheus_name(metric)


def _total(s: Scrape, name: str, rank: str, **match: str) -> float | None:
    vals = [
        v
        for labels, v in s.series.get(name, ())
        if labels.get("rank", "0") == rank and all(labels.get(k) == x for k, x in match.items())
    ]
    return sum(vals) if vals else None


def _max(s: Scrape, name: str, rank: str) -> float | None:
    vals = [v for labels, v in s.series.get(name, ()) if labels.get("rank", "0") == rank]
    return max(vals) if vals else None


def _quantile(buckets: list[tuple[float, float]], q: float) -> float | None:
    """The upper bound where a fraction ``q`` of the counts is reached (cumulative ``(le, count)`` pairs)."""
    if not buckets or buckets[-1][1] <= 0:
        return None
    for le, c in buckets:
        if c >= q * buckets[-1][1]:
            return le
    return buckets[-1][0]


def _buckets(s: Scrape, name: str, rank: str) -> dict[float, float]:
    out: dict[float, float] = {}
    for labels, v in s.series.get(f"{name}_bucket", ()):
        if labels.get("rank", "0") == rank and "le" in labels:
            le = float(labels["le"])
            out[le] = out.get(le, 0.0) + v
    return out


@dataclass
class RankView:
    """What the screen shows for one rank (None: not known yet, e.g. a rate before the second scrape)."""

    url: str
    rank: str
    datasets: list[str]
    wait_pct: float | None = None
    ms_per_batch: float | None = None
    #: stage -> percent of the stages' total over the interval (summing to 100); {} when the interval had no
    #: wait settled; None before two scrapes
    split: dict[str, float] | None = None
    #: the loop's wait over the interval (seconds) as its wait counter says: the stages may not have reported it yet
    wait_s: float | None = None
    samples_s: float | None = None
    mb_s: float | None = None
    batches_s: float | None = None
    samples: float = 0.0
    workers: float | None = None
    queue: float | None = None
    prefetch: float | None = None
    in_flight: float | None = None
    dl_mb_s: float | None = None
    dl_p50: float | None = None
    dl_p99: float | None = None
    retries: float | None = None
    errors: float | None = None
    cache_bytes: float | None = None
    hit_pct: float | None = None
    evictions: float | None = None
    knobs: dict[str, float] = field(default_factory=dict)
    #: the capacity model's gauges (the max over the rank's loaders; None: not served yet)
    speedup: float | None = None
    st_in_flight: float | None = None
    st_saturation: float | None = None
    st_w0: float | None = None
    st_latency: float | None = None
    st_delivered: float | None = None
    st_saturated: float | None = None


def ranks_of(s: Scrape) -> list[str]:
    seen = {labels.get("rank", "0") for series in s.series.values() for labels, _ in series}
    return sorted(seen, key=lambda r: (len(r), r))


def rank_view(cur: Scrape, prev: Scrape | None, rank: str) -> RankView:
    """One rank's numbers from two scrapes of its endpoint (rates over the interval; totals and gauges now)."""
    datasets = sorted(
        {labels["dataset"] for labels, _ in cur.series.get(metric_name(M.LOADER_SAMPLES), ()) if labels.get("dataset")}
    )
    v = RankView(cur.url, rank, datasets)

    def g(metric: Metric, **kw: str) -> float | None:
        return _total(cur, metric_name(metric), rank, **kw)

    v.samples = g(M.LOADER_SAMPLES) or 0.0
    v.workers, v.queue = g(M.LOADER_WORKERS), g(M.LOADER_QUEUE_DEPTH)
    v.prefetch, v.in_flight = g(M.PREFETCH_DEPTH), g(M.DOWNLOAD_IN_FLIGHT)
    v.cache_bytes, v.evictions = g(M.CACHE_SIZE), g(M.CACHE_EVICTIONS)
    v.retries, v.errors = g(M.DOWNLOAD_RETRIES), g(M.DOWNLOAD_ERRORS)
    for labels, value in cur.series.get(metric_name(M.KNOB_VALUE), ()):
        if labels.get("rank", "0") == rank and "knob" in labels:
            v.knobs[labels["knob"]] = value

    def mx(metric: Metric) -> float | None:
        return _max(cur, metric_name(metric), rank)

    v.speedup, v.st_in_flight, v.st_saturation = mx(M.MODEL_SPEEDUP), mx(M.STORAGE_IN_FLIGHT), mx(M.STORAGE_SATURATION)
    v.st_w0, v.st_latency = mx(M.STORAGE_UNLOADED_LATENCY), mx(M.STORAGE_LATENCY)
    v.st_delivered, v.st_saturated = mx(M.STORAGE_DELIVERED), mx(M.STORAGE_SATURATED)
    hist = metric_name(M.DOWNLOAD_DURATION)
    now_b = _buckets(cur, hist, rank)
    if prev is None or prev.error is not None or cur.time <= prev.time:
        cum = sorted(now_b.items())
        v.dl_p50, v.dl_p99 = _quantile(cum, 0.5), _quantile(cum, 0.99)
        hits, misses = g(M.CACHE_HITS), g(M.CACHE_MISSES)
        if hits is not None and misses is not None and hits + misses > 0:
            v.hit_pct = 100.0 * hits / (hits + misses)
        return v
    dt = cur.time - prev.time

    def delta(metric: Metric, **kw: str) -> float | None:
        a, b = _total(prev, metric_name(metric), rank, **kw), _total(cur, metric_name(metric), rank, **kw)
        if a is None or b is None or b < a:  # not there yet, or the job restarted
            return None
        return b - a

    # Every rate below is a difference between these same two scrapes, over the same dt. But the endpoint reads
    # two kinds of numbers: the loader's batches, samples and bytes as they are at the scrape, and what comes
    # from events (the wait counter and histogram, the stages, downloads) as of the job's last metrics tick
    # (``metrics_interval``, 1 s). Over one refresh the latter cover whichever ticks fell in it (none, one, two):
    # their difference over dt swings from 0 to 200% of the time. So the wait's share of the time is the wait
    # per batch (the histogram's sum over its count: one value per batch, both from the same ticks) times the
    # batches per second of the scrapes; and the split divides each stage by the stages' total over the
    # interval (the workers settle them a tick or more after the wait): both are ratios within one source.
    wait, batches = delta(M.LOADER_WAIT), delta(M.LOADER_BATCHES)
    v.wait_s = wait
    wh = metric_name(M.LOADER_WAIT_DURATION)
    w_sum, w_count = _hist_delta(prev, cur, f"{wh}_sum", rank), _hist_delta(prev, cur, f"{wh}_count", rank)
    if w_sum is not None and w_count:
        v.ms_per_batch = 1000.0 * w_sum / w_count
        if batches is not None:
            v.wait_pct = 100.0 * (w_sum / w_count) * batches / dt
    elif batches == 0 and wait is not None:  # no batch in the interval: what the loop waited in it, if any
        v.wait_pct = 100.0 * wait / dt
    elif w_sum is None and wait is not None:  # an endpoint without the histogram
        v.wait_pct = 100.0 * wait / dt
        if batches:
            v.ms_per_batch = 1000.0 * wait / batches
    shares = {st: delta(M.LOADER_WAIT_STAGE, stage=st) for st in STAGES}
    if all(x is not None for x in shares.values()):
        v.split = _percentages({st: x or 0.0 for st, x in shares.items()})
    samples, nbytes, dl = delta(M.LOADER_SAMPLES), delta(M.LOADER_BYTES), delta(M.DOWNLOAD_BYTES)
    v.samples_s = None if samples is None else samples / dt
    v.batches_s = None if batches is None else batches / dt
    v.mb_s = None if nbytes is None else nbytes / dt / 1e6
    v.dl_mb_s = None if dl is None else dl / dt / 1e6
    hits, misses = delta(M.CACHE_HITS), delta(M.CACHE_MISSES)
    if hits is not None and misses is not None and hits + misses > 0:
        v.hit_pct = 100.0 * hits / (hits + misses)
    before = _buckets(prev, hist, rank)
    if now_b and before.keys() == now_b.keys():
        d = sorted((le, now_b[le] - before[le]) for le in now_b)
        if d and d[-1][1] > 0:
            v.dl_p50, v.dl_p99 = _quantile(d, 0.5), _quantile(d, 0.99)
    return v


def _hist_delta(prev: Scrape, cur: Scrape, name: str, rank: str) -> float | None:
    a, b = _total(prev, name, rank), _total(cur, name, rank)
    return None if a is None or b is None or b < a else b - a


def _percentages(parts: dict[str, float]) -> dict[str, float]:
    """Each part's percent of their sum ({} when the sum is 0)."""
    total = sum(parts.values())
    if total <= 0:
        return {}
    return {k: 100.0 * x / total for k, x in parts.items()}
