"""``streamscope top``'s reading of an endpoint: one scrape of a rank's Prometheus page and its samples.

:func:`fetch` reads a URL (never raising: why it did not answer goes into :attr:`Scrape.error`, for the screen),
:func:`parse_exposition` parses the text exposition format (0.0.4) with no dependency, :func:`normalize_url` turns
what a user types after ``--url`` into the URL of a metrics page.
"""

from __future__ import annotations

import re
import socket
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Scrape", "Series", "fetch", "normalize_url", "parse_exposition"]

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
