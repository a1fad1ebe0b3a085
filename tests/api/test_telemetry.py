"""streamscope.enable_telemetry(): bad input first, never replacing the application's providers, one trace level for
every sink, a bounded exit, the Prometheus switch. Scenarios that set OpenTelemetry's global providers run in their
own process (the API lets a process set each provider once)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time

import pytest

import streamscope
from streamscope import events as ev
from streamscope import recording
from streamscope._core.errors import TelemetryConfigError, TraceConfigError
from streamscope.api import telemetry as api
from tests.support.otlp_receiver import OTLPReceiver
from tests.support.tracing import clean_tracer  # noqa: F401

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _run(
    code: str, env: dict[str, str] | None = None, timeout: float = 120, cwd: str | None = None
) -> tuple[dict, str, float]:
    """Run ``code`` in a fresh interpreter; (the JSON it printed last, its stderr, seconds it took)."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "STREAMSCOPE_", "LITDATA_TRACE"))}
    base["PYTHONPATH"] = os.pathsep.join([os.path.join(ROOT, "src"), ROOT])
    base.update(env or {})
    t0 = time.monotonic()
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=base,
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
    )
    took = time.monotonic() - t0
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1]), out.stderr, took


def test_it_is_public():
    assert streamscope.enable_telemetry is api.enable_telemetry
    assert "enable_telemetry" in dir(streamscope)


@pytest.mark.usefixtures("clean_tracer")
@pytest.mark.parametrize(
    ("env", "kw", "err", "words"),
    [
        ({"OTEL_EXPORTER_OTLP_TIMEOUT": "ten"}, {}, TelemetryConfigError, "OTEL_EXPORTER_OTLP_TIMEOUT"),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "collector:4318"}, {}, TelemetryConfigError, "OTEL_EXPORTER_OTLP_ENDPOINT"),
        ({}, {"trace_level": "loud"}, TraceConfigError, "unknown trace level"),
        ({}, {"prometheus_port": 70000}, TelemetryConfigError, "prometheus_port"),
        ({}, {"metric_export_interval": -1}, TelemetryConfigError, "metric_export_interval"),
    ],
)
def test_bad_input_is_an_error_before_anything_is_set_up(monkeypatch, env, kw, err, words):
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    sinks = os.environ.get("STREAMSCOPE_TRACE_SINKS")
    with pytest.raises(err, match=words):
        streamscope.enable_telemetry(**kw)
    assert os.environ.get("STREAMSCOPE_TRACE_SINKS") == sinks and not (
        recording.RECORDER.trace_cats or recording.RECORDER.metric_cats
    )
    assert api._HANDLE is None or api._HANDLE_PID != os.getpid()


@pytest.mark.usefixtures("clean_tracer")
def test_a_worker_sets_nothing_up(monkeypatch):
    from streamscope.telemetry import otel

    monkeypatch.setattr(otel, "is_rank_main", lambda: False)
    handle = streamscope.enable_telemetry(endpoint="http://127.0.0.1:9")
    assert (
        handle.disabled
        and handle.pipeline is None
        and not (recording.RECORDER.trace_cats or recording.RECORDER.metric_cats)
    )


def test_otel_sdk_disabled_sets_up_no_provider():
    got, _err, _t = _run(
        """
        import json, streamscope
        from opentelemetry import metrics, trace
        h = streamscope.enable_telemetry()
        print(json.dumps([h.disabled, sorted(h.installed), type(trace.get_tracer_provider()).__name__,
                          type(metrics.get_meter_provider()).__name__]))
        """,
        {"OTEL_SDK_DISABLED": "true"},
    )
    assert got == [True, [], "ProxyTracerProvider", "_ProxyMeterProvider"]


def test_the_applications_providers_are_kept_and_receive_streamscope():
    with OTLPReceiver() as rx:
        got, err, _t = _run(
            """
            import json, streamscope
            from opentelemetry import trace
            from opentelemetry.sdk.trace import TracerProvider
            from opentelemetry.sdk.trace.export import SimpleSpanProcessor
            from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
            mine = InMemorySpanExporter()
            tp = TracerProvider()
            tp.add_span_processor(SimpleSpanProcessor(mine))
            trace.set_tracer_provider(tp)
            h = streamscope.enable_telemetry(trace_level="batch")
            from streamscope import events as ev
            from streamscope import recording
            with ev.span("epoch", "epoch", epoch=1):
                pass
            ev.flush()
            h.force_flush(5)
            print(json.dumps([sorted(h.installed), trace.get_tracer_provider() is tp,
                              [s.name for s in mine.get_finished_spans()]]))
            """,
            {"OTEL_EXPORTER_OTLP_ENDPOINT": rx.url, "OTEL_METRIC_EXPORT_INTERVAL": "100"},
        )
        assert got == [["metrics"], True, ["epoch"]]  # streamscope's spans went to the application's provider
        assert "kept the application's TracerProvider" in err
        assert rx.wait_for("metrics", lambda ps: any(p.name.startswith("streamscope.") for p in ps))
        assert not rx.spans()


