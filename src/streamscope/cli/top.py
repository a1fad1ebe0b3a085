"""``streamscope top``: a live terminal view of a running job, read from its ranks' Prometheus endpoints.

``python -m streamscope top --url http://127.0.0.1:9464/metrics [--url ...] [--interval 1]`` scrapes each URL
(one per rank's main process, see ``STREAMSCOPE_PROMETHEUS_PORT``) every ``interval`` seconds and shows, per
rank, what the loop waited for and why, and what the loader delivers:

* ``wait``: the share of wall time the training loop waited for data, and per batch (the wait histogram: one
  value per batch); ``split``: that wait split by what the workers were doing meanwhile (download, decompress,
  read, decode, idle), each stage's share of the stages' total over the same interval, so the shares sum to
  100% (``no wait`` when the interval had none);
* ``flow``: samples/s, MB/s and batches/s handed to the loop; workers alive, results queued, chunks prefetched;
* ``download``: chunks in flight, MB/s, latency p50/p99 over the interval, retries, errors; ``cache``: bytes, hit
  ratio, evictions;
* ``knobs``: the live knobs' values; a change between two scrapes is listed under "recent tuner decisions";
* ``model``: the capacity model's view (``tune/gauges.py``, served whenever metrics are on): ``x1.42 if no wait``,
  the speed-up the loop would get if it never waited ((step + wait) / step); the storage's requests in flight
  over its saturation point (``12/16 in flight``: beyond 16 the latency only rises), W0 (the unloaded latency)
  and the latency now, MB/s delivered, ``SATURATED`` while the model finds the store saturated; ``no downloads``
  when the window read nothing from storage. With several ranks the header names the slowest rank's speed-up
  (in synchronous training the job goes at its pace). Side by side they say whose the wait is: in flight below
  the saturation point with the latency near W0, the loader's; at it with the latency above W0, the storage's.

Every rate is a difference between the same two scrapes of the endpoint (the last two), over the time between
their answers, so the first screen shows totals only. The screen fits the terminal's width (80 columns and up):
long lines (the knobs, many datasets) wrap. An endpoint that does not answer shows why (refused, timed out, not
a metrics page) in its place and is tried again at every refresh; ``q`` quits (exit 0). Without a terminal (or
with ``--once``) it prints one screen after two scrapes and exits (1 when no endpoint answered). Metric names
come from the registry (``registry.prometheus_name``), parsed from the text exposition format with no dependency.
"""

from __future__ import annotations

import re
import shutil
import socket
import sys
import textwrap
import time
import urllib.error
import urllib.parse
import urllib.request
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from streamscope.events.registry import STAGES, M, Metric, prometheus_name
from streamscope.storage.redact import redact

__all__ = [
    "WIDTH",
    "RankView",
    "Scrape",
    "Series",
    "Top",
    "fetch",
    "model_items",
    "normalize_url",
    "parse_exposition",
    "rank_lines",
    "rank_view",
    "ranks_of",
    "run_top",
]


Series = list[tuple[dict[str, str], float]]

_LINE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+\S+)?\s*$")
_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*,?')
_UNESCAPE = {"\\\\": "\\", '\\"': '"', "\\n": "\n"}


def parse_exposition(text: str) -> dict[str, Series]:
    """The samples of a Prometheus text exposition (format 0.0.4): ``{name: [(labels, value), ...]}``.

    Comments and lines that do not parse are skipped.
    """
    out: dict[str, Series] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = _LINE.match(line)
        if m is None:
            continue
        name, raw_labels, raw_value = m.groups()
        try:
            value = float(raw_value)
        except ValueError:
            continue
        labels: dict[str, str] = {}
        if raw_labels:
            for lm in _LABEL.finditer(raw_labels):
                labels[lm.group(1)] = re.sub(r"\\[\\\"n]", lambda e: _UNESCAPE[e.group(0)], lm.group(2))
        out.setdefault(name, []).append((labels, value))
    return out


