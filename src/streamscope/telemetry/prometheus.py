"""The Prometheus endpoint of a rank's main process: the metric registry, translated, served over HTTP.

``start_endpoint(port)`` (or ``STREAMSCOPE_PROMETHEUS_PORT`` alone: :func:`start_from_env` at the first dataset or
loader a rank's main process builds, or ``streamscope.enable_telemetry()``) serves
``/metrics`` with ``prometheus_client``'s HTTP server on a daemon thread. Every scrape reads
``streamscope.events.metrics_view()`` once: the run's merged metrics as of the flusher's last tick (this process
and its DataLoader workers, the finished ones included). Nothing is flushed and no file is read per scrape, and
the workers write no Prometheus files: ``prometheus_client``'s multiprocess mode keeps a file per pid, and
DataLoader workers forked anew every epoch pile them up until a scrape takes seconds.

Names follow OpenTelemetry's Prometheus translation (``registry.prometheus_name``): ``streamscope.loader.wait``
(a counter in ``s``) is ``streamscope_loader_wait_seconds_total``; a histogram gives ``_bucket`` (cumulative,
``le`` the registry's bounds and ``+Inf``), ``_sum`` and ``_count``; attributes become labels. The live knobs'
values are ``streamscope_knob_value{knob=...}``.

Where it runs: a rank's main process only. In a DataLoader worker (forked or spawned), an optimize worker or any
other daemonic helper process :func:`start_endpoint` does nothing and returns None, so an inherited environment
variable cannot open a port per worker; a forked child closes its copy of the listening socket at once. With
DDP, local rank r (``LOCAL_RANK``) listens on ``port + r``; port 0 takes a free port per rank. Each start is said
on stderr (``streamscope: Prometheus metrics of rank R at http://ADDR:PORT/metrics``); :func:`endpoint_port` and
:func:`endpoint_url` give it too. A port in use is an error naming it (:class:`PrometheusPortError`): the
Prometheus scrape config names that port, so moving to another one would only hide the mistake. Switched on by the
variable, a failure to start (port in use, malformed value) is that message as one warning line on stderr instead:
a variable set for a whole job must not stop a rank's training.

Serving switches metrics on (the ``chunk`` level's categories, metrics only: no trace log) when they are off.
"""

from __future__ import annotations

import errno
import multiprocessing
import os
import sys
import threading
from collections.abc import Iterable, Iterator
from typing import Any

from streamscope import events as ev
from streamscope._core import config
from streamscope._core.errors import ConfigError, PrometheusPortError, StreamscopeError
from streamscope._core.optional import require
from streamscope.events.registry import (
    METRICS,
    PROMETHEUS_TYPES,
    Metric,
    prometheus_label,
    prometheus_name,
    prometheus_unit,
)
from streamscope.events.view import MetricsView
from streamscope.storage.redact import redact

__all__ = [
    "MAX_SERIES_PER_METRIC",
    "RegistryCollector",
    "doc_with_names",
    "endpoint_port",
    "endpoint_url",
    "families",
    "is_rank_main_process",
    "markdown_names",
    "start_endpoint",
    "start_from_env",
    "stop_endpoint",
]

#: At most this many series (attribute sets) of one metric per scrape. The registry's attributes are bounded
#: (rank, node, worker, dataset, stage, knob) so a run stays far below it; the cap keeps a bug from flooding
#: Prometheus with series.
MAX_SERIES_PER_METRIC = 256
_MAX_LABEL_VALUE = 128

_lock = threading.Lock()
_server: Any = None  # the running WSGI server (this process's only)
_thread: threading.Thread | None = None
_url: str | None = None
_owner_pid = 0
_warned: set[str] = set()


class _Names:
    """Per metric, computed once: Prometheus name, type, unit suffix for the metadata, label names."""

    def __init__(self, metric: Metric) -> None:
        self.name = prometheus_name(metric)
        self.type = PROMETHEUS_TYPES[metric.instrument]
        base = self.name[: -len("_total")] if self.type == "counter" else self.name
        unit = prometheus_unit(metric.unit, metric.instrument)
        self.unit = unit if unit and base.endswith(f"_{unit}") else ""
        self.labels = [prometheus_label(a) for a in metric.attributes]
        self.attrs = metric.attributes