def test_one_trace_level_for_every_sink(tmp_path):
    log = tmp_path / "trace.log"
    with OTLPReceiver() as rx:
        got, _err, _t = _run(
            f"""
            import json, streamscope
            from streamscope import events as ev
            from streamscope import recording
            streamscope.enable_tracer("batch", log_file={str(log)!r})
            h = streamscope.enable_telemetry()  # no level: the tracer's
            with ev.span("epoch", "epoch", epoch=1):
                with ev.span("download", "download", chunk=1, url="s3://b/chunk-0-1.bin"):
                    pass
            streamscope.flush_tracer()
            h.force_flush(5)
            print(json.dumps(sorted(h.trace_categories)))
            """,
            {"OTEL_EXPORTER_OTLP_ENDPOINT": rx.url},
        )
        assert got == sorted(ev.LEVELS["batch"])
        names = {s.name for s in rx.wait_for("traces")}
        assert names == {"epoch"}  # the download is below the level: in neither sink
        text = log.read_text()
        assert "name: epoch" in text and "name: download" not in text


def test_spans_without_a_trace_log(tmp_path):
    with OTLPReceiver() as rx:
        got, _err, _t = _run(
            """
            import json, os, streamscope
            from streamscope import events as ev
            from streamscope import recording
            h = streamscope.enable_telemetry(trace_level="chunk")
            with ev.span("download", "download", chunk=1, url="s3://b/chunk-0-1.bin"):
                pass
            h.force_flush(5)
            print(json.dumps(os.environ["STREAMSCOPE_TRACE_SINKS"]))
            """,
            {"OTEL_EXPORTER_OTLP_ENDPOINT": rx.url},
            cwd=str(tmp_path),
        )
        assert got == "streamscope.telemetry.otel:span_sink"
        assert [s.name for s in rx.wait_for("traces")] == ["download"]
        assert not list(tmp_path.iterdir())  # no litdata_debug.log: enable_telemetry starts no trace log


@pytest.mark.slow
def test_a_hanging_endpoint_holds_up_exit_at_most_the_exit_timeout():
    with OTLPReceiver() as rx:
        rx.set_fault(hang=True)
        got, err, took = _run(
            """
            import json, time, streamscope
            from streamscope import events as ev
            from streamscope import recording
            h = streamscope.enable_telemetry(trace_level="chunk", timeout=30)
            t0 = time.monotonic()
            for i in range(300):
                with ev.span("download", "download", chunk=i, url=f"s3://b/chunk-0-{i}.bin"):
                    pass
            ev.flush()
            print(json.dumps({"pid": 1, "loop_s": time.monotonic() - t0, "t": time.time()}))
            """,
            {
                "OTEL_EXPORTER_OTLP_ENDPOINT": rx.url,
                "OTEL_BSP_SCHEDULE_DELAY": "50",
                "STREAMSCOPE_OTEL_EXIT_TIMEOUT": "1.5",
            },
        )
        exit_s = time.time() - got["t"]
        # bounds with room for a busy machine, far below what a wait for the hanging endpoint would take (its
        # export timeout is 30 s)
        assert got["loop_s"] < 10.0  # recording never waited for the endpoint
        assert exit_s < 1.5 + 8.0, exit_s  # the exit timeout, not the 30 s export timeout
        rx.clear_fault()


def test_prometheus_port_opens_the_endpoint():
    got, _err, _t = _run(
        """
        import json, urllib.request, streamscope
        h = streamscope.enable_telemetry(prometheus_port=0)
        body = urllib.request.urlopen(f"http://127.0.0.1:{h.prometheus_port}/metrics", timeout=5).read().decode()
        print(json.dumps([h.prometheus_port, "streamscope_loader_wait_seconds_total" in body]))
        """,
        {"OTEL_SDK_DISABLED": "true"},
    )
    assert got[0] > 0 and got[1]


