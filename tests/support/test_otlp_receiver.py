"""The OTLP test receiver decodes what the real OpenTelemetry SDK exports, and each of its faults behaves."""

from __future__ import annotations

import gzip
import http.client
import socket
import time
from collections.abc import Iterator

import pytest
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from opentelemetry.proto.common.v1 import common_pb2

from tests.support.otlp_receiver import OTLPReceiver


@pytest.fixture
def rx() -> Iterator[OTLPReceiver]:
    with OTLPReceiver() as r:
        yield r


#: The client connections and responses of a test; closed after it (a response left unread, or a request the fault
#: answered with a timeout or a dropped connection, would otherwise leave its socket to the garbage collector).
_CONNS: list[http.client.HTTPConnection | http.client.HTTPResponse] = []


@pytest.fixture(autouse=True)
def _close_connections() -> Iterator[None]:
    yield
    while _CONNS:
        _CONNS.pop().close()


def _conn(rx: OTLPReceiver, timeout: float) -> http.client.HTTPConnection:
    conn = http.client.HTTPConnection(rx.host, rx.port, timeout=timeout)
    _CONNS.append(conn)
    return conn


def _export_with_sdk(traces_exporter: object, metrics_exporter: object | None) -> dict[str, str]:
    """Export 3 spans (one linked to another) and, given an exporter, a counter, a bucketed histogram and a gauge.

    Returns the hex ids of the epoch and download spans and of the trace.
    """
    from opentelemetry.metrics import Observation
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
    from opentelemetry.sdk.metrics.view import ExplicitBucketHistogramAggregation, View
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.trace import Link

    res = Resource.create({"service.name": "streamscope-test", "streamscope.rank": 3})
    tp = TracerProvider(resource=res)
    tp.add_span_processor(SimpleSpanProcessor(traces_exporter))  # type: ignore[arg-type]
    tracer = tp.get_tracer("streamscope.test", "0.1")
    readers = (
        []
        if metrics_exporter is None
        else [PeriodicExportingMetricReader(metrics_exporter, export_interval_millis=3_600_000)]
    )  # type: ignore[arg-type]
    mp = MeterProvider(
        resource=res,
        metric_readers=readers,
        views=[
            View(
                instrument_name="streamscope.test.latency",
                aggregation=ExplicitBucketHistogramAggregation(boundaries=[0.001, 0.01, 0.1, 1.0]),
            )
        ],
    )
    meter = mp.get_meter("streamscope.test", "0.1")
    counter = meter.create_counter("streamscope.test.samples", unit="{sample}", description="samples delivered")
    hist = meter.create_histogram("streamscope.test.latency", unit="s")
    meter.create_observable_gauge(
        "streamscope.test.depth", unit="{chunk}", callbacks=[lambda _o: [Observation(7, {"stage": "decode"})]]
    )
    try:
        with tracer.start_as_current_span("epoch", attributes={"epoch": 0}) as epoch:
            with tracer.start_as_current_span("download", attributes={"chunk": 5, "tags": ["a", "b"]}) as dl:
                dl.add_event("fetched", {"bytes": 1024})
            with tracer.start_as_current_span(
                "read", links=[Link(dl.get_span_context(), {"chunk.index": 5})], attributes={"ratio": 0.5, "ok": True}
            ):
                pass
        counter.add(32, {"worker": "w0"})
        counter.add(64, {"worker": "w0"})
        for v in (0.0005, 0.005, 0.05, 5.0):
            hist.record(v, {"stage": "read"})
        assert tp.force_flush(5_000) and mp.force_flush(5_000)
    finally:
        tp.shutdown()
        mp.shutdown()
    ctx = lambda s: format(s.get_span_context().span_id, "016x")  # noqa: E731
    return {"epoch": ctx(epoch), "download": ctx(dl), "trace": format(epoch.get_span_context().trace_id, "032x")}