_NAMES: dict[str, _Names] = {m.name: _Names(m) for m in METRICS}
_CLEAN: dict[str, str] = {}


def _label_value(value: str) -> str:
    """A label value with any credential masked (the registry's attributes never hold one; this is the belt)."""
    out = _CLEAN.get(value)
    if out is None:
        out = redact(value)[:_MAX_LABEL_VALUE]
        if len(_CLEAN) < 4096:
            _CLEAN[value] = out
    return out


def _warn_once(key: str, message: str) -> None:
    if key not in _warned:
        _warned.add(key)
        print(f"streamscope: {message}", file=sys.stderr, flush=True)


def families(view: MetricsView) -> list[Any]:
    """The metric families (``prometheus_client.core``) of every registry metric in ``view``.

    Each metric's series are its points (one per attribute set; a histogram point gives ``_bucket``, ``_sum``
    and ``_count``). A metric with no point is left out. More than :data:`MAX_SERIES_PER_METRIC` series of one
    metric: the rest are dropped, said once on stderr.

    A counter is served as the view reads it: the view's counters never go down (each process's counters only
    grow and every part of the wait split is settled once, see ``streamscope.recording.attribution``), which
    Prometheus needs (it reads a decrease as a restart, and ``rate()`` would count the whole value again).
    """
    core = require("prometheus_client.core", "the Prometheus endpoint", "prometheus")
    fmt = require("prometheus_client.utils", "the Prometheus endpoint", "prometheus").floatToGoString
    out: list[Any] = []
    for metric in METRICS:
        points = view.of(metric)
        if not points:
            continue
        n = _NAMES[metric.name]
        doc = metric.description
        if n.type == "counter":
            fam = core.CounterMetricFamily(n.name, doc, labels=n.labels, unit=n.unit)
        elif n.type == "histogram":
            fam = core.HistogramMetricFamily(n.name, doc, labels=n.labels, unit=n.unit)
        else:
            fam = core.GaugeMetricFamily(n.name, doc, labels=n.labels, unit=n.unit)
        if len(points) > MAX_SERIES_PER_METRIC:
            _warn_once(
                metric.name,
                f"{n.name} has {len(points)} series; serving the first {MAX_SERIES_PER_METRIC} (a label is unbounded)",
            )
            points = points[:MAX_SERIES_PER_METRIC]
        for p in points:
            attrs = p.attrs
            values = [_label_value(attrs.get(a, "")) for a in n.attrs]
            if n.type == "histogram":
                h = p.histogram
                if h is None:
                    continue
                cum, buckets = 0, []
                for bound, c in zip(h.bounds, h.counts):
                    cum += c
                    buckets.append((fmt(bound), cum))
                buckets.append(("+Inf", h.count))
                fam.add_metric(values, buckets, h.sum)
            else:
                fam.add_metric(values, p.value)
        out.append(fam)
    return out


class RegistryCollector:
    """A ``prometheus_client`` collector serving the registry from ``metrics_view()`` at each scrape."""

    def collect(self) -> Iterator[Any]:
        try:
            view = ev.metrics_view()
        except Exception as exc:  # a scrape must answer; the error is said once, the scrape is empty
            _warn_once("view", f"the Prometheus endpoint could not read the metrics: {type(exc).__name__}: {exc}")
            return iter(())
        return iter(families(view))

    def describe(self) -> Iterable[Any]:
        return ()  # no scrape at registration time


# -- where it runs ---------------------------------------------------------------------------------------------