_PROMETHEUS_ONLY = """
import json, sys, time, urllib.request, streamscope
from streamscope.telemetry import otlp_config
# OpenTelemetry's default endpoint, pointed at a receiver of the test: an export there is seen, not merely refused
otlp_config.DEFAULT_HTTP_ENDPOINT = sys.argv[1]
h = streamscope.enable_telemetry(ARGS)
loader = streamscope.StreamingDataLoader(streamscope.StreamingDataset(sys.argv[2]), batch_size=8, num_workers=2)
n = sum(len(b["label"]) for b in loader)
port = h.prometheus_port or int(__import__("os").environ["STREAMSCOPE_PROMETHEUS_PORT"])
body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
dropped = [line for line in body.splitlines() if line.startswith("streamscope_events_export_")]
print(json.dumps({"n": n, "installed": sorted(h.installed), "stats": h.stats, "pipeline": h.pipeline is not None,
                  "served": "streamscope_loader_samples_total{" in body, "dropped": dropped, "t": time.time()}))
"""


def _listen_4318() -> OTLPReceiver | None:
    """A receiver on OpenTelemetry's own default port too (an SDK exporter built without our endpoint goes there),
    when the port is free on this machine."""
    try:
        return OTLPReceiver(port=4318)
    except OSError:
        return None


def _data(tmp_path) -> str:
    from tests.engine._data import image_sample, write_dataset

    return write_dataset(str(tmp_path / "images"), 64, image_sample, chunk_size=16)


@pytest.mark.slow
@pytest.mark.parametrize(
    "args, env",
    [("prometheus_port=0", {}), ("", {"STREAMSCOPE_PROMETHEUS_PORT": "0"})],
    ids=["argument", "variable"],
)
def test_prometheus_alone_exports_no_otlp_and_exits_at_once(tmp_path, args, env):
    """Issue 31: ``enable_telemetry(prometheus_port=...)`` (or the variable) with no OTLP configured sent to
    localhost:4318 ("Connection refused", dropped counts, a 5 s wait at exit)."""
    data = _data(tmp_path)
    default = _listen_4318()
    try:
        with OTLPReceiver() as rx:
            # an export there would hang, and the exit would wait for it the whole exit timeout (100 s): a wait far
            # longer than any busy machine's exit, so the bound below holds at any load and still catches it
            rx.set_fault(hang=True)
            script = tmp_path / "train.py"
            script.write_text(_PROMETHEUS_ONLY.replace("ARGS", args))
            base = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "STREAMSCOPE_", "LITDATA_"))}
            base.update(env, PYTHONPATH=os.pathsep.join([os.path.join(ROOT, "src"), ROOT]))
            base["STREAMSCOPE_OTEL_EXIT_TIMEOUT"] = "100"
            out = subprocess.run(
                [sys.executable, str(script), rx.url, data], env=base, capture_output=True, text=True, timeout=240
            )
            end = time.time()
            assert out.returncode == 0, out.stderr[-3000:]
            got = json.loads(out.stdout.strip().splitlines()[-1])
            assert not rx.requests, [r.path for r in rx.requests]  # nothing sent to the default endpoint
        if default is not None:
            assert not default.requests, [r.path for r in default.requests]
    finally:
        if default is not None:
            default.close()
    assert got["n"] == 64 and got["served"]
    assert got["installed"] == [] and got["stats"] == {} and not got["pipeline"]
    assert got["dropped"] and all(line.endswith(" 0.0") for line in got["dropped"]), got["dropped"]  # none failed
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("streamscope: Prometheus metrics of rank 0 at "), out.stderr
    # exit at once: no export to wait for (one would hang for the 100 s exit timeout); a subprocess's exit took
    # 15-18 s at load ~20 on 2 cores, so the bound is far from both
    assert end - got["t"] < 60.0, end - got["t"]


@pytest.mark.slow
def test_prometheus_with_an_otlp_endpoint_does_both(tmp_path):
    data = _data(tmp_path)
    with OTLPReceiver() as rx, OTLPReceiver() as stray:
        script = tmp_path / "train.py"
        script.write_text(_PROMETHEUS_ONLY.replace("ARGS", "prometheus_port=0, trace_level='chunk'"))
        base = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "STREAMSCOPE_", "LITDATA_"))}
        base.update(
            PYTHONPATH=os.pathsep.join([os.path.join(ROOT, "src"), ROOT]),
            OTEL_EXPORTER_OTLP_ENDPOINT=rx.url,
            OTEL_METRIC_EXPORT_INTERVAL="200",
        )
        out = subprocess.run(
            [sys.executable, str(script), stray.url, data], env=base, capture_output=True, text=True, timeout=120
        )
        assert out.returncode == 0, out.stderr[-3000:]
        got = json.loads(out.stdout.strip().splitlines()[-1])
        assert got["served"] and got["installed"] == ["metrics", "traces"]
        assert rx.wait_for("metrics", lambda ps: any(p.name == "streamscope.loader.samples" for p in ps))
        assert any(s.name == "epoch" for s in rx.spans())
        assert not stray.requests
