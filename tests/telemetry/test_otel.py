"""streamscope through opentelemetry-api: the registry's instruments, the span writer (parents, links, rate bound)."""

from __future__ import annotations

import json
import math
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from streamscope import events as ev
from streamscope import recording
from streamscope.events.registry import BUCKETS_S, METRICS, Instrument, M
from streamscope.recording.metrics import SpanStats
from streamscope.recording.snapshots import MetricsSnapshot
from streamscope.recording.views import build
from streamscope.telemetry import otel
from streamscope.telemetry.otel import SAMPLED_OUT, MetricInstruments, SpanWriter, replay
from streamscope.telemetry.spans import Op
from tests.support.tracing import clean_tracer  # noqa: F401

MAIN, WORKER = 100, 200


def _tracer():
    exporter = InMemorySpanExporter()
    tp = TracerProvider()
    tp.add_span_processor(SimpleSpanProcessor(exporter))
    return tp.get_tracer("test"), exporter


def _op(kind, key, name, cat, t0, t1=0, parent=None, pid=WORKER, error=None, stem=None, **attrs):
    return Op(kind, key, name, cat, t0, t1, attrs, parent, pid, error, stem)


# --- spans -------------------------------------------------------------------------------------------------------


def test_spans_keep_real_times_parents_by_thread_and_by_epoch_and_link_reads_to_downloads():
    tracer, out = _tracer()
    w = SpanWriter(tracer, MAIN)
    w.write(
        [
            _op("start", (MAIN, 1), "epoch", "epoch", 1_000, pid=MAIN, epoch=1),
            _op("start", (WORKER, 2), "prefetch", "prefetch", 1_100),
            _op("start", (WORKER, 3), "download", "download", 1_200, parent=(WORKER, 2), stem="chunk-0-3"),
            _op("note", None, "retry", "download", 1_250, parent=(WORKER, 3), attempt=2),
            _op("end", (WORKER, 3), "download", "download", 0, 1_300, bytes=99),
            _op("end", (WORKER, 2), "prefetch", "prefetch", 0, 1_400),
            _op("whole", (WORKER + 1, 4), "mmap", "read", 1_500, 1_600, stem="chunk-0-3"),
            _op("end", (MAIN, 1), "epoch", "epoch", 0, 2_000, pid=MAIN),
            _op("whole", (WORKER, 5), "mmap", "read", 2_500, 2_600),  # after the epoch: a root
        ]
    )
    spans = {s.name + str(s.start_time): s for s in out.get_finished_spans()}
    epoch, pre, dl = spans["epoch1000"], spans["prefetch1100"], spans["download1200"]
    read, late = spans["mmap1500"], spans["mmap2500"]
    assert (dl.start_time, dl.end_time, epoch.end_time) == (1_200, 1_300, 2_000)
    assert epoch.parent is None and pre.parent.span_id == epoch.context.span_id
    assert dl.parent.span_id == pre.context.span_id and dl.kind.name == "CLIENT"
    assert dl.attributes["bytes"] == 99 and [e.name for e in dl.events] == ["retry"]
    assert read.parent.span_id == epoch.context.span_id  # another worker, during the epoch
    assert [lk.context.span_id for lk in read.links] == [dl.context.span_id]
    assert late.parent is None and not late.links
    assert epoch.attributes[SAMPLED_OUT] == 0
    assert len({s.context.trace_id for s in (epoch, pre, dl, read)}) == 1


def test_the_rate_bound_samples_out_chunk_spans_but_never_epochs_or_failures():
    tracer, out = _tracer()
    now = [0.0]
    w = SpanWriter(tracer, MAIN, rate=10.0, burst=5, clock=lambda: now[0])
    ops = [_op("start", (MAIN, 1), "epoch", "epoch", 0, pid=MAIN)]
    for i in range(20):
        ops.append(_op("start", (WORKER, 10 + i), "download", "download", 10 + i))
        ops.append(_op("whole", (WORKER, 100 + i), "decompress", "decompress", 10 + i, 11 + i, parent=(WORKER, 10 + i)))
        ops.append(_op("end", (WORKER, 10 + i), "download", "download", 0, 12 + i))
    ops.append(_op("whole", (WORKER, 999), "download", "download", 50, 60, error="OSError: gone"))
    w.write(ops)
    now[0] = 1.0  # a second later: ten more tokens, of which the bucket holds five
    w.write([_op("whole", (WORKER, 1000 + i), "mmap", "read", 70 + i, 71 + i) for i in range(12)])
    w.write([_op("end", (MAIN, 1), "epoch", "epoch", 0, 100, pid=MAIN)])
    spans = out.get_finished_spans()
    names = [s.name for s in spans]
    assert names.count("download") + names.count("decompress") == 5 + 1  # the burst, and the failed download
    assert names.count("mmap") == 5 and names.count("epoch") == 1
    (epoch,) = [s for s in spans if s.name == "epoch"]
    assert epoch.attributes[SAMPLED_OUT] == (40 - 5) + (12 - 5)
    failed = [s for s in spans if s.status.status_code.name == "ERROR"]
    assert len(failed) == 1 and failed[0].status.description == "OSError: gone"
    # a sampled-out span's children took its parent (the epoch), never a dangling one
    ids = {s.context.span_id for s in spans}
    assert all(s.parent is None or s.parent.span_id in ids for s in spans)


