"""A real OTLP receiver for tests: OTLP/HTTP (protobuf, optionally gzip) on 127.0.0.1, and optionally OTLP/gRPC.

No OTLP collector is installable from the registries CI reaches, so the exporter tests send to this receiver
instead. It decodes every request with ``opentelemetry-proto``, the same message classes a collector uses, so
a payload it accepts is one a collector would accept. Usage::

    with OTLPReceiver() as rx:                                     # OTLPReceiver(grpc=True) also serves gRPC
        exporter = OTLPSpanExporter(endpoint=rx.endpoint("traces"))
        ...
        spans = rx.wait_for("traces", lambda spans: len(spans) >= 4, timeout=10)
        assert spans[0].links[0].span_id == ...

What arrived is kept three ways: :attr:`OTLPReceiver.requests` (every request, with its outcome),
the decoded protobuf messages of the accepted ones, and flattened plain-python records (:class:`Span`,
:class:`MetricPoint`, :class:`LogRecord`) that tests assert on. :meth:`OTLPReceiver.wait_for` blocks on a
condition variable until a predicate over one of those lists holds, so tests never poll with sleeps.

Faults for the exporter's failure tests (:meth:`OTLPReceiver.set_fault`): answer a status code (with an
optional ``Retry-After``), answer after a delay, hang (never answer until the receiver closes or the fault is
cleared), close the connection without answering, or accept with a partial-success rejection. A fault can be
limited to the next N requests and to one signal.

Run directly (``python tests/support/otlp_receiver.py``) it serves until interrupted and prints each request.
"""

from __future__ import annotations

import gzip
import socket
import threading
import time
import zlib
from collections.abc import Callable, Sequence
from concurrent import futures
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal

from google.protobuf.message import DecodeError, Message
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from opentelemetry.proto.common.v1 import common_pb2
from opentelemetry.proto.trace.v1 import trace_pb2

Signal = Literal["traces", "metrics", "logs"]
SIGNALS: tuple[Signal, ...] = ("traces", "metrics", "logs")
_PATHS: dict[str, Signal] = {f"/v1/{s}": s for s in SIGNALS}
_REQUEST_TYPES: dict[Signal, type[Message]] = {
    "traces": trace_service_pb2.ExportTraceServiceRequest,
    "metrics": metrics_service_pb2.ExportMetricsServiceRequest,
    "logs": logs_service_pb2.ExportLogsServiceRequest,
}
_RESPONSE_TYPES: dict[Signal, type[Message]] = {
    "traces": trace_service_pb2.ExportTraceServiceResponse,
    "metrics": metrics_service_pb2.ExportMetricsServiceResponse,
    "logs": logs_service_pb2.ExportLogsServiceResponse,
}
# partial_success's "rejected_*" field per signal
_REJECTED_FIELD: dict[Signal, str] = {
    "traces": "rejected_spans",
    "metrics": "rejected_data_points",
    "logs": "rejected_log_records",
}
_PROTOBUF = "application/x-protobuf"
# OTLP's HTTP-to-gRPC status mapping, used when a status fault is served over gRPC
_GRPC_CODE_FOR_STATUS = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    501: "UNIMPLEMENTED",
    502: "UNAVAILABLE",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}


# --------------------------------------------------------------------------------------------------
# Flattened records
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Link:
    trace_id: str  # 32 hex digits
    span_id: str  # 16 hex digits
    attributes: dict[str, Any]


@dataclass(frozen=True)
class Event:
    name: str
    time_ns: int
    attributes: dict[str, Any]


@dataclass(frozen=True)
class Span:
    name: str
    trace_id: str
    span_id: str
    parent_span_id: str | None  # None for a root span
    kind: str  # "INTERNAL", "CLIENT", ... (SpanKind without its SPAN_KIND_ prefix)
    start_ns: int
    end_ns: int
    attributes: dict[str, Any]
    resource: dict[str, Any]
    scope: str
    scope_version: str
    events: list[Event]
    links: list[Link]
    status_code: str  # "UNSET", "OK" or "ERROR"
    status_message: str

    @property
    def duration_ns(self) -> int:
        return self.end_ns - self.start_ns