@dataclass
class Scrape:
    """One read of one endpoint: its samples, or why there are none."""

    url: str
    time: float
    series: dict[str, Series] = field(default_factory=dict)
    error: str | None = None


def normalize_url(url: str) -> str:
    """``host:port`` and ``http://host:port`` gain ``/metrics``; anything but http(s) is refused.

    Raises:
        ValueError: naming the URL.
    """
    u = url.strip()
    if "://" not in u:
        u = f"http://{u}"
    try:
        parts = urllib.parse.urlsplit(u)
        port = parts.port
    except ValueError:
        port, parts = -1, None
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname or port == -1:
        raise ValueError(f"not an http(s) URL of a metrics endpoint: {url!r}")
    if parts.netloc.endswith(":"):
        raise ValueError(f"no port after the ':' in {url!r}")
    if not parts.path:
        u += "/metrics"
    return u


def _why(exc: BaseException) -> str:
    """A short reason an endpoint did not answer, for the screen."""
    if isinstance(exc, urllib.error.HTTPError):
        return f"HTTP {exc.code} {exc.reason}"
    reason: Any = exc.reason if isinstance(exc, urllib.error.URLError) else exc
    if isinstance(reason, ConnectionRefusedError):
        return "connection refused (nothing listens there: is the job running, with STREAMSCOPE_PROMETHEUS_PORT?)"
    if isinstance(reason, (TimeoutError, socket.timeout)):
        return "timed out"
    if isinstance(reason, socket.gaierror):
        return f"unknown host ({reason.strerror})"
    if isinstance(reason, OSError) and reason.strerror:
        return reason.strerror
    return str(reason) or type(reason).__name__


def fetch(url: str, timeout: float) -> Scrape:
    """Scrape ``url``; never raises (the reason goes into :attr:`Scrape.error`).

    The scrape's time is when the answer began to arrive: the endpoint reads its numbers before it answers, and
    a job busy on a small machine can take long to answer, so the time the request was sent could be far from
    the moment the numbers describe (rates over a wrong interval: a wait above 100% of the time)."""
    now = time.monotonic()
    try:
        req = urllib.request.Request(url, headers={"Accept": "text/plain;version=0.0.4"})
        with urllib.request.urlopen(req, timeout=timeout) as r:
            now = time.monotonic()
            body = r.read(32 << 20).decode("utf-8", "replace")
    except Exception as exc:  # every failure is something to show, never a traceback
        return Scrape(url, now, error=_why(exc))
    series = parse_exposition(body)
    if not any(n.startswith("streamscope_") for n in series):
        return Scrape(url, now, error="answers, but serves no streamscope metrics (a different endpoint?)")
    return Scrape(url, now, series)


# -- one rank's numbers ----------------------------------------------------------------------------------------


def _name(metric: Metric) -> str:
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
        {labels["dataset"] for labels, _ in cur.series.get(_name(M.LOADER_SAMPLES), ()) if labels.get("dataset")}
    )
    v = RankView(cur.url, rank, datasets)
    g = lambda metric, **kw: _total(cur, _name(metric), rank, **kw)  # noqa: E731
    v.samples = g(M.LOADER_SAMPLES) or 0.0
    v.workers, v.queue = g(M.LOADER_WORKERS), g(M.LOADER_QUEUE_DEPTH)
    v.prefetch, v.in_flight = g(M.PREFETCH_DEPTH), g(M.DOWNLOAD_IN_FLIGHT)
    v.cache_bytes, v.evictions = g(M.CACHE_SIZE), g(M.CACHE_EVICTIONS)
    v.retries, v.errors = g(M.DOWNLOAD_RETRIES), g(M.DOWNLOAD_ERRORS)
    for labels, value in cur.series.get(_name(M.KNOB_VALUE), ()):
        if labels.get("rank", "0") == rank and "knob" in labels:
            v.knobs[labels["knob"]] = value
    mx = lambda metric: _max(cur, _name(metric), rank)  # noqa: E731
    v.speedup, v.st_in_flight, v.st_saturation = mx(M.MODEL_SPEEDUP), mx(M.STORAGE_IN_FLIGHT), mx(M.STORAGE_SATURATION)
    v.st_w0, v.st_latency = mx(M.STORAGE_UNLOADED_LATENCY), mx(M.STORAGE_LATENCY)
    v.st_delivered, v.st_saturated = mx(M.STORAGE_DELIVERED), mx(M.STORAGE_SATURATED)
    hist = _name(M.DOWNLOAD_DURATION)
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
        a, b = _total(prev, _name(metric), rank, **kw), _total(cur, _name(metric), rank, **kw)
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
    wh = _name(M.LOADER_WAIT_DURATION)
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


