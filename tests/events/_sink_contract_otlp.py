"""The OTLP leg of the sink contract, in a process of its own: ``python _sink_contract_otlp.py``.

OpenTelemetry's global tracer provider is set once per process, so this runs as an application does:
``streamscope.enable_telemetry()`` (endpoint from ``OTEL_EXPORTER_OTLP_ENDPOINT``, the test's OTLP/HTTP receiver),
then the event bus's span exporter (``streamscope.telemetry.otel:span_sink``, what ``STREAMSCOPE_TRACE_SINKS``
names) gets the contract's events (tests/events/_sink_events.py) and goes through OpenTelemetry's exporter
contract. Prints one JSON line: the pid and what each call returned or raised.
"""

from __future__ import annotations

import json
import os
import sys

sys.path[:0] = [p for p in os.environ.get("SCENARIO_PATH", "").split(os.pathsep) if p]


def _call(fn, *args):  # type: ignore[no-untyped-def]
    try:
        out = fn(*args)
    except Exception as exc:  # noqa: BLE001 - what it raised is the finding
        return f"raised {type(exc).__name__}: {exc}"
    return out.name if hasattr(out, "name") else out


def main() -> None:
    import streamscope
    from streamscope.events.exporters import Exporter
    from streamscope.telemetry.otel import span_sink
    from tests.events._sink_events import batch

    handle = streamscope.enable_telemetry(trace_level="debug")
    sink = span_sink()
    pid = os.getpid()
    out = {
        "pid": pid,
        "exporter": type(sink).__name__,
        "is_exporter": isinstance(sink, Exporter),
        "export": _call(sink.export, batch(pid)),
        "flush": [_call(sink.force_flush, 1000), _call(sink.force_flush)],
        "shutdown": [_call(sink.shutdown), _call(sink.shutdown)],
        "export_after_shutdown": _call(sink.export, batch(pid)),
        "flush_after_shutdown": _call(sink.force_flush, 1000),
    }
    out["delivered"] = handle.force_flush(20)
    handle.shutdown(10)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