@dataclass(frozen=True)
class MetricPoint:
    """One data point of one metric, with its metric's name, unit and type copied onto it."""

    name: str
    unit: str
    description: str
    type: str  # "sum", "gauge", "histogram", "exponential_histogram" or "summary"
    attributes: dict[str, Any]
    resource: dict[str, Any]
    scope: str
    start_ns: int
    time_ns: int
    monotonic: bool | None = None  # sums only
    temporality: str | None = None  # "CUMULATIVE" / "DELTA" for sums and histograms
    value: int | float | None = None  # sum and gauge points
    count: int | None = None  # histogram points
    sum: float | None = None
    min: float | None = None
    max: float | None = None
    bounds: list[float] = field(default_factory=list)  # explicit histogram bucket upper bounds
    bucket_counts: list[int] = field(default_factory=list)  # len(bounds) + 1 counts
    scale: int | None = None  # exponential histograms: scale, zero count and (offset, counts) per side
    zero_count: int | None = None
    positive: tuple[int, list[int]] | None = None
    negative: tuple[int, list[int]] | None = None
    quantiles: dict[float, float] = field(default_factory=dict)  # summaries


@dataclass(frozen=True)
class LogRecord:
    body: Any
    severity_number: int
    severity_text: str
    time_ns: int
    observed_time_ns: int
    attributes: dict[str, Any]
    resource: dict[str, Any]
    scope: str
    trace_id: str | None
    span_id: str | None
    event_name: str


@dataclass
class Request:
    """One request as it arrived, whatever became of it."""

    signal: Signal | None  # None for an unknown path
    transport: str  # "http" or "grpc"
    path: str
    headers: dict[str, str]  # lower-cased names
    size: int  # bytes on the wire (compressed, if it was)
    decoded_size: int | None  # bytes after un-gzipping
    fault: str | None  # the fault applied to it, if any ("status 503", "delay 2.0", "hang", "close", ...)
    status: int | None  # the HTTP status answered (None: no answer, as under "hang" and "close")
    error: str | None  # why it was refused (bad encoding, bad protobuf, ...)
    message: Message | None  # the decoded request, for accepted ones


def _hex(b: bytes) -> str:
    return b.hex()


def any_value(v: common_pb2.AnyValue) -> Any:
    """An OTLP ``AnyValue`` as plain python (arrays as lists, kvlists as dicts, bytes as bytes)."""
    kind = v.WhichOneof("value")
    if kind is None:
        return None
    if kind == "array_value":
        return [any_value(x) for x in v.array_value.values]
    if kind == "kvlist_value":
        return attributes(v.kvlist_value.values)
    return getattr(v, kind)


def attributes(kvs: Sequence[common_pb2.KeyValue]) -> dict[str, Any]:
    return {kv.key: any_value(kv.value) for kv in kvs}


def flatten_traces(req: trace_service_pb2.ExportTraceServiceRequest) -> list[Span]:
    out = []
    for rs in req.resource_spans:
        res = attributes(rs.resource.attributes)
        for ss in rs.scope_spans:
            for s in ss.spans:
                out.append(
                    Span(
                        name=s.name,
                        trace_id=_hex(s.trace_id),
                        span_id=_hex(s.span_id),
                        parent_span_id=_hex(s.parent_span_id) or None,
                        kind=trace_pb2.Span.SpanKind.Name(s.kind).removeprefix("SPAN_KIND_"),
                        start_ns=s.start_time_unix_nano,
                        end_ns=s.end_time_unix_nano,
                        attributes=attributes(s.attributes),
                        resource=res,
                        scope=ss.scope.name,
                        scope_version=ss.scope.version,
                        events=[Event(e.name, e.time_unix_nano, attributes(e.attributes)) for e in s.events],
                        links=[Link(_hex(lk.trace_id), _hex(lk.span_id), attributes(lk.attributes)) for lk in s.links],
                        status_code=trace_pb2.Status.StatusCode.Name(s.status.code).removeprefix("STATUS_CODE_"),
                        status_message=s.status.message,
                    )
                )
    return out