def is_rank_main_process() -> bool:
    """False in a DataLoader worker (forked or spawned, also while a spawned one unpickles its dataset), an
    optimize worker, or any other daemonic multiprocessing child; True otherwise (a rank's main process)."""
    data: Any = sys.modules.get("torch.utils.data")
    if data is not None:
        try:
            if data.get_worker_info() is not None:
                return False
        except Exception:
            pass
    proc = multiprocessing.current_process()
    # a spawned child imports and unpickles before it knows what it is; the flag marks that phase
    if getattr(proc, "_inheriting", False):
        return False
    return not proc.daemon


def _local_rank() -> int:
    for var in ("LOCAL_RANK", "SLURM_LOCALID"):
        raw = os.environ.get(var)
        if raw:
            try:
                return max(0, int(raw))
            except ValueError:
                raise ConfigError(f"environment variable {var}={raw!r} is not a local rank (an integer)") from None
    return 0


def _close_in_child() -> None:
    """A forked child holds a copy of the listening socket and no thread to serve it: close it, forget it."""
    global _server, _thread, _url
    srv, _server, _thread, _url = _server, None, None, None
    if srv is not None:
        try:
            srv.socket.close()
        except Exception:
            pass


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_close_in_child)


# -- the endpoint ----------------------------------------------------------------------------------------------


def start_endpoint(port: int, addr: str = "127.0.0.1") -> int | None:
    """Serve this rank's metrics for Prometheus on ``addr``:``port + LOCAL_RANK`` (``port`` 0: a free port).

    Returns the bound port (also :func:`endpoint_port`), or None in a process that is not a rank's main
    process (see :func:`is_rank_main_process`), where nothing is started. Called again while serving, it keeps
    the running endpoint when ``port`` is 0 or names its port, and moves to the new port otherwise. Switches
    metrics on (metrics only, ``chunk`` level) when they are off.

    Raises:
        ConfigError: ``port`` is not an integer in 0..65535 (or ``port + LOCAL_RANK`` leaves that range).
        PrometheusPortError: the port is in use or may not be bound; the message names address and port.
        MissingDependencyError: ``prometheus_client`` is not installed (``pip install "streamscope[prometheus]"``).
    """
    global _server, _thread, _url, _owner_pid
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
        raise ConfigError(f"the Prometheus port must be an integer in 0..65535 (0: a free one), got {port!r}")
    if not is_rank_main_process():
        return None
    rank = _local_rank()
    want = port + rank if port else 0
    if want > 65535:
        raise ConfigError(f"the Prometheus port {port} + local rank {rank} = {want} is above 65535")
    exposition = require("prometheus_client.exposition", "the Prometheus endpoint", "prometheus")
    registry_mod = require("prometheus_client.registry", "the Prometheus endpoint", "prometheus")
    with _lock:
        old = _server if _owner_pid == os.getpid() else None
        if old is not None:
            bound = int(old.server_address[1])
            if want in (0, bound):
                ev.ensure_metrics("chunk")
                return bound
        registry = registry_mod.CollectorRegistry(auto_describe=False)
        registry.register(RegistryCollector())
        try:
            server, thread = exposition.start_http_server(want, addr=addr, registry=registry)
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                why = "is already in use (another process listens there: choose another port, or 0 for a free one)"
            else:
                why = f"cannot be bound: {exc.strerror or exc}"
            where = f" (port {port} + local rank {rank})" if rank and port else ""
            err = PrometheusPortError(f"the Prometheus endpoint's port {want}{where} on {addr} {why}")
            err.errno = exc.errno
            raise err from None
        if old is not None:  # moved to another port: the new one listens, the old one closes
            _stop_locked()
        _server, _thread, _owner_pid = server, thread, os.getpid()
        bound = int(server.server_address[1])
        host = f"[{addr}]" if ":" in addr else addr
        _url = f"http://{host}:{bound}/metrics"
        ev.ensure_metrics("chunk")
    rank_id = ev.context.env_fields()["dist_global_rank"]
    print(f"streamscope: Prometheus metrics of rank {rank_id} at {_url}", file=sys.stderr, flush=True)
    return bound