def test_the_writers_state_is_bounded(monkeypatch):
    monkeypatch.setattr(otel, "MAX_OPEN", 8)
    monkeypatch.setattr(otel, "MAX_LINKS", 4)
    tracer, out = _tracer()
    w = SpanWriter(tracer, MAIN, rate=1e9, burst=10**9)
    w.write([_op("start", (WORKER, i), "download", "download", i, stem=f"c{i}") for i in range(30)])
    assert len(w.live) == 8 and len(w.downloads) == 4
    lost = [s for s in out.get_finished_spans() if s.attributes.get("streamscope.end_lost")]
    assert len(lost) == 22


# --- metrics -----------------------------------------------------------------------------------------------------


def _stats(*secs: float) -> SpanStats:
    s = SpanStats()
    for x in secs:
        s.observe_ns(int(x * 1e9))
    return s


def _meter():
    reader = InMemoryMetricReader()
    return MeterProvider(metric_readers=[reader]).get_meter("streamscope"), reader


def _points(reader) -> dict[str, list]:
    out: dict[str, list] = {}
    data = reader.get_metrics_data()
    for rm in data.resource_metrics if data is not None else ():
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                out[m.name] = (m, list(m.data.data_points))
    return out


def test_every_registry_metric_is_an_instrument_with_its_unit_and_attributes():
    snaps = [MetricsSnapshot(spans={"stall/stall": _stats(0.002, 0.004), "download/download": _stats(0.3)})]
    snaps[0].values[f"{M.LOADER_BATCHES.name}|dataset=imgs"] = 7
    meter, reader = _meter()
    inst = MetricInstruments(meter, read=lambda: build(snaps[0], rank=2, node=1))
    got = _points(reader)
    assert set(inst.instruments) == {m.name for m in METRICS}
    by = {m.name: m for m in METRICS}
    for name, (metric, points) in got.items():
        assert metric.unit == by[name].unit and metric.description == by[name].description
        for p in points:
            assert set(p.attributes) <= set(by[name].attributes) and p.attributes["rank"] == "2"
    kinds = {name: type(metric.data).__name__ for name, (metric, _p) in got.items()}
    expect = {Instrument.COUNTER: "Sum", Instrument.UP_DOWN_COUNTER: "Sum", Instrument.GAUGE: "Gauge"}
    for name, kind in kinds.items():
        want = "Histogram" if by[name].instrument is Instrument.HISTOGRAM else expect[by[name].instrument]
        assert kind == want, name
    (batches,) = got[M.LOADER_BATCHES.name][1]
    assert batches.value == 7 and batches.attributes["dataset"] == "imgs"
    (wait,) = got[M.LOADER_WAIT_DURATION.name][1]
    assert wait.count == 2 and wait.sum == pytest.approx(0.006) and list(wait.explicit_bounds) == list(BUCKETS_S)


def test_histograms_get_what_arrived_since_the_last_collection_exactly():
    snap = MetricsSnapshot(spans={"stall/stall": _stats(0.002, 0.004)})
    cur = [snap]
    meter, reader = _meter()
    MetricInstruments(meter, read=lambda: build(cur[0]))
    _points(reader)
    MetricInstruments.SHARE_S = 0.0
    try:
        cur[0] = MetricsSnapshot(spans={"stall/stall": _stats(0.002, 0.004, 0.02, 0.02, 120.0)})
        (wait,) = _points(reader)[M.LOADER_WAIT_DURATION.name][1]
    finally:
        MetricInstruments.SHARE_S = 0.05
    want = _stats(0.002, 0.004, 0.02, 0.02, 120.0)
    assert wait.count == 5 and wait.sum == pytest.approx(want.total_s)
    assert list(wait.bucket_counts) == list(want.buckets)  # cumulative over both collections


