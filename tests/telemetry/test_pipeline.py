"""enable_telemetry()'s SDK pipeline against a real OTLP receiver: delivery, and every fault of the endpoint.

The training loop's side of the pipeline is the span processor's ``on_end`` (called by the event bus's flusher, never
by the loop itself) and the metric instruments' callbacks (the pump's thread): whatever the endpoint does, they
must return at once, count what is lost and say it once.
"""

from __future__ import annotations

import socket
import threading
import time
from typing import Any

import pytest

from streamscope.events import instruments
from streamscope.events.registry import BUCKETS_S, M
from streamscope.telemetry import otlp_config
from streamscope.telemetry.pipeline import Pipeline
from tests.support.otlp_receiver import OTLPReceiver


def _pipeline(endpoint: str, *, timeout: float = 1.0, env: dict[str, str] | None = None, **kw) -> Pipeline:
    base = {"OTEL_BSP_SCHEDULE_DELAY": "50", "OTEL_METRIC_EXPORT_INTERVAL": "100000"}
    cfg = otlp_config.load({**base, **(env or {})}, endpoint=endpoint, timeout=timeout, **kw)
    return Pipeline(cfg, set_global=False)


def _spans(pipe: Pipeline, n: int, name: str = "download") -> float:
    """End ``n`` spans; the longest ``end()`` call in seconds (what the event bus's flusher pays)."""
    tracer = pipe.tracer_provider.get_tracer("test")
    worst = 0.0
    for i in range(n):
        sp = tracer.start_span(name, attributes={"streamscope.chunk": i})
        t0 = time.perf_counter()
        sp.end()
        worst = max(worst, time.perf_counter() - t0)
    return worst


def _ended_in_time(pipe: Pipeline, n: int) -> int:
    """End ``n`` spans on a thread of their own, which must finish within 30 s (an end that waited for a stuck
    export never would); the thread's ident."""
    ender = threading.Thread(target=_spans, args=(pipe, n), daemon=True)
    ender.start()
    ender.join(30)
    assert not ender.is_alive(), "ending spans waited for the stuck export"
    assert ender.ident is not None
    return ender.ident


class _Gate:
    """Holds every span export until :meth:`open`: the pump that calls ``export`` is provably stuck meanwhile."""

    def __init__(self) -> None:
        self.opened = threading.Event()
        self.entered = threading.Event()
        self.inside = 0

    def around(self, exporter: Any) -> Any:
        gate = self

        class Gated:
            def export(self, batch: Any) -> Any:
                gate.inside += 1  # only the span pump exports here (one at a time: the pipeline's span lock)
                gate.entered.set()
                gate.opened.wait()
                gate.inside -= 1
                return exporter.export(batch)  # then the real exporter meets the endpoint's fault

            def shutdown(self) -> None:
                exporter.shutdown()

        return Gated()

    def open(self) -> None:
        self.opened.set()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_spans_and_metrics_arrive_gzipped_with_the_registry_bounds():
    with OTLPReceiver() as rx:
        pipe = _pipeline(rx.url)
        try:
            hist = pipe.meter_provider.get_meter("streamscope").create_histogram(
                M.DOWNLOAD_DURATION.name, unit="s", explicit_bucket_boundaries_advisory=[1.0]
            )
            hist.record(0.003, {"rank": "0"})
            _spans(pipe, 3)
            assert pipe.force_flush(5)
            spans = rx.wait_for("traces", lambda s: len(s) >= 3)
            assert [s.name for s in spans] == ["download"] * 3
            (p,) = rx.wait_for("metrics", lambda p: p)
            assert p.name == M.DOWNLOAD_DURATION.name and p.unit == "s"
            assert p.bounds == list(BUCKETS_S)  # the View wins over the instrument's advice
            assert p.count == 1 and p.bucket_counts[BUCKETS_S.index(5e-3)] == 1
            assert all(r.headers.get("content-encoding") == "gzip" for r in rx.requests)
            assert pipe.stats.exported["traces"] == 3 and pipe.stats.dropped == {"traces": 0, "metrics": 0}
        finally:
            pipe.shutdown(2)