def _rounded(pct: dict[str, float]) -> dict[str, int]:
    """Whole percents that sum to exactly 100 (largest remainders), for percents that sum to 100."""
    out = {k: int(x) for k, x in pct.items()}
    rest = sorted(pct, key=lambda k: (out[k] - pct[k], list(pct).index(k)))  # largest remainder first
    for k in rest[: max(0, 100 - sum(out.values()))]:
        out[k] += 1
    return out


# -- the screen ------------------------------------------------------------------------------------------------

#: The width the screen is laid out for when the terminal's is not known, and the least it is laid out for.
WIDTH = 80
_INDENT = " " * 12  # where a section's text begins ("  download  ")


def _fit(label: str | None, items: Sequence[str], width: int) -> list[str]:
    """``items`` two spaces apart after a section's ``label`` (padded to the indent; None: from the first column),
    wrapped at ``width`` with continuation lines at the indent. An item longer than a line is cut (with ``…``)."""
    room = width - len(_INDENT)
    lines: list[str] = []
    cur, empty = ("" if label is None else f"  {label:<10}"), True
    for item in items:
        if len(item) > room:
            item = item[: room - 1] + "…"
        if empty:
            cur, empty = cur + item, False
        elif len(cur) + 2 + len(item) <= width:
            cur += "  " + item
        else:
            lines.append(cur)
            cur = _INDENT + item
    lines.append(cur)
    return lines


def _num(x: float | None, fmt: str = "{:,.1f}", none: str = "…") -> str:
    return none if x is None else fmt.format(x)


def _secs(x: float | None) -> str:
    if x is None:
        return "…"
    if x == float("inf"):
        return ">60 s"
    return f"{x * 1000:.3g} ms" if x < 1 else f"{x:.3g} s"


def _bytes(x: float | None) -> str:
    if x is None:
        return "…"
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(x) < 1000 or unit == "TB":
            return f"{x:.0f} {unit}" if unit == "B" else f"{x:.1f} {unit}"
        x /= 1000.0
    return f"{x:.1f} TB"


def _count(x: float) -> str:
    return f"{x:.1f}" if x < 10 else f"{x:.0f}"


def _speedup(x: float) -> str:
    return f"x{x:.2f}" if x < 10 else f"x{x:.1f}" if x < 100 else f"x{x:,.0f}"


def model_items(v: RankView) -> list[str]:
    """The ``model`` line's items: the speed-up if the loop never waited, then the storage's side."""
    if v.speedup is None:
        return ["…"]
    out = [f"{_speedup(v.speedup)} if no wait"]
    if not v.st_delivered and not v.st_in_flight:
        return [*out, "no downloads"]
    ms = lambda x: "-" if not x else f"{x * 1000:.3g}"  # noqa: E731
    out += [
        f"{_count(v.st_in_flight or 0.0)}/{_count(v.st_saturation or 0.0)} in flight",
        f"W0 {ms(v.st_w0)} now {ms(v.st_latency)} ms",
        f"{(v.st_delivered or 0.0) / 1e6:.2f} MB/s",
    ]
    return out + (["SATURATED"] if v.st_saturated else [])


