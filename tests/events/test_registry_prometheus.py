"""The OpenTelemetry-to-Prometheus name translation (registry.prometheus_name), against the spec's rules."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streamscope.events.registry import (
    ATTRIBUTES,
    METRICS,
    PROMETHEUS_TYPES,
    Instrument,
    M,
    prometheus_label,
    prometheus_name,
    prometheus_unit,
    translate_name,
)

C, U, H, G = Instrument.COUNTER, Instrument.UP_DOWN_COUNTER, Instrument.HISTOGRAM, Instrument.GAUGE
_VALID = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")


@pytest.mark.parametrize(
    "name, unit, instrument, want",
    [
        # the OpenTelemetry Collector's translator examples (pkg/translator/prometheus README)
        ("(lambda).function.executions(#)", "", G, "lambda_function_executions"),
        ("system.filesystem.usage", "By", G, "system_filesystem_usage_bytes"),
        ("system.network.dropped", "{packets}", G, "system_network_dropped"),
        ("system.network.dropped", "packets", G, "system_network_dropped_packets"),
        ("system.memory.utilization", "1", G, "system_memory_utilization_ratio"),
        ("system.network.io", "By", C, "system_network_io_bytes_total"),
        ("system.network.io", "By/s", G, "system_network_io_bytes_per_second"),
        # abbreviations spelled out; the unit before the type suffix; _total added once
        ("http.server.duration", "ms", H, "http_server_duration_milliseconds"),
        ("rpc.calls", "{call}", C, "rpc_calls_total"),
        ("rpc.calls.total", "{call}", C, "rpc_calls_total"),
        ("queue.bytes", "By", U, "queue_bytes"),  # the name already holds the unit; an up-down counter: no _total
        ("ratio.thing", "1", C, "ratio_thing_total"),  # "1" is a ratio on gauges only
        ("2xx.responses", "{response}", C, "_2xx_responses_total"),  # a name cannot start with a digit
        ("a..b__c", "s", G, "a_b_c_seconds"),
    ],
)
def test_translation_follows_the_spec(name, unit, instrument, want):
    assert translate_name(name, unit, instrument) == want


def test_the_registry_s_names():
    assert prometheus_name(M.LOADER_WAIT) == "streamscope_loader_wait_seconds_total"
    assert prometheus_name(M.LOADER_WAIT_DURATION) == "streamscope_loader_wait_duration_seconds"
    assert prometheus_name(M.DOWNLOAD_BYTES) == "streamscope_download_bytes_total"
    assert prometheus_name(M.CACHE_SIZE) == "streamscope_cache_size_bytes"
    assert prometheus_name(M.DOWNLOAD_IN_FLIGHT) == "streamscope_download_in_flight"
    assert prometheus_name(M.LOADER_SAMPLES) == "streamscope_loader_samples_total"
    assert prometheus_name(M.KNOB_VALUE) == "streamscope_knob_value"


def test_every_registry_name_is_valid_unique_and_typed():
    names = [prometheus_name(m) for m in METRICS]
    assert len(set(names)) == len(names)
    # a histogram's series must not collide with another metric's name
    series = {f"{n}{s}" for m, n in zip(METRICS, names) if m.instrument is H for s in ("_bucket", "_sum", "_count")}
    assert not series & set(names)
    for m, n in zip(METRICS, names):
        assert _VALID.fullmatch(n) and "__" not in n, n
        assert n.endswith("_total") == (m.instrument is C), n
        assert PROMETHEUS_TYPES[m.instrument] in ("counter", "gauge", "histogram")
        if m.unit == "s":
            assert "_seconds" in n
    assert {prometheus_label(a) for a in ATTRIBUTES} == set(ATTRIBUTES)


def test_units():
    assert prometheus_unit("s", C) == "seconds" and prometheus_unit("By", G) == "bytes"
    assert prometheus_unit("{chunk}", U) == "" and prometheus_unit("1", G) == "ratio" and prometheus_unit("1", C) == ""
    assert prometheus_unit("By/s", G) == "bytes_per_second" and prometheus_unit("{packet}/s", G) == "per_second"


@given(
    st.text(min_size=1, max_size=30).filter(lambda s: any(c.isascii() and c.isalnum() for c in s)),
    st.sampled_from(["", "s", "By", "1", "{x}", "By/s", "ms", "weird unit"]),
    st.sampled_from(list(Instrument)),
)
def test_any_name_becomes_a_valid_prometheus_name(name, unit, instrument):
    out = translate_name(name, unit, instrument)
    assert _VALID.fullmatch(out), out
    assert "__" not in out and not out.endswith("_")
    assert out.endswith("_total") == (instrument is C)


@given(st.text(min_size=1, max_size=20).filter(lambda s: any(c.isascii() and c.isalnum() for c in s)))
def test_any_attribute_becomes_a_valid_label(attr):
    out = prometheus_label(attr)
    assert re.fullmatch(r"[a-zA-Z_][a-zA-Z0-9_]*", out) and not out.startswith("__"), out
