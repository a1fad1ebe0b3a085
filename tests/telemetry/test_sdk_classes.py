"""The SDK classes of the OTLP pipeline: providers whose fork hook keeps the parent's resource (unless another
processor may export from the child), and a resource that hashes once yet compares as the SDK's."""

from __future__ import annotations

from streamscope.telemetry import otlp_config
from streamscope.telemetry.pipeline import Pipeline


def _pipeline(endpoint: str, **kw) -> Pipeline:
    base = {"OTEL_BSP_SCHEDULE_DELAY": "50", "OTEL_METRIC_EXPORT_INTERVAL": "100000"}
    cfg = otlp_config.load(base, endpoint=endpoint, timeout=1.0, **kw)
    return Pipeline(cfg, set_global=False)


def _child_resources(pipe: Pipeline) -> tuple[str, str, str]:
    """Fork; in the child, whether the tracer and meter providers kept the very resource they had in the parent,
    and the tracer provider's service.instance.id."""
    import os

    tp, mp = pipe.tracer_provider.resource, pipe.meter_provider._sdk_config.resource
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        tp2, mp2 = pipe.tracer_provider.resource, pipe.meter_provider._sdk_config.resource
        os.write(w, f"{tp2 is tp}|{mp2 is mp}|{tp2.attributes.get('service.instance.id')}".encode())
        os._exit(0)
    os.waitpid(pid, 0)
    a, b, c = os.read(r, 4096).decode().split("|")
    return a, b, c


def test_a_forked_child_keeps_the_resource_without_detecting_it_again():
    # the SDK re-detects the process-dependent resource in every forked child (a thread pool each time) and merges it
    # into a new resource; a child of the pipeline exports nothing, so it keeps its parent's
    pipe = _pipeline("http://127.0.0.1:9")
    try:
        parent = pipe.tracer_provider.resource.attributes.get("service.instance.id")
        assert parent
        assert _child_resources(pipe) == ("True", "True", parent)
    finally:
        pipe.shutdown(0.5)


def test_a_forked_child_detects_the_resource_again_when_another_processor_may_export_there():
    from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor

    pipe = _pipeline("http://127.0.0.1:9")
    try:
        pipe.tracer_provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter()))
        parent = pipe.tracer_provider.resource.attributes.get("service.instance.id")
        same_tp, same_mp, child = _child_resources(pipe)
        # the SDK's hook, as without streamscope: the child has its own instance id (the meter provider's is skipped)
        assert (same_tp, same_mp) == ("False", "True") and child not in (parent, "None")
    finally:
        pipe.shutdown(0.5)


def test_the_resource_hashes_and_compares_as_the_sdks():
    from opentelemetry.sdk.resources import Resource

    pipe = _pipeline("http://127.0.0.1:9", service_name="svc")
    try:
        res = pipe.tracer_provider.resource
        plain = Resource(res.attributes, res.schema_url)
        assert res.attributes["service.name"] == "svc"
        assert hash(res) == hash(plain) and res == plain and plain == res
        assert res != Resource({**res.attributes, "service.name": "other"})
        assert pipe.meter_provider._sdk_config.resource is res
    finally:
        pipe.shutdown(0.5)
