"""OTLP from real training processes to a real OTLP/HTTP receiver: a StreamingDataLoader with 2 workers over S3.

Each run is its own process (OpenTelemetry's global providers are set once per process). What arrived is checked
against the registry: metric names, units, types and attributes; spans of epochs, stalls and chunk work with their
parents and the link from a chunk's download to its reads; the resource; no credential anywhere; and the workers
opened no connection (every request came from the rank's main process).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from streamscope.events.registry import METRICS, Instrument, M
from tests.engine._data import image_sample, write_dataset
from tests.support.otlp_receiver import OTLPReceiver

SCRIPT = os.path.join(os.path.dirname(__file__), "_scenario.py")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def s3_dataset(tmp_path_factory, _s3_http_process):
    srv = _s3_http_process
    ep = srv.endpoint(srv.new_bucket())
    local = write_dataset(
        str(tmp_path_factory.mktemp("ds") / "ds"), 160, image_sample, chunk_size=20, compression="zstd"
    )
    client = ep.boto3_client()
    for name in os.listdir(local):
        client.upload_file(os.path.join(local, name), ep.bucket, f"ds/{name}")
    return ep


def _env(rx: OTLPReceiver, ep, tmp_path, **extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("OTEL_", "STREAMSCOPE_", "LITDATA_TRACE", "LITDATA_LOG"))
    }
    env.update(
        SCENARIO_PATH=os.pathsep.join([os.path.join(ROOT, "src"), ROOT]),
        SCENARIO_S3_ENDPOINT=ep.endpoint_url,
        SCENARIO_S3_KEY=ep.access_key,
        SCENARIO_S3_SECRET=ep.secret_key,
        SCENARIO_S3_REGION=ep.region,
        SCENARIO_CACHE=str(tmp_path / "cache"),
        OTEL_EXPORTER_OTLP_ENDPOINT=rx.url,
        OTEL_METRIC_EXPORT_INTERVAL="200",
        OTEL_BSP_SCHEDULE_DELAY="100",
        STREAMSCOPE_METRICS_INTERVAL="0.2",
        LITDATA_DISABLE_VERSION_CHECK="1",
    )
    env.update(extra)
    return env


def _run(mode: str, ep, start: str, env: dict[str, str], timeout: float = 240) -> dict:
    out = subprocess.run(
        [sys.executable, SCRIPT, mode, ep.url("ds"), start],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert out.returncode == 0, out.stderr[-4000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def _check_metrics(rx: OTLPReceiver, rank: str = "0") -> None:
    rx.wait_for("metrics", lambda ps: any(p.name == M.LOADER_BATCHES.name and p.value == 40 for p in ps), timeout=30)
    by = {m.name: m for m in METRICS}
    seen = {}
    for p in rx.metric_points():
        if not p.name.startswith("streamscope."):
            continue
        m = by[p.name]  # every metric that arrived is declared in the registry
        seen[p.name] = p
        assert p.unit == m.unit and p.description == m.description
        kind = {Instrument.HISTOGRAM: "histogram", Instrument.GAUGE: "gauge"}.get(m.instrument, "sum")
        assert p.type == kind, p.name
        if m.instrument is Instrument.COUNTER:
            assert p.monotonic is True
        assert set(p.attributes) <= set(m.attributes) and p.attributes["rank"] == rank
        for a in ("chunk", "url", "file", "pid", "sample"):  # cardinality: never a per-chunk or per-sample label
            assert a not in p.attributes
    for m in (M.LOADER_WAIT, M.LOADER_WAIT_STAGE, M.LOADER_SAMPLES, M.DOWNLOAD_BYTES, M.CACHE_MISSES, M.KNOB_VALUE):
        assert m.name in seen, m.name
    (dl,) = rx.latest_points(M.DOWNLOAD_DURATION.name)
    assert dl.count == 8 and dl.bounds[0] == 1e-5 and dl.bounds[-1] == 60.0  # the registry's bounds, in seconds
    (samples,) = rx.latest_points(M.LOADER_SAMPLES.name)
    assert samples.value == 320 and samples.attributes["dataset"] == "ds"


def _check_spans(rx: OTLPReceiver, rank: int = 0) -> list:
    spans = rx.wait_for("traces", lambda s: sum(x.name == "epoch" for x in s) >= 2, timeout=30)
    spans = rx.wait_for("traces", lambda s: sum(x.name == "mmap" for x in s) >= 32, timeout=30)
    by_id = {s.span_id: s for s in spans}
    names = {s.name for s in spans}
    assert {"epoch", "download", "decompress", "mmap", "prefetch"} <= names
    assert not names & {"sample", "batch", "decode_batch"}  # per-sample and per-batch work is aggregated
    epochs = [s for s in spans if s.name == "epoch"]
    assert all(e.parent_span_id is None and e.attributes["streamscope.workers"] == 2 for e in epochs)
    downloads = [s for s in spans if s.name == "download"]
    assert len(downloads) == 8 and all(d.kind == "CLIENT" for d in downloads)
    for d in downloads:
        assert d.attributes["streamscope.worker"] in (0, 1) and d.attributes["streamscope.rank"] == rank
        assert d.attributes["url.full"].startswith("s3://") and d.start_ns < d.end_ns
        root = d
        while root.parent_span_id is not None:
            assert root.parent_span_id in by_id, (root, sorted((x.name, x.span_id, x.parent_span_id) for x in spans))
            root = by_id[root.parent_span_id]
        assert root.name == "epoch" and root.start_ns <= d.start_ns  # inside its epoch's trace
    linked = [s for s in spans if s.name in ("mmap", "decompress") and s.links]
    assert len(linked) >= 32
    for s in linked:
        target = by_id[s.links[0].span_id]
        assert target.name == "download" and s.links[0].attributes == {"streamscope.link": "download"}
        stem = target.attributes["url.full"].rsplit("/", 1)[1].split(".")[0]
        assert s.attributes["streamscope.file"].startswith(stem + ".")
    return spans


def _no_secret(rx: OTLPReceiver, ep) -> None:
    for signal in ("traces", "metrics"):
        text = "".join(str(m) for m in rx.messages(signal))
        assert ep.secret_key not in text and ep.access_key not in text


@pytest.mark.parametrize("start", ["fork", "spawn"])
def test_enable_telemetry_exports_a_real_run(start, s3_dataset, tmp_path):
    ep = s3_dataset
    with OTLPReceiver() as rx:
        out = _run("enable", ep, start, _env(rx, ep, tmp_path, OTEL_SERVICE_NAME="trainer"))
        assert out["batches"] == 40 and out["installed"] == ["metrics", "traces"]
        assert out["stats"]["dropped"] == {"traces": 0, "metrics": 0}
        _check_metrics(rx)
        spans = _check_spans(rx)
        res = spans[0].resource
        assert res["service.name"] == "trainer" and res["streamscope.rank"] == 0 and res["streamscope.node"] == 0
        assert res["host.name"] and res["streamscope.run.id"]
        stalls = [s for s in spans if s.name == "stall"]
        assert all(s.duration_ns >= 10_000_000 for s in stalls)  # otel_stall_min
        _no_secret(rx, ep)


def test_persistent_workers_hand_their_spans_over(s3_dataset, tmp_path):
    ep = s3_dataset
    with OTLPReceiver() as rx:
        out = _run("enable", ep, "fork", _env(rx, ep, tmp_path, SCENARIO_PERSISTENT="1"))
        assert out["batches"] == 40
        _check_spans(rx)


def test_an_applications_own_opentelemetry_gets_streamscope_with_no_call(s3_dataset, tmp_path):
    ep = s3_dataset
    log = tmp_path / "trace.log"
    with OTLPReceiver() as rx:
        env = _env(rx, ep, tmp_path, STREAMSCOPE_TRACE_LEVEL="chunk", STREAMSCOPE_LOG_FILE=str(log))
        out = _run("app", ep, "fork", env)
        assert out["batches"] == 40
        _check_metrics(rx)
        spans = _check_spans(rx)
        assert spans[0].resource["service.name"] == "the-app" and spans[0].scope == "streamscope"
        assert log.exists() and b"download" in log.read_bytes()  # one level, every sink: the Litracer log too
        _no_secret(rx, ep)


def test_each_ddp_rank_exports_its_own(s3_dataset, tmp_path):
    ep = s3_dataset
    with OTLPReceiver() as rx:
        procs = []
        for rank in range(2):
            env = _env(rx, ep, tmp_path / str(rank), WORLD_SIZE="2", RANK=str(rank), LOCAL_RANK=str(rank))
            env["STREAMSCOPE_RUN_ID"] = "run-42"
            procs.append(
                subprocess.Popen(
                    [sys.executable, SCRIPT, "enable", ep.url("ds"), "fork"],
                    env=env,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                )
            )
        try:
            for p in procs:
                _out, err = p.communicate(timeout=240)
                assert p.returncode == 0, err[-3000:]
        finally:  # a rank that failed leaves none running behind it (nor its pipes open)
            for p in procs:
                if p.poll() is None:
                    p.kill()
                p.communicate(timeout=30)
        pts = rx.wait_for(
            "metrics",
            lambda ps: {p.attributes.get("rank") for p in ps if p.name == M.LOADER_BATCHES.name} == {"0", "1"},
            timeout=30,
        )
        ranks = {p.resource["streamscope.rank"] for p in pts}
        assert ranks == {0, 1} and {p.resource["streamscope.run.id"] for p in pts} == {"run-42"}
        spans = rx.wait_for("traces", lambda s: {x.attributes.get("streamscope.rank") for x in s} >= {0, 1})
        assert {s.resource["streamscope.rank"] for s in spans if s.name == "epoch"} == {0, 1}


@pytest.mark.parametrize("fault", [{"hang": True}, {"status": 503}], ids=["hanging", "5xx"])
def test_a_failing_endpoint_never_stops_the_training_loop(fault, s3_dataset, tmp_path):
    ep = s3_dataset
    with OTLPReceiver() as rx:
        rx.set_fault(**fault)
        env = _env(
            rx,
            ep,
            tmp_path,
            SCENARIO_NO_FLUSH="1",
            OTEL_EXPORTER_OTLP_TIMEOUT="2000",
            STREAMSCOPE_OTEL_EXIT_TIMEOUT="1",
        )
        out = subprocess.run(
            [sys.executable, SCRIPT, "enable", ep.url("ds"), "fork"],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert out.returncode == 0, out.stderr[-3000:]
        got = json.loads(out.stdout.strip().splitlines()[-1])
        assert got["batches"] == 40
        said = [line for line in out.stderr.splitlines() if line.startswith("streamscope telemetry:")]
        assert 1 <= len(said) <= 4 and len(set(said)) == len(said), out.stderr  # each kind of failure said once
        assert rx.requests  # it did try
        rx.clear_fault()


def test_optimize_workers_hand_their_spans_to_the_main_process(tmp_path):
    code = """