@pytest.mark.slow
@pytest.mark.parametrize(
    "fault",
    [
        pytest.param({"status": 503}, id="5xx"),
        pytest.param({"status": 400}, id="4xx"),
        pytest.param({"hang": True}, id="hanging"),
        pytest.param({"delay": 3.0}, id="slow"),
        pytest.param({"close": True}, id="closed"),
    ],
)
def test_a_faulty_endpoint_never_blocks_drops_are_counted_and_said_once(fault, capfd, caplog, monkeypatch):
    """Ending spans never waits for an export: shown while the span pump's export is provably stuck (a gate the test
    holds keeps it inside ``export``), so no clock is involved; then the fault plays out for 2.5 s, and every span
    lost is counted once, in the pipeline's stats and in the registry's counter alike."""
    ours_threads = {threading.get_ident()}
    added: list[tuple[int, str, float]] = []
    real_add_key = instruments.add_key

    def spy(k: str, value: float) -> None:  # what reaches the registry, and from which thread
        added.append((threading.get_ident(), k, value))
        real_add_key(k, value)

    monkeypatch.setattr(instruments, "add_key", spy)
    before = instruments.counts()
    with OTLPReceiver() as rx:
        rx.set_fault(**fault)
        pipe = _pipeline(
            rx.url, timeout=1.0, env={"OTEL_BSP_MAX_QUEUE_SIZE": "64", "OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "8"}
        )
        ours_threads |= {p.thread.ident for p in pipe.pumps}
        gate = _Gate()
        pipe.span_exporters = [(where, gate.around(exp)) for where, exp in pipe.span_exporters]
        try:
            ours_threads.add(_ended_in_time(pipe, 8))  # a full batch: the pump takes it and stops at the gate
            assert gate.entered.wait(30), "the span pump never began an export"
            queued = len(pipe.processor.queue)  # the pump is stuck: nothing else takes from the queue
            ours_threads.add(_ended_in_time(pipe, 100))
            assert gate.inside == 1 and not gate.opened.is_set()  # it returned while the export was still stuck
            assert len(pipe.processor.queue) == 64  # bounded whatever the endpoint does
            assert pipe.stats.dropped["traces"] == 100 - (64 - queued)  # the rest dropped and counted, not waited for
            gate.open()
            ended = 108
            t0 = time.monotonic()
            while time.monotonic() - t0 < 2.5:  # the flusher keeps handing spans over while exports fail
                _spans(pipe, 40)
                ended += 40
                time.sleep(0.05)
            assert len(pipe.processor.queue) <= 64  # bounded whatever the endpoint does
            rx.wait_for("requests", lambda r: r)
            t1 = time.monotonic()
            pipe.shutdown(1.0)
            assert time.monotonic() - t1 < 3.0  # the last export is bounded too
        finally:
            gate.open()
            rx.clear_fault()
    for pump in pipe.pumps:  # an export still hanging at shutdown ends with the receiver
        pump.thread.join(30)
        assert not pump.thread.is_alive()  # settled: nothing of this pipeline counts any more
    st = pipe.stats
    lost = st.dropped["traces"]
    assert lost > 0 and st.exported["traces"] + lost == ended  # each span sent or counted lost, once
    assert not pipe.processor.queue
    # The registry's counter is the process's: another test's pipeline may still add to it from its own threads, so
    # what this pipeline added is told apart by thread (its pumps' and the two that ended spans), and is all it dropped.
    mine = sum(v for t, k, v in added if k == M.EXPORT_DROPPED.name and t in ours_threads)
    assert mine == lost + st.dropped["metrics"]
    after = instruments.counts()
    assert after.get(M.EXPORT_DROPPED.name, 0) - before.get(M.EXPORT_DROPPED.name, 0) >= mine  # and it got there
    err = capfd.readouterr().err
    ours = [line for line in err.splitlines() if line.startswith("streamscope telemetry:")]
    assert 1 <= len(ours) <= 2, err  # failed exports and a full queue: each said once
    assert all("dropped" in line for line in ours)
    sdk = [(r.name, r.msg) for r in caplog.records if r.name.startswith("opentelemetry")]
    assert len(sdk) == len(set(sdk)), sdk  # the SDK's repeated log lines (each retry, each batch) cut to their first


@pytest.mark.parametrize("fault", [{"status": 503}, {"hang": True}], ids=["5xx", "hanging"])
def test_a_run_shorter_than_one_export_still_counts_and_says_what_it_lost(fault, capfd):
    """The process stops while its only export is still retrying (a 503's back-off, or no answer): the spans and
    points of that export are counted as dropped and said, once each, within the exit timeout plus a short grace."""
    with OTLPReceiver() as rx:
        rx.set_fault(**fault)
        pipe = _pipeline(rx.url, timeout=5.0, env={"OTEL_EXPORTER_OTLP_TIMEOUT": "5000"})
        try:
            pipe.meter_provider.get_meter("streamscope").create_counter("streamscope.test.count").add(1)
            _spans(pipe, 5)
            rx.wait_for("requests", lambda r: any(q.signal == "traces" for q in r))  # the export is under way
            pipe._metric_wake.set()  # and a metric export too
            rx.wait_for("requests", lambda r: any(q.signal == "metrics" for q in r))
            t0 = time.monotonic()
            pipe.shutdown(0.5)
            took = time.monotonic() - t0
        finally:
            rx.clear_fault()
    assert took < 4.0, took  # the exit timeout (0.5 s), the exporters' shutdown and the grace, not the 5 s retries
    st = pipe.stats
    assert st.dropped["traces"] == 5 and st.exported["traces"] == 0
    assert st.dropped["metrics"] >= 1 and st.exported["metrics"] == 0
    assert st.in_flight == {"traces": 0, "metrics": 0}
    # what the pumps say of the exports they held may come after shutdown returned on a busy machine: read stderr
    # until both signals were said (or 20 s passed), then check each was said once
    err = ""
    deadline = time.monotonic() + 20
    while True:
        err += capfd.readouterr().err
        ours = [line for line in err.splitlines() if line.startswith("streamscope telemetry:")]
        said = any("traces" in line for line in ours) and any("metrics" in line for line in ours)
        if said or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert len(ours) == len(set(ours)), ours  # each said once
    assert said, ours


def test_an_unreachable_endpoint_counts_failed_metric_exports():
    port = _free_port()  # nothing listens there
    before = instruments.counts()
    pipe = _pipeline(f"http://127.0.0.1:{port}", timeout=0.5)
    try:
        meter = pipe.meter_provider.get_meter("streamscope")
        meter.create_counter("streamscope.test.count").add(1)
        t0 = time.monotonic()
        ok = pipe.force_flush(0.5)
        assert not ok and time.monotonic() - t0 < 5
        assert pipe.stats.failed["metrics"] >= 1 and pipe.stats.dropped["metrics"] >= 1
    finally:
        pipe.shutdown(0.5)
    after = instruments.counts()
    assert after.get(M.EXPORT_ERRORS.name, 0) > before.get(M.EXPORT_ERRORS.name, 0)


def test_a_forked_child_exports_nothing_and_starts_no_thread():
    import os
    import threading

    with OTLPReceiver() as rx:
        pipe = _pipeline(rx.url)
        try:
            tracer = pipe.tracer_provider.get_tracer("t")
            r, w = os.pipe()
            pid = os.fork()
            if pid == 0:  # pragma: no cover - the child
                tracer.start_span("in-child").end()
                names = sorted(t.name for t in threading.enumerate())
                os.write(w, f"{len(pipe.processor.queue)}|{','.join(names)}".encode())
                os._exit(0)
            os.waitpid(pid, 0)
            queued, names = os.read(r, 4096).decode().split("|")
            assert queued == "0"  # the child's span was not queued: its parent exports the rank
            assert "streamscope-otlp" not in names
            _spans(pipe, 1, "in-parent")
            assert pipe.force_flush(5)
            assert [s.name for s in rx.wait_for("traces")] == ["in-parent"]
        finally:
            pipe.shutdown(1)


def test_grpc_when_asked():
    with OTLPReceiver(grpc=True) as rx:
        cfg = otlp_config.load(
            {"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_METRIC_EXPORT_INTERVAL": "100000"},
            endpoint=f"http://{rx.grpc_endpoint}",
            timeout=5,
        )
        pipe = Pipeline(cfg, set_global=False)
        try:
            _spans(pipe, 2)
            pipe.meter_provider.get_meter("streamscope").create_counter("streamscope.test.count").add(3)
            assert pipe.force_flush(5)
            assert [s.name for s in rx.wait_for("traces", lambda s: len(s) >= 2)] == ["download", "download"]
            assert rx.wait_for("metrics")[0].value == 3
            assert {r.transport for r in rx.requests} == {"grpc"}
        finally:
            pipe.shutdown(2)