def rank_lines(v: RankView, width: int = WIDTH) -> list[str]:
    """One rank's part of the screen, no line longer than ``width`` (laid out for at least 40 columns)."""
    width = max(40, width)
    where = redact(v.url).removeprefix("http://").removesuffix("/metrics")
    names = [f"{d}," for d in v.datasets[:-1]] + v.datasets[-1:]  # each its own item: a long list wraps
    head = [f"rank {v.rank}", where] + ([f"datasets: {names[0]}", *names[1:]] if names else [])
    if v.split is None:
        split = ["…"]
    elif not v.split:
        split = ["no wait (not reported by the workers yet)" if (v.wait_s or 0.0) > 0 else "no wait"]
    else:
        split = [f"{st} {pct}%" for st, pct in _rounded(v.split).items()]
    knobs = [f"{k}={x:g}" for k, x in sorted(v.knobs.items())] or ["-"]
    ms = "-" if v.ms_per_batch is None and v.batches_s == 0 else _num(v.ms_per_batch, "{:.1f}")
    p50 = _secs(v.dl_p50) if v.dl_p50 is not None else "-"
    p99 = _secs(v.dl_p99) if v.dl_p99 is not None else "-"
    return [
        *_fit(None, head, width),
        *_fit("wait", [f"{_num(v.wait_pct, '{:.1f}%')} of the time", f"{ms} ms/batch"], width),
        *_fit("split", split, width),
        *_fit(
            "flow",
            [
                f"{_num(v.samples_s)} samples/s",
                f"{_num(v.mb_s, '{:.2f}')} MB/s",
                f"{_num(v.batches_s)} batches/s",
                f"workers {_num(v.workers, '{:g}', '-')}",
                f"queue {_num(v.queue, '{:g}', '-')}",
                f"prefetched {_num(v.prefetch, '{:g}', '-')}",
                f"samples {v.samples:,.0f}",
            ],
            width,
        ),
        *_fit(
            "download",
            [
                f"{_num(v.in_flight, '{:g}', '0')} in flight",
                f"{_num(v.dl_mb_s, '{:.2f}')} MB/s",
                f"p50 {p50}",
                f"p99 {p99}",
                f"retries {_num(v.retries, '{:g}', '0')}",
                f"errors {_num(v.errors, '{:g}', '0')}",
            ],
            width,
        ),
        *_fit(
            "cache",
            [
                _bytes(v.cache_bytes) if v.cache_bytes is not None else "-",
                f"hit {_num(v.hit_pct, '{:.0f}%', '-')}",
                f"evicted {_num(v.evictions, '{:g}', '0')}",
            ],
            width,
        ),
        *_fit("knobs", knobs, width),
        *_fit("model", model_items(v), width),
    ]