import json, os, sys
import streamscope
from tests.integration._fns import sample
h = streamscope.enable_telemetry(trace_level="chunk")
streamscope.optimize(sample, list(range(200)), output_dir=sys.argv[1], chunk_size=20, num_workers=2)
streamscope.flush_tracer(wait_workers=20)
h.force_flush(10)
print(json.dumps({"pid": os.getpid()}))
"""
    with OTLPReceiver() as rx:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "STREAMSCOPE_", "LITDATA_TRACE"))}
        env.update(
            PYTHONPATH=os.pathsep.join([os.path.join(ROOT, "src"), ROOT]),
            OTEL_EXPORTER_OTLP_ENDPOINT=rx.url,
            OTEL_BSP_SCHEDULE_DELAY="100",
            OTEL_METRIC_EXPORT_INTERVAL="200",
        )
        out = subprocess.run(
            [sys.executable, "-c", code, str(tmp_path / "out")], env=env, capture_output=True, text=True, timeout=180
        )
        assert out.returncode == 0, out.stderr[-3000:]
        main = json.loads(out.stdout.strip().splitlines()[-1])["pid"]
        spans = rx.wait_for("traces", lambda s: any(x.name == "chunk_write" for x in s))
        (opt,) = [s for s in spans if s.name == "optimize"]
        writes = [s for s in spans if s.name == "chunk_write"]
        assert opt.attributes["process.pid"] == main and opt.parent_span_id is None
        assert {s.attributes["process.pid"] for s in writes} - {main}  # the workers' spans, exported by the main
        assert all(s.trace_id == opt.trace_id for s in writes)  # inside the optimize span's trace