def _temporality(t: int) -> str:
    return {1: "DELTA", 2: "CUMULATIVE"}.get(t, "UNSPECIFIED")


def flatten_metrics(req: metrics_service_pb2.ExportMetricsServiceRequest) -> list[MetricPoint]:
    out: list[MetricPoint] = []
    for rm in req.resource_metrics:
        res = attributes(rm.resource.attributes)
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                kind = m.WhichOneof("data")
                if kind is None:
                    continue
                common = dict(
                    name=m.name, unit=m.unit, description=m.description, type=kind, resource=res, scope=sm.scope.name
                )
                data = getattr(m, kind)
                for p in data.data_points:
                    base = dict(
                        common,
                        attributes=attributes(p.attributes),
                        start_ns=p.start_time_unix_nano,
                        time_ns=p.time_unix_nano,
                    )
                    if kind in ("sum", "gauge"):
                        value = getattr(p, p.WhichOneof("value")) if p.WhichOneof("value") else None
                        extra: dict[str, Any] = dict(value=value)
                        if kind == "sum":
                            extra.update(
                                monotonic=data.is_monotonic, temporality=_temporality(data.aggregation_temporality)
                            )
                    elif kind == "histogram":
                        extra = dict(
                            temporality=_temporality(data.aggregation_temporality),
                            count=p.count,
                            sum=p.sum if p.HasField("sum") else None,
                            min=p.min if p.HasField("min") else None,
                            max=p.max if p.HasField("max") else None,
                            bounds=list(p.explicit_bounds),
                            bucket_counts=list(p.bucket_counts),
                        )
                    elif kind == "exponential_histogram":
                        extra = dict(
                            temporality=_temporality(data.aggregation_temporality),
                            count=p.count,
                            sum=p.sum if p.HasField("sum") else None,
                            min=p.min if p.HasField("min") else None,
                            max=p.max if p.HasField("max") else None,
                            scale=p.scale,
                            zero_count=p.zero_count,
                            positive=(p.positive.offset, list(p.positive.bucket_counts)),
                            negative=(p.negative.offset, list(p.negative.bucket_counts)),
                        )
                    else:  # summary
                        extra = dict(
                            count=p.count, sum=p.sum, quantiles={q.quantile: q.value for q in p.quantile_values}
                        )
                    out.append(MetricPoint(**base, **extra))
    return out


def flatten_logs(req: logs_service_pb2.ExportLogsServiceRequest) -> list[LogRecord]:
    out = []
    for rl in req.resource_logs:
        res = attributes(rl.resource.attributes)
        for sl in rl.scope_logs:
            for r in sl.log_records:
                out.append(
                    LogRecord(
                        body=any_value(r.body),
                        severity_number=r.severity_number,
                        severity_text=r.severity_text,
                        time_ns=r.time_unix_nano,
                        observed_time_ns=r.observed_time_unix_nano,
                        attributes=attributes(r.attributes),
                        resource=res,
                        scope=sl.scope.name,
                        trace_id=_hex(r.trace_id) or None,
                        span_id=_hex(r.span_id) or None,
                        event_name=r.event_name,
                    )
                )
    return out


_FLATTEN: dict[Signal, Callable[[Any], list[Any]]] = {
    "traces": flatten_traces,
    "metrics": flatten_metrics,
    "logs": flatten_logs,
}


# --------------------------------------------------------------------------------------------------
# Faults
# --------------------------------------------------------------------------------------------------