def start_from_env(*, warn: bool = True) -> int | None:
    """Start the endpoint when the ``prometheus_port`` knob (``STREAMSCOPE_PROMETHEUS_PORT``) is set, on
    ``prometheus_addr``; the bound port, or None (knob unset, not a rank's main process, or it failed).

    The variable alone switches the endpoint on: the first dataset or loader a rank's main process builds calls
    this (the ``first_use`` hook of ``streamscope/__init__.py``), and so does ``enable_telemetry()``. A failure
    (the port in use, a malformed value, ``prometheus_client`` missing) is then one line on stderr and training goes
    on without the endpoint (``warn``, the default); ``warn=False`` raises it instead. An endpoint this process
    already serves (started from code, e.g. ``start_endpoint(port)``) is kept where it is.

    Raises:
        ConfigError, PrometheusPortError, MissingDependencyError: as :func:`start_endpoint`, only with
            ``warn=False``.
    """
    raw = os.environ.get("STREAMSCOPE_PROMETHEUS_PORT", "").strip()
    running = endpoint_port()
    if running is not None:
        return running  # the code's choice of port wins over the variable's
    try:
        port = config.get("prometheus_port")
        if port is None:
            return None
        return start_endpoint(int(port), str(config.get("prometheus_addr")))
    except StreamscopeError as exc:
        if not warn:
            raise
        what = f"STREAMSCOPE_PROMETHEUS_PORT={raw}" if raw else "the prometheus_port knob"
        msg = " ".join(str(exc).split())  # one line, whatever the message holds
        rank_id = ev.context.env_fields()["dist_global_rank"]
        print(
            f"streamscope: warning: {what}: no Prometheus endpoint for rank {rank_id}: {msg}; training goes on "
            "without it",
            file=sys.stderr,
            flush=True,
        )
        return None


def _stop_locked() -> None:
    global _server, _thread, _url
    srv, thread = _server, _thread
    _server, _thread, _url = None, None, None
    if srv is not None:
        srv.shutdown()
        srv.server_close()
    if thread is not None:
        thread.join(5)


def stop_endpoint() -> None:
    """Stop serving (idempotent); metrics stay switched on."""
    with _lock:
        if _owner_pid == os.getpid():
            _stop_locked()


def endpoint_port() -> int | None:
    """The port this process serves its metrics on, or None."""
    srv = _server
    return int(srv.server_address[1]) if srv is not None and _owner_pid == os.getpid() else None


def endpoint_url() -> str | None:
    """``http://addr:port/metrics`` of this process's endpoint, or None."""
    return _url if _server is not None and _owner_pid == os.getpid() else None


# -- the names table of docs/telemetry.md ----------------------------------------------------------------------

DOC_BEGIN = "<!-- prometheus names: generated by `python -m streamscope.telemetry.prometheus` -->"
DOC_END = "<!-- end of the prometheus names -->"


def markdown_names() -> str:
    """The table of served names (docs/telemetry.md): Prometheus name, type, registry name, labels."""
    rows = ["| Prometheus name | type | from | labels |", "|---|---|---|---|"]
    for m in METRICS:
        n = _NAMES[m.name]
        rows.append(f"| `{n.name}` | {n.type} | `{m.name}` | {', '.join(n.labels)} |")
    return "\n".join(rows) + "\n"


def doc_with_names(text: str) -> str:
    """``text`` (docs/telemetry.md) with its table of names replaced by the current one.

    Raises:
        ValueError: the markers are missing.
    """
    head, sep, rest = text.partition(DOC_BEGIN)
    _, sep2, tail = rest.partition(DOC_END)
    if not sep or not sep2:
        raise ValueError(f"no {DOC_BEGIN!r} ... {DOC_END!r} block")
    return f"{head}{DOC_BEGIN}\n{markdown_names()}{DOC_END}{tail}"


if __name__ == "__main__":  # rewrite the table of docs/telemetry.md (run from the repository root)
    _doc = os.path.join("docs", "telemetry.md")
    with open(_doc, encoding="utf-8") as _f:
        _new = doc_with_names(_f.read())
    with open(_doc, "w", encoding="utf-8") as _f:
        _f.write(_new)