def test_instruments_report_nothing_in_a_forked_child():
    meter, reader = _meter()
    inst = MetricInstruments(meter, read=lambda: build(MetricsSnapshot()))
    inst.pid = os.getpid() + 1  # as a forked child sees its parent's instruments
    assert inst.current() is None
    assert not any(points for _m, points in _points(reader).values())


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(min_value=0.0, max_value=200.0, allow_nan=False), min_size=1, max_size=40))
def test_replay_gives_each_bucket_its_count_and_the_exact_sum(values):
    s = _stats(*values)
    recorded = replay(BUCKETS_S, s.buckets, s.total_s, s.max_s)
    counts = [0] * (len(BUCKETS_S) + 1)
    for v, n in recorded:
        i = next((k for k, b in enumerate(BUCKETS_S) if v <= b), len(BUCKETS_S))  # OpenTelemetry: (lo, hi]
        counts[i] += n
    assert counts == list(s.buckets)
    assert math.isclose(sum(v * n for v, n in recorded), s.total_s, rel_tol=1e-6, abs_tol=1e-9)


# --- wiring --------------------------------------------------------------------------------------------------------


@pytest.mark.usefixtures("clean_tracer")
def test_the_span_sink_joins_the_tracers_sinks_and_env_tracing_keeps_its_log():
    os.environ["STREAMSCOPE_TRACE_LEVEL"] = "batch"  # tracing switched on by the environment alone
    os.environ.pop("STREAMSCOPE_TRACE_SINKS", None)
    ev.configure(trace={"epoch"})
    otel.add_span_sink()
    assert os.environ["STREAMSCOPE_TRACE_SINKS"] == f"{recording.DEFAULT_SINK},{otel.SPAN_SINK}"
    otel.add_span_sink()  # once
    assert os.environ["STREAMSCOPE_TRACE_SINKS"].count(otel.SPAN_SINK) == 1


@pytest.mark.usefixtures("clean_tracer")
def test_the_runtime_gets_the_span_sink_from_the_package_root_not_by_importing_its_dotted_path(monkeypatch):
    """Explicit wiring (issue 33, deliverable 3): the runtime (recording) sits below telemetry and must not import
    it by the spec STREAMSCOPE_TRACE_SINKS carries; the package root provides the factory under that name."""
    from streamscope.recording import processor

    def no_import(spec: str) -> None:
        raise AssertionError(f"the runtime imported {spec} by its dotted path")

    monkeypatch.setattr(processor, "resolve", no_import)
    for spec in (otel.SPAN_SINK, recording.DEFAULT_SINK):
        assert callable(processor.factory_of(spec))
    assert isinstance(processor.factory_of(otel.SPAN_SINK)(), otel.OTelSpanSink)


@pytest.mark.usefixtures("clean_tracer")
def test_the_span_sink_is_the_spool_outside_a_ranks_main_process(monkeypatch):
    from streamscope.telemetry.spool import SpoolSink

    assert isinstance(otel.span_sink(), otel.OTelSpanSink)
    monkeypatch.setattr(otel, "is_rank_main", lambda: False)
    assert isinstance(otel.span_sink(), SpoolSink)


def test_an_application_with_an_sdk_meter_provider_gets_the_metrics_at_streamscopes_entry():
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    code = """
import json
from opentelemetry import metrics
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
reader = InMemoryMetricReader()
metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))
from streamscope import events as ev
from streamscope import recording
ev.configure_from_env()  # what building a dataset or a loader calls
names = sorted({m.name for rm in reader.get_metrics_data().resource_metrics for sm in rm.scope_metrics
                for m in sm.metrics})
print(json.dumps([sorted(recording.RECORDER.metric_cats) == sorted(ev.LEVELS["chunk"]), names]))
"""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("STREAMSCOPE_", "OTEL_"))}
    env["PYTHONPATH"] = os.pathsep.join([os.path.join(root, "src"), root])
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    on, names = json.loads(out.stdout.strip().splitlines()[-1])
    assert on  # metrics recording switched itself on: a real SDK provider is there
    assert M.LOADER_WAIT.name in names and M.KNOB_VALUE.name in names