@dataclass
class Fault:
    """What to do instead of a plain 200; see :meth:`OTLPReceiver.set_fault`."""

    status: int | None = None
    retry_after: float | None = None
    delay: float = 0.0
    hang: bool = False
    close: bool = False
    partial_rejected: int = 0
    partial_message: str = ""
    signals: frozenset[str] = frozenset(SIGNALS)
    remaining: int | None = None  # requests left to fault; None = until cleared

    def describe(self) -> str:
        if self.hang:
            return "hang"
        if self.close:
            return "close"
        parts = []
        if self.delay:
            parts.append(f"delay {self.delay}")
        if self.status is not None:
            parts.append(f"status {self.status}")
        if self.partial_rejected:
            parts.append(f"partial {self.partial_rejected}")
        return ", ".join(parts) or "none"


# --------------------------------------------------------------------------------------------------
# The receiver
# --------------------------------------------------------------------------------------------------


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"  # the exporter keeps its connection alive
    timeout = 30  # an idle keep-alive connection's thread ends after this

    def setup(self) -> None:
        super().setup()
        self.server.receiver._track(self.connection, add=True)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            self.server.receiver._track(self.connection, add=False)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        if self.server.receiver.verbose:
            super().log_message(format, *args)

    def _reply(
        self, status: int, body: bytes = b"", content_type: str = "text/plain", headers: dict[str, str] | None = None
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        self._reply(HTTPStatus.METHOD_NOT_ALLOWED, b"OTLP/HTTP takes POST\n", headers={"Allow": "POST"})

    def do_POST(self) -> None:  # noqa: N802
        rx = self.server.receiver
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        headers = {k.lower(): v for k, v in self.headers.items()}
        signal = _PATHS.get(self.path.split("?", 1)[0])
        req = Request(signal, "http", self.path, headers, len(raw), None, None, None, None, None)
        fault = rx._take_fault(signal)
        if fault is not None:
            req.fault = fault.describe()
            if fault.hang:
                rx._record(req)
                rx._released.wait()
                self.close_connection = True
                return
            if fault.close:
                rx._record(req)
                self.close_connection = True
                return
            if fault.delay and rx._released.wait(fault.delay):
                self.close_connection = True  # closing the receiver ends the delay with no answer
                rx._record(req)
                return
            if fault.status is not None:
                req.status = fault.status
                extra = {"Retry-After": f"{fault.retry_after:g}"} if fault.retry_after is not None else None
                rx._record(req)
                self._reply(fault.status, f"fault injected: {fault.status}\n".encode(), headers=extra)
                return
        if signal is None:
            req.status, req.error = 404, f"no OTLP signal at {self.path}"
            rx._record(req)
            self._reply(404, (req.error + "\n").encode())
            return
        ctype = headers.get("content-type", "").split(";", 1)[0].strip()
        if ctype != _PROTOBUF:
            req.status, req.error = 415, f"content type {ctype!r} is not {_PROTOBUF}"
            rx._record(req)
            self._reply(415, (req.error + "\n").encode())
            return
        body, error = _decode_body(raw, headers.get("content-encoding", ""))
        req.decoded_size = None if body is None else len(body)
        message = None
        if body is not None:
            message, error = _parse(signal, body)
        if message is None:
            req.status, req.error = 400, error
            rx._record(req)
            self._reply(400, f"{error}\n".encode())
            return
        req.status, req.message = 200, message
        rx._record(req)
        response = _response(signal, fault)
        self._reply(200, response.SerializeToString(), _PROTOBUF)


def _decode_body(raw: bytes, encoding: str) -> tuple[bytes | None, str | None]:
    encoding = encoding.strip().lower()
    if encoding in ("", "identity"):
        return raw, None
    if encoding == "gzip":
        try:
            return gzip.decompress(raw), None
        except (OSError, EOFError, zlib.error) as e:
            return None, f"body is not valid gzip: {e}"
    if encoding == "deflate":
        try:
            return zlib.decompress(raw), None
        except zlib.error as e:
            return None, f"body is not valid deflate: {e}"
    return None, f"unsupported Content-Encoding {encoding!r}"


def _parse(signal: Signal, body: bytes) -> tuple[Message | None, str | None]:
    message = _REQUEST_TYPES[signal]()
    try:
        message.ParseFromString(body)
    except DecodeError as e:
        return None, f"body is not an {type(message).__name__}: {e}"
    return message, None


def _response(signal: Signal, fault: Fault | None) -> Message:
    response = _RESPONSE_TYPES[signal]()
    if fault is not None and fault.partial_rejected:
        setattr(response.partial_success, _REJECTED_FIELD[signal], fault.partial_rejected)
        response.partial_success.error_message = fault.partial_message or "fault injected: partial success"
    return response


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    receiver: OTLPReceiver


class OTLPReceiver:
    """An OTLP/HTTP receiver on ``host``:``port`` (0 = a free port), and with ``grpc=True`` an OTLP/gRPC one.

    Thread-safe: requests are handled on their own threads; every read of what arrived takes the lock.
    """

    def __init__(self, host: str = "127.0.0.1", port: int = 0, *, grpc: bool = False, verbose: bool = False):
        self.verbose = verbose
        self._cond = threading.Condition()
        self._requests: list[Request] = []
        self._messages: dict[Signal, list[Message]] = {s: [] for s in SIGNALS}
        self._records: dict[Signal, list[Any]] = {s: [] for s in SIGNALS}
        self._fault: Fault | None = None
        self._released = threading.Event()  # set on close: ends hangs and delays
        self._conns: set[socket.socket] = set()
        self._server = _Server((host, port), _Handler)
        self._server.receiver = self
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, name="otlp-receiver", daemon=True
        )
        self._thread.start()
        self.host, self.port = self._server.server_address[:2]
        self._grpc_server: Any = None
        self.grpc_port: int | None = None
        if grpc:
            self._start_grpc(host)
        self._closed = False

    # -- addresses --------------------------------------------------------------------------------

    @property
    def url(self) -> str:
        """The base URL, as ``OTEL_EXPORTER_OTLP_ENDPOINT`` takes it."""
        return f"http://{self.host}:{self.port}"

    def endpoint(self, signal: Signal) -> str:
        """The full signal URL, as the exporters' ``endpoint=`` argument takes it."""
        if signal not in SIGNALS:
            raise ValueError(f"unknown OTLP signal {signal!r}; expected one of {SIGNALS}")
        return f"{self.url}/v1/{signal}"

    @property
    def grpc_endpoint(self) -> str:
        """``host:port`` of the gRPC receiver (pass ``insecure=True`` to the gRPC exporters)."""
        if self.grpc_port is None:
            raise RuntimeError("this receiver was started without grpc=True")
        return f"{self.host}:{self.grpc_port}"

    # -- faults -----------------------------------------------------------------------------------

    def set_fault(
        self,
        *,
        status: int | None = None,
        retry_after: float | None = None,
        delay: float = 0.0,
        hang: bool = False,
        close: bool = False,
        partial_rejected: int = 0,
        partial_message: str = "",
        signals: Sequence[str] | None = None,
        times: int | None = None,
    ) -> None:
        """Fault the next ``times`` requests (all until :meth:`clear_fault` when None) of ``signals`` (default all).

        * ``status``: answer that HTTP status (gRPC: OTLP's matching code) instead of accepting the data;
          ``retry_after`` adds a ``Retry-After`` header (seconds).
        * ``delay``: wait this many seconds, then do the rest (accept, or answer ``status``).
        * ``hang``: never answer; the connection stays open until the receiver closes or the fault is cleared.
        * ``close``: close the connection without answering (gRPC: abort with UNAVAILABLE).
        * ``partial_rejected``: accept, but answer a partial success rejecting that many items.
        """
        if hang + close + (status is not None) > 1:
            raise ValueError("choose one of status=, hang= and close=")
        if times is not None and times < 1:
            raise ValueError(f"times must be >= 1 or None, got {times}")
        sigs = frozenset(signals) if signals is not None else frozenset(SIGNALS)
        if not sigs <= set(SIGNALS):
            raise ValueError(f"unknown signals {sorted(sigs - set(SIGNALS))}; expected some of {SIGNALS}")
        with self._cond:
            self._fault = Fault(status, retry_after, delay, hang, close, partial_rejected, partial_message, sigs, times)
            self._released.clear()

    def clear_fault(self) -> None:
        """Back to plain 200s; requests hanging or delayed by the fault end now (without an answer)."""
        with self._cond:
            self._fault = None
        self._released.set()

    def _take_fault(self, signal: Signal | None) -> Fault | None:
        with self._cond:
            f = self._fault
            if f is None or (signal is not None and signal not in f.signals):
                return None
            if f.remaining is not None:
                f.remaining -= 1
                if f.remaining <= 0:
                    self._fault = None
            return f

    # -- what arrived -----------------------------------------------------------------------------

    def _record(self, req: Request) -> None:
        records = _FLATTEN[req.signal](req.message) if req.message is not None and req.signal else []
        with self._cond:
            self._requests.append(req)
            if req.message is not None and req.signal:
                self._messages[req.signal].append(req.message)
                self._records[req.signal].extend(records)
            self._cond.notify_all()

    @property
    def requests(self) -> list[Request]:
        """Every request so far, in arrival order (accepted, refused and faulted)."""
        with self._cond:
            return list(self._requests)

    def messages(self, signal: Signal) -> list[Message]:
        """The decoded ``Export*ServiceRequest`` messages accepted for ``signal``."""
        with self._cond:
            return list(self._messages[signal])

    def spans(self) -> list[Span]:
        with self._cond:
            return list(self._records["traces"])

    def metric_points(self, name: str | None = None) -> list[MetricPoint]:
        """Every metric data point accepted so far (of metric ``name`` only, when given), in arrival order."""
        with self._cond:
            return [p for p in self._records["metrics"] if name is None or p.name == name]

    def latest_points(self, name: str) -> list[MetricPoint]:
        """The newest point of metric ``name`` for each distinct attribute set."""
        latest: dict[tuple[Any, ...], MetricPoint] = {}
        for p in self.metric_points(name):
            latest[tuple(sorted((k, repr(v)) for k, v in p.attributes.items()))] = p
        return list(latest.values())

    def log_records(self) -> list[LogRecord]:
        with self._cond:
            return list(self._records["logs"])

    def reset(self) -> None:
        """Forget everything received (faults stay as set)."""
        with self._cond:
            self._requests.clear()
            for s in SIGNALS:
                self._messages[s].clear()
                self._records[s].clear()

    def wait_for(
        self, kind: Signal | Literal["requests"], predicate: Callable[[list[Any]], Any] = bool, timeout: float = 10.0
    ) -> list[Any]:
        """Block until ``predicate(items)`` is truthy, then return ``items``.

        ``items`` is the list of flattened records of ``kind`` ("traces" -> :class:`Span`, "metrics" ->
        :class:`MetricPoint`, "logs" -> :class:`LogRecord`) or, for "requests", every :class:`Request`.
        The default predicate waits for at least one item. Raises ``TimeoutError`` saying what did arrive.
        """
        if kind != "requests" and kind not in SIGNALS:
            raise ValueError(f"unknown kind {kind!r}; expected 'requests' or one of {SIGNALS}")
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                items = list(self._requests if kind == "requests" else self._records[kind])
                if predicate(items):
                    return items
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(
                        f"OTLP receiver at {self.url}: no {kind} matching the predicate within "
                        f"{timeout:g} s; {self._summary_locked()}"
                    )
                self._cond.wait(left)

    def _summary_locked(self) -> str:
        counts = ", ".join(f"{s}: {len(self._records[s])} records" for s in SIGNALS)
        outcomes = [
            f"{r.path} -> {r.status if r.status is not None else 'no answer'}"
            + (f" ({r.fault})" if r.fault else "")
            + (f" ({r.error})" if r.error else "")
            for r in self._requests[-5:]
        ]
        return f"{len(self._requests)} requests ({counts}); last: {outcomes}"

    def summary(self) -> str:
        with self._cond:
            return self._summary_locked()

    # -- lifetime ---------------------------------------------------------------------------------

    def _track(self, conn: socket.socket, *, add: bool) -> None:
        with self._cond:
            (self._conns.add if add else self._conns.discard)(conn)

    def close(self) -> None:
        """Stop serving; hanging requests end with their connection closed. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._released.set()
        self._server.shutdown()
        self._server.server_close()
        with self._cond:
            conns = list(self._conns)
        for c in conns:  # idle keep-alive connections would otherwise keep their threads in readline()
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        if self._grpc_server is not None:
            self._grpc_server.stop(grace=None)
        self._thread.join(5)

    def __enter__(self) -> OTLPReceiver:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- gRPC -------------------------------------------------------------------------------------

    def _start_grpc(self, host: str) -> None:
        import grpc
        from opentelemetry.proto.collector.logs.v1 import logs_service_pb2_grpc
        from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2_grpc
        from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc

        rx = self

        def handle(signal: Signal, request: Message, context: Any) -> Message:
            metadata = {k.lower(): str(v) for k, v in context.invocation_metadata()}
            req = Request(
                signal,
                "grpc",
                f"grpc:{signal}",
                metadata,
                request.ByteSize(),
                request.ByteSize(),
                None,
                None,
                None,
                None,
            )
            fault = rx._take_fault(signal)
            if fault is not None:
                req.fault = fault.describe()
                if fault.hang:
                    rx._record(req)
                    rx._released.wait()
                    context.abort(grpc.StatusCode.UNAVAILABLE, "receiver closed while hanging")
                if fault.close:
                    rx._record(req)
                    context.abort(grpc.StatusCode.UNAVAILABLE, "fault injected: connection closed")
                if fault.delay and rx._released.wait(fault.delay):
                    rx._record(req)
                    context.abort(grpc.StatusCode.UNAVAILABLE, "receiver closed during the delay")
                if fault.status is not None:
                    req.status = fault.status
                    rx._record(req)
                    code = getattr(grpc.StatusCode, _GRPC_CODE_FOR_STATUS.get(fault.status, "UNKNOWN"))
                    if fault.retry_after is not None:
                        context.set_trailing_metadata((("retry-after", f"{fault.retry_after:g}"),))
                    context.abort(code, f"fault injected: {fault.status}")
            req.status, req.message = 200, request
            rx._record(req)
            return _response(signal, fault)

        class Traces(trace_service_pb2_grpc.TraceServiceServicer):
            def Export(self, request: Message, context: Any) -> Message:  # noqa: N802 - the proto's name
                return handle("traces", request, context)

        class Metrics(metrics_service_pb2_grpc.MetricsServiceServicer):
            def Export(self, request: Message, context: Any) -> Message:  # noqa: N802
                return handle("metrics", request, context)

        class Logs(logs_service_pb2_grpc.LogsServiceServicer):
            def Export(self, request: Message, context: Any) -> Message:  # noqa: N802
                return handle("logs", request, context)

        server = grpc.server(futures.ThreadPoolExecutor(max_workers=8, thread_name_prefix="otlp-grpc"))
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Traces(), server)
        metrics_service_pb2_grpc.add_MetricsServiceServicer_to_server(Metrics(), server)
        logs_service_pb2_grpc.add_LogsServiceServicer_to_server(Logs(), server)
        self.grpc_port = server.add_insecure_port(f"{host}:0")
        server.start()
        self._grpc_server = server


if __name__ == "__main__":
    with OTLPReceiver(grpc=True, verbose=True) as _rx:
        print(f"OTLP/HTTP on {_rx.url}, OTLP/gRPC on {_rx.grpc_endpoint}; Ctrl-C stops", flush=True)
        seen = 0
        try:
            while True:
                reqs = _rx.wait_for("requests", lambda r: len(r) > seen, timeout=3600)  # noqa: B023
                for r in reqs[seen:]:
                    print(r.transport, r.path, r.status, r.fault or "", r.error or "", r.size, "B", flush=True)
                seen = len(reqs)
        except KeyboardInterrupt:
            pass