def _check_decoded(rx: OTLPReceiver, ids: dict[str, str]) -> None:
    spans = {s.name: s for s in rx.wait_for("traces", lambda s: len(s) >= 3, timeout=10)}
    assert set(spans) == {"epoch", "download", "read"}
    epoch, dl, read = spans["epoch"], spans["download"], spans["read"]
    assert epoch.parent_span_id is None and epoch.span_id == ids["epoch"]
    assert dl.parent_span_id == ids["epoch"] and read.parent_span_id == ids["epoch"]
    assert {s.trace_id for s in spans.values()} == {ids["trace"]}
    assert dl.attributes == {"chunk": 5, "tags": ["a", "b"]}
    assert read.attributes == {"ratio": 0.5, "ok": True}
    assert [(e.name, e.attributes) for e in dl.events] == [("fetched", {"bytes": 1024})]
    assert [(lk.trace_id, lk.span_id, lk.attributes) for lk in read.links] == [
        (ids["trace"], ids["download"], {"chunk.index": 5})
    ]
    assert epoch.resource["service.name"] == "streamscope-test" and epoch.resource["streamscope.rank"] == 3
    assert epoch.scope == "streamscope.test" and epoch.scope_version == "0.1"
    assert epoch.start_ns <= dl.start_ns <= dl.end_ns <= read.start_ns <= read.end_ns <= epoch.end_ns
    assert epoch.kind == "INTERNAL" and epoch.status_code == "UNSET"

    points = rx.wait_for("metrics", lambda p: len({x.name for x in p}) >= 3, timeout=10)
    by_name = {p.name: p for p in points}
    c = by_name["streamscope.test.samples"]
    assert (c.type, c.unit, c.description, c.value, c.monotonic, c.temporality, c.attributes) == (
        "sum",
        "{sample}",
        "samples delivered",
        96,
        True,
        "CUMULATIVE",
        {"worker": "w0"},
    )
    h = by_name["streamscope.test.latency"]
    assert (h.type, h.unit, h.count, h.bounds, h.bucket_counts, h.attributes) == (
        "histogram",
        "s",
        4,
        [0.001, 0.01, 0.1, 1.0],
        [1, 1, 1, 0, 1],
        {"stage": "read"},
    )
    assert h.sum == pytest.approx(5.0555) and (h.min, h.max) == (0.0005, 5.0)
    g = by_name["streamscope.test.depth"]
    assert (g.type, g.unit, g.value, g.attributes) == ("gauge", "{chunk}", 7, {"stage": "decode"})
    assert rx.latest_points("streamscope.test.depth") == [g]
    assert c.resource["service.name"] == "streamscope-test"


@pytest.mark.parametrize("gzipped", [False, True], ids=["http", "http+gzip"])
def test_decodes_a_real_sdk_export_over_http(rx: OTLPReceiver, gzipped: bool) -> None:
    from opentelemetry.exporter.otlp.proto.http import Compression
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    comp = Compression.Gzip if gzipped else Compression.NoCompression
    ids = _export_with_sdk(
        OTLPSpanExporter(endpoint=rx.endpoint("traces"), compression=comp, timeout=5),
        OTLPMetricExporter(endpoint=rx.endpoint("metrics"), compression=comp, timeout=5),
    )
    _check_decoded(rx, ids)
    reqs = rx.requests
    assert reqs and all(r.status == 200 and r.transport == "http" for r in reqs)
    assert all(r.headers["content-type"] == "application/x-protobuf" for r in reqs)
    assert all((r.headers.get("content-encoding") == "gzip") == gzipped for r in reqs)
    if gzipped:
        assert all(r.decoded_size is not None and r.size < r.decoded_size for r in reqs)
    # the SimpleSpanProcessor posts one request per span: the exporter reused its keep-alive connection
    assert len([r for r in reqs if r.signal == "traces"]) == 3


def test_decodes_a_real_sdk_export_over_grpc() -> None:
    from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

    with OTLPReceiver(grpc=True) as rx:
        ids = _export_with_sdk(
            OTLPSpanExporter(endpoint=rx.grpc_endpoint, insecure=True, timeout=5),
            OTLPMetricExporter(endpoint=rx.grpc_endpoint, insecure=True, timeout=5),
        )
        _check_decoded(rx, ids)
        assert {r.transport for r in rx.requests} == {"grpc"}