class Top:
    """The state of the view: the last scrape of each URL and the knob changes seen."""

    def __init__(self, urls: Sequence[str], interval: float, fetcher: Callable[[str, float], Scrape] = fetch) -> None:
        self.urls = list(urls)
        self.interval = interval
        self.fetcher = fetcher
        self.last: dict[str, Scrape] = {}
        self.prev: dict[str, Scrape] = {}
        self.decisions: deque[str] = deque(maxlen=50)
        self._pool = ThreadPoolExecutor(max_workers=min(16, max(1, len(self.urls))))

    def refresh(self) -> None:
        """Scrape every URL (in parallel: one that hangs does not stall the others beyond the timeout)."""
        timeout = max(0.5, min(5.0, self.interval))
        scrapes = list(self._pool.map(lambda u: self.fetcher(u, timeout), self.urls))
        for s in scrapes:
            old = self.last.get(s.url)
            if s.error is None and old is not None and old.error is None:
                self._note_knob_changes(old, s)
            if old is not None:
                self.prev[s.url] = old
            self.last[s.url] = s

    def _note_knob_changes(self, old: Scrape, new: Scrape) -> None:
        name = _name(M.KNOB_VALUE)
        before = {(lb.get("rank", "0"), lb.get("knob", "")): v for lb, v in old.series.get(name, ())}
        stamp = time.strftime("%H:%M:%S")
        for lb, v in new.series.get(name, ()):
            key = (lb.get("rank", "0"), lb.get("knob", ""))
            if key in before and before[key] != v:
                self.decisions.appendleft(f"{stamp}  rank {key[0]}  {key[1]}: {before[key]:g} -> {v:g}")

    def lines(self, width: int = WIDTH) -> list[str]:
        """The screen, no line longer than ``width`` (laid out for at least 40 columns)."""
        width = max(40, width)
        n = len(self.urls)
        head = (
            f"streamscope top   {n} endpoint{'s' if n != 1 else ''}, every {self.interval:g} s   q quits"
            f"   {time.strftime('%H:%M:%S')}"
        )

        def wrap(text: str) -> list[str]:
            return textwrap.wrap(text, width, subsequent_indent=_INDENT, break_on_hyphens=False) or [""]

        body: list[str] = []
        slowest: tuple[float, str] | None = None
        ranks = 0
        for url in self.urls:
            s = self.last.get(url)
            if s is None:
                body += [*wrap(f"{redact(url)}: connecting…"), ""]
                continue
            if s.error is not None:
                body += [*wrap(f"{redact(url)}: unreachable: {s.error}"), ""]
                continue
            prev = self.prev.get(url)
            for rank in ranks_of(s):
                v = rank_view(s, prev, rank)
                ranks += 1
                if v.speedup is not None and (slowest is None or v.speedup > slowest[0]):
                    slowest = (v.speedup, rank)
                body += rank_lines(v, width) + [""]
        out = wrap(head)
        if ranks > 1 and slowest is not None:  # in synchronous training the job goes at the slowest rank's pace
            out += wrap(f"slowest rank {slowest[1]}: {_speedup(slowest[0])} if its loop never waited")
        out += ["", *body]
        out.append("recent tuner decisions (knob changes):")
        out += [ln for d in self.decisions for ln in wrap(f"  {d}")] or ["  none yet"]
        return out

    def close(self) -> None:
        self._pool.shutdown(wait=False)


def _curses_loop(top: Top) -> int:
    import curses

    def loop(scr: Any) -> int:
        try:
            curses.curs_set(0)
        except curses.error:  # a terminal without cursor control
            pass
        scr.timeout(100)
        next_at = 0.0
        while True:
            now = time.monotonic()
            if now >= next_at:
                top.refresh()
                next_at = now + top.interval
                height, width = scr.getmaxyx()
                scr.erase()
                # laid out for one column less than the window: curses cannot write its last cell
                for y, line in enumerate(top.lines(width - 1)[: max(0, height)]):
                    try:
                        scr.addnstr(y, 0, line, max(0, width - 1))
                    except curses.error:  # the last cell of a small window
                        pass
                scr.refresh()
            key = scr.getch()
            if key in (ord("q"), ord("Q")):
                return 0
            if key == curses.KEY_RESIZE:
                next_at = 0.0

    return int(curses.wrapper(loop))


def run_top(urls: Sequence[str], interval: float = 1.0, once: bool = False) -> int:
    """Show the view until ``q`` (or print one screen when ``once`` or without a terminal); the exit status."""
    try:
        urls = [normalize_url(u) for u in urls]
    except ValueError as exc:
        print(f"streamscope top: {exc}", file=sys.stderr)
        return 2
    if not urls:
        print("streamscope top: give at least one --url (a rank's metrics endpoint)", file=sys.stderr)
        return 2
    if not interval > 0:
        print(f"streamscope top: --interval must be > 0 seconds, got {interval:g}", file=sys.stderr)
        return 2
    top = Top(urls, interval)
    try:
        if once or not (sys.stdout.isatty() and sys.stdin.isatty()):
            top.refresh()
            time.sleep(min(interval, 2.0))
            top.refresh()
            print("\n".join(top.lines(shutil.get_terminal_size((WIDTH, 24)).columns)))
            return 0 if any(s.error is None for s in top.last.values()) else 1
        return _curses_loop(top)
    except KeyboardInterrupt:
        return 0
    finally:
        top.close()
