"""A training process for the OTLP end-to-end tests: ``python tests/telemetry/_scenario.py MODE DATASET START [N]``.

Runs a real ``StreamingDataLoader`` (2 workers, ``START``: fork or spawn) for two epochs over ``DATASET`` (a local
path or ``s3://...``; S3 settings in ``SCENARIO_S3_*``), with OpenTelemetry switched on by ``MODE``:

* ``enable``: ``streamscope.enable_telemetry()`` and the ``OTEL_*`` variables the test set;
* ``app``: the application's own SDK set-up (OTLP/HTTP to ``OTEL_EXPORTER_OTLP_ENDPOINT``) and no streamscope call;
  what is traced comes from ``STREAMSCOPE_TRACE_LEVEL``.

Prints one JSON line: what the process knows of its export (pid, batches, stats).
"""

from __future__ import annotations

import json
import os
import sys
import time

sys.path[:0] = [p for p in os.environ.get("SCENARIO_PATH", "").split(os.pathsep) if p]


def _app_sdk() -> tuple:
    from opentelemetry import metrics, trace
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    res = Resource.create({"service.name": "the-app"})
    tp = TracerProvider(resource=res)
    tp.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(), schedule_delay_millis=100))
    trace.set_tracer_provider(tp)
    reader = PeriodicExportingMetricReader(OTLPMetricExporter(), export_interval_millis=200)
    mp = MeterProvider(resource=res, metric_readers=[reader])
    metrics.set_meter_provider(mp)
    return tp, mp


def main(argv: list[str]) -> None:
    mode, dataset, start = argv[:3]
    epochs = int(argv[3]) if len(argv) > 3 else 2
    app = _app_sdk() if mode == "app" else None
    import streamscope
    from streamscope.engine.dataloader import StreamingDataLoader
    from streamscope.engine.dataset import StreamingDataset

    handle = streamscope.enable_telemetry() if mode == "enable" else None
    opts = {}
    if dataset.startswith("s3://"):
        opts = dict(
            storage_options={
                "endpoint_url": os.environ["SCENARIO_S3_ENDPOINT"],
                "aws_access_key_id": os.environ["SCENARIO_S3_KEY"],
                "aws_secret_access_key": os.environ["SCENARIO_S3_SECRET"],
                "region_name": os.environ.get("SCENARIO_S3_REGION", "us-east-1"),
            },
            cache_dir=os.environ["SCENARIO_CACHE"],
            max_cache_size="1MB",
        )
    ds = StreamingDataset(dataset, **opts)
    loader = StreamingDataLoader(
        ds,
        batch_size=8,
        num_workers=2,
        multiprocessing_context=start,
        persistent_workers=os.environ.get("SCENARIO_PERSISTENT") == "1",
    )
    batches = 0
    t0 = time.perf_counter()
    for _ in range(epochs):
        batches += sum(1 for _ in loader)
    loop_s = time.perf_counter() - t0
    del loader
    streamscope.flush_tracer(wait_workers=20)
    out = {"pid": os.getpid(), "batches": batches, "loop_s": loop_s}
    if handle is not None:
        if os.environ.get("SCENARIO_NO_FLUSH") != "1":
            handle.force_flush(10)
        out["stats"] = handle.stats
        out["installed"] = sorted(handle.installed)
    if app is not None:
        tp, mp = app
        tp.force_flush()
        mp.force_flush()
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