def test_base_url_from_the_standard_variable_reaches_the_signal_paths(
    rx: OTLPReceiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", rx.url)
    _export_with_sdk(OTLPSpanExporter(timeout=5), None)
    assert {r.path for r in rx.requests} == {"/v1/traces"}


# --------------------------------------------------------------------------------------------------
# Requests by hand: faults and bad input
# --------------------------------------------------------------------------------------------------


def _trace_body() -> bytes:
    req = trace_service_pb2.ExportTraceServiceRequest()
    span = req.resource_spans.add().scope_spans.add().spans.add()
    span.name, span.trace_id, span.span_id = "s", b"\x01" * 16, b"\x02" * 8
    return req.SerializeToString()


def _post(
    rx: OTLPReceiver,
    body: bytes | None = None,
    *,
    path: str = "/v1/traces",
    timeout: float = 5,
    headers: dict[str, str] | None = None,
) -> http.client.HTTPResponse:
    conn = _conn(rx, timeout)
    conn.request(
        "POST",
        path,
        body=_trace_body() if body is None else body,
        headers=headers or {"Content-Type": "application/x-protobuf"},
    )
    resp = conn.getresponse()
    _CONNS.append(resp)  # the response holds the socket once the server closes (HTTP/1.0)
    return resp


def test_a_plain_request_is_accepted_and_answered_with_the_protobuf_response(rx: OTLPReceiver) -> None:
    resp = _post(rx)
    assert resp.status == 200 and resp.getheader("Content-Type") == "application/x-protobuf"
    answer = trace_service_pb2.ExportTraceServiceResponse.FromString(resp.read())
    assert not answer.HasField("partial_success")
    assert [(s.name, s.trace_id, s.span_id) for s in rx.spans()] == [("s", "01" * 16, "02" * 8)]


@pytest.mark.parametrize("status", [500, 429, 400, 503])
def test_status_fault_answers_the_status_and_keeps_nothing(rx: OTLPReceiver, status: int) -> None:
    rx.set_fault(status=status, retry_after=2 if status == 429 else None)
    resp = _post(rx)
    assert resp.status == status
    assert resp.getheader("Retry-After") == ("2" if status == 429 else None)
    assert rx.spans() == []
    assert [(r.status, r.fault) for r in rx.requests] == [(status, f"status {status}")]


def test_fault_limited_to_n_requests_and_to_one_signal(rx: OTLPReceiver) -> None:
    rx.set_fault(status=503, times=2, signals=["traces"])
    metrics_ok = _post(rx, b"", path="/v1/metrics")  # an empty request is a valid (empty) export
    assert metrics_ok.status == 200
    assert [_post(rx).status for _ in range(3)] == [503, 503, 200]
    assert len(rx.spans()) == 1


def test_delay_fault_answers_after_the_delay(rx: OTLPReceiver) -> None:
    rx.set_fault(delay=0.4)
    t0 = time.monotonic()
    resp = _post(rx)
    assert resp.status == 200 and time.monotonic() - t0 >= 0.4
    assert len(rx.spans()) == 1


def test_hang_fault_never_answers_until_cleared(rx: OTLPReceiver) -> None:
    rx.set_fault(hang=True)
    with pytest.raises(socket.timeout):
        _post(rx, timeout=0.3)
    assert [r.fault for r in rx.wait_for("requests")] == ["hang"]
    conn = _conn(rx, 5)
    conn.request("POST", "/v1/traces", body=_trace_body(), headers={"Content-Type": "application/x-protobuf"})
    rx.wait_for("requests", lambda r: len(r) == 2)
    rx.clear_fault()  # ends the hang with the connection closed, no answer
    with pytest.raises((http.client.RemoteDisconnected, ConnectionResetError)):
        conn.getresponse()
    assert rx.spans() == [] and _post(rx).status == 200


def test_close_fault_drops_the_connection_without_an_answer(rx: OTLPReceiver) -> None:
    rx.set_fault(close=True, times=1)
    with pytest.raises((http.client.RemoteDisconnected, ConnectionResetError)):
        _post(rx)
    assert _post(rx).status == 200
    assert [r.status for r in rx.requests] == [None, 200]


def test_partial_success_fault_accepts_and_reports_rejections(rx: OTLPReceiver) -> None:
    rx.set_fault(partial_rejected=3, partial_message="too many")
    resp = _post(rx)
    answer = trace_service_pb2.ExportTraceServiceResponse.FromString(resp.read())
    assert (resp.status, answer.partial_success.rejected_spans, answer.partial_success.error_message) == (
        200,
        3,
        "too many",
    )
    assert len(rx.spans()) == 1


def test_the_real_exporter_retries_a_503_after_retry_after_and_lands(rx: OTLPReceiver) -> None:
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    rx.set_fault(status=503, retry_after=0, times=1)
    _export_with_sdk(OTLPSpanExporter(endpoint=rx.endpoint("traces"), timeout=5), None)
    statuses = [r.status for r in rx.requests]
    assert statuses[:2] == [503, 200] and len(rx.spans()) == 3


def test_the_real_exporter_gives_up_on_a_400(rx: OTLPReceiver) -> None:
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace.export import SpanExportResult

    rx.set_fault(status=400)
    exporter = OTLPSpanExporter(endpoint=rx.endpoint("traces"), timeout=5)
    from opentelemetry.sdk.trace import TracerProvider

    tp = TracerProvider()
    span = tp.get_tracer("t").start_span("x")
    span.end()
    assert exporter.export([span]) is SpanExportResult.FAILURE  # type: ignore[list-item]
    assert [r.status for r in rx.requests] == [400]  # not retried
    exporter.shutdown()


@pytest.mark.parametrize(
    ("body", "headers", "path", "status", "error"),
    [
        (b"\xff\xff\xff", None, "/v1/traces", 400, "not an ExportTraceServiceRequest"),
        (b"not gzip", {"Content-Encoding": "gzip"}, "/v1/traces", 400, "not valid gzip"),
        (b"{}", {"Content-Type": "application/json"}, "/v1/traces", 415, "is not application/x-protobuf"),
        (b"", None, "/v1/profiles", 404, "no OTLP signal at /v1/profiles"),
    ],
    ids=["bad-protobuf", "bad-gzip", "json", "unknown-path"],
)
def test_bad_requests_are_refused_with_a_reason(
    rx: OTLPReceiver, body: bytes, headers: dict[str, str] | None, path: str, status: int, error: str
) -> None:
    h = {"Content-Type": "application/x-protobuf", **(headers or {})}
    resp = _post(rx, body, path=path, headers=h)
    assert resp.status == status
    assert error in resp.read().decode()
    (req,) = rx.requests
    assert req.status == status and req.error is not None and error in req.error and req.message is None


def test_gzip_body_by_hand_is_decoded(rx: OTLPReceiver) -> None:
    resp = _post(
        rx, gzip.compress(_trace_body()), headers={"Content-Type": "application/x-protobuf", "Content-Encoding": "gzip"}
    )
    assert resp.status == 200 and [s.name for s in rx.spans()] == ["s"]


def test_wait_for_times_out_saying_what_arrived(rx: OTLPReceiver) -> None:
    _post(rx)
    with pytest.raises(TimeoutError, match=r"no traces matching .* 1 requests \(traces: 1 records"):
        rx.wait_for("traces", lambda s: len(s) >= 2, timeout=0.2)
    with pytest.raises(ValueError, match="unknown kind"):
        rx.wait_for("spans", timeout=0.1)  # type: ignore[arg-type]


def test_fault_arguments_are_checked(rx: OTLPReceiver) -> None:
    with pytest.raises(ValueError, match="choose one"):
        rx.set_fault(status=500, hang=True)
    with pytest.raises(ValueError, match="unknown signals"):
        rx.set_fault(status=500, signals=["spans"])
    with pytest.raises(ValueError, match="times must be"):
        rx.set_fault(close=True, times=0)


def test_close_ends_a_hanging_request_and_is_idempotent() -> None:
    rx = OTLPReceiver()
    rx.set_fault(hang=True)
    conn = _conn(rx, 5)
    conn.request("POST", "/v1/traces", body=_trace_body(), headers={"Content-Type": "application/x-protobuf"})
    rx.wait_for("requests")
    t0 = time.monotonic()
    rx.close()
    rx.close()
    assert time.monotonic() - t0 < 2
    with pytest.raises((http.client.RemoteDisconnected, ConnectionResetError)):
        conn.getresponse()


def test_logs_are_decoded_and_flattened(rx: OTLPReceiver) -> None:
    from opentelemetry.proto.collector.logs.v1 import logs_service_pb2

    req = logs_service_pb2.ExportLogsServiceRequest()
    rl = req.resource_logs.add()
    kv = rl.resource.attributes.add()
    kv.key, kv.value.string_value = "service.name", "svc"
    sl = rl.scope_logs.add()
    sl.scope.name = "streamscope"
    rec = sl.log_records.add()
    rec.time_unix_nano, rec.severity_number, rec.severity_text = 5, 13, "WARN"
    rec.body.string_value = "export dropped 3 spans"
    rec.trace_id, rec.span_id, rec.event_name = b"\x0a" * 16, b"\x0b" * 8, "streamscope.drop"
    a = rec.attributes.add()
    a.key = "counts"
    a.value.kvlist_value.values.add(key="spans", value=common_pb2.AnyValue(int_value=3))
    resp = _post(rx, req.SerializeToString(), path="/v1/logs")
    assert resp.status == 200
    logs_service_pb2.ExportLogsServiceResponse.FromString(resp.read())
    (log,) = rx.wait_for("logs")
    assert (log.body, log.severity_number, log.severity_text, log.time_ns, log.event_name) == (
        "export dropped 3 spans",
        13,
        "WARN",
        5,
        "streamscope.drop",
    )
    assert (log.trace_id, log.span_id, log.attributes, log.resource, log.scope) == (
        "0a" * 16,
        "0b" * 8,
        {"counts": {"spans": 3}},
        {"service.name": "svc"},
        "streamscope",
    )
    assert len(rx.messages("logs")) == 1 and rx.spans() == []
