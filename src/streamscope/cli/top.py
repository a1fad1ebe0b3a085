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

This module holds the view's state (:class:`Top`: the scrapes, the knob changes, the whole screen), the terminal
loop and :func:`run_top`; reading an endpoint is :mod:`~streamscope.cli.top_scrape`, one rank's numbers
:mod:`~streamscope.cli.top_rates`, their lines :mod:`~streamscope.cli.top_screen` (re-exported here).
"""

from __future__ import annotations

import shutil
import sys
import textwrap
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from streamscope.cli.top_rates import RankView, rank_view, ranks_of
from streamscope.cli.top_rates import metric_name as _name
from streamscope.cli.top_scrape import Scrape, Series, fetch, normalize_url, parse_exposition
from streamscope.cli.top_screen import INDENT, WIDTH, model_items, rank_lines, speedup_text
from streamscope.events.registry import M
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
            return textwrap.wrap(text, width, subsequent_indent=INDENT, break_on_hyphens=False) or [""]

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
            out += wrap(f"slowest rank {slowest[1]}: {speedup_text(slowest[0])} if its loop never waited")
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
