"""The OTEL_* variables as the OpenTelemetry specification defines them; a malformed one is an error naming it."""

from __future__ import annotations

import string
from urllib.parse import quote

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streamscope._core.errors import TelemetryConfigError
from streamscope.telemetry import otlp_config
from streamscope.telemetry.otlp_config import load


def test_defaults_are_the_specifications():
    cfg = load({})
    assert cfg.traces.protocol == cfg.metrics.protocol == "http/protobuf"
    assert cfg.traces.endpoint == "http://localhost:4318/v1/traces"
    assert cfg.metrics.endpoint == "http://localhost:4318/v1/metrics"
    assert cfg.traces.timeout_s == 10.0 and cfg.metric_interval_s == 60.0 and cfg.metric_timeout_s == 30.0
    assert (cfg.span_delay_s, cfg.span_queue, cfg.span_batch) == (5.0, 2048, 512)
    assert cfg.traces.exporters == ("otlp",) and not cfg.disabled
    assert cfg.traces.compression == "gzip"  # streamscope's choice where the variable is unset


def test_base_endpoint_gets_signal_paths_and_signal_endpoints_are_used_as_they_are():
    cfg = load(
        {
            "OTEL_EXPORTER_OTLP_ENDPOINT": "https://collector:4318/prefix/",
            "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": "http://metrics:9999/custom",
        }
    )
    assert cfg.traces.endpoint == "https://collector:4318/prefix/v1/traces"
    assert cfg.metrics.endpoint == "http://metrics:9999/custom"
    grpc = load({"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317"})
    assert grpc.traces.endpoint == "http://c:4317" and grpc.traces.protocol == "grpc"
    assert load({"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}).traces.endpoint == "http://localhost:4317"


def test_signal_variables_win_over_shared_ones_and_arguments_over_both():
    env = {
        "OTEL_EXPORTER_OTLP_TIMEOUT": "2000",
        "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT": "500",
        "OTEL_EXPORTER_OTLP_HEADERS": "a=1,b=x%20y",
        "OTEL_EXPORTER_OTLP_METRICS_HEADERS": "c=3",
        "OTEL_EXPORTER_OTLP_COMPRESSION": "none",
        "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL": "grpc",
    }
    cfg = load(env)
    assert cfg.traces.timeout_s == 0.5 and cfg.metrics.timeout_s == 2.0  # milliseconds, as the specification says
    assert cfg.traces.headers == {"a": "1", "b": "x y"} and cfg.metrics.headers == {"c": "3"}
    assert (
        cfg.traces.compression == "none" and cfg.metrics.protocol == "grpc" and cfg.traces.protocol == "http/protobuf"
    )
    arg = load(env, timeout=3, headers={"d": "4"}, compression="gzip", endpoint="http://h:1", protocol="http/protobuf")
    assert arg.traces.timeout_s == 3.0 and arg.traces.headers == {"a": "1", "b": "x y", "d": "4"}
    assert arg.metrics.endpoint == "http://h:1/v1/metrics" and arg.metrics.protocol == "http/protobuf"


def test_timeout_zero_means_no_limit():
    assert load({"OTEL_EXPORTER_OTLP_TIMEOUT": "0"}).traces.timeout_s == otlp_config.NO_LIMIT_S


def test_resource_precedence_service_name_and_types():
    env = {"OTEL_RESOURCE_ATTRIBUTES": "service.name=from-attrs,team=ml,host.name=h%2F1", "OTEL_SERVICE_NAME": "svc"}
    res = load(env, default_resource={"service.name": "streamscope", "streamscope.rank": 3, "host.name": "h"}).resource
    assert res == {"service.name": "svc", "team": "ml", "host.name": "h/1", "streamscope.rank": 3}
    res2 = load(env, service_name="arg", resource_attributes_={"team": "ops"}).resource
    assert res2["service.name"] == "arg" and res2["team"] == "ops"


def test_sdk_disabled_and_exporters_none():
    assert load({"OTEL_SDK_DISABLED": "TRUE"}).disabled
    assert not load({"OTEL_SDK_DISABLED": "false"}).disabled
    cfg = load({"OTEL_TRACES_EXPORTER": "none", "OTEL_METRICS_EXPORTER": "otlp,console"})
    assert cfg.traces.exporters == () and cfg.metrics.exporters == ("otlp", "console")


def _exported(cfg: otlp_config.OTLPConfig) -> tuple[tuple[str, ...], tuple[str, ...]]:
    return cfg.traces.exporters, cfg.metrics.exporters


@pytest.mark.parametrize(
    ("env", "kw", "want"),
    [
        ({}, {}, ((), ())),  # nothing configured: Prometheus alone, no export to localhost:4318
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, {}, (("otlp",), ("otlp",))),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces"}, {}, (("otlp",), ())),
        ({"OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": "http://c:4318/v1/metrics"}, {}, ((), ("otlp",))),
        ({"OTEL_TRACES_EXPORTER": "otlp"}, {}, (("otlp",), ())),  # the exporter variable, as the spec says
        ({"OTEL_METRICS_EXPORTER": "console"}, {}, ((), ("console",))),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_METRICS_EXPORTER": "none"}, {}, (("otlp",), ())),
        ({}, {"endpoint": "http://c:4318"}, (("otlp",), ("otlp",))),
        ({}, {"protocol": "grpc"}, (("otlp",), ("otlp",))),
        ({}, {"headers": {"k": "v"}}, (("otlp",), ("otlp",))),
        ({"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_SERVICE_NAME": "x"}, {}, ((), ())),  # no endpoint named
    ],
)
def test_without_the_default_a_signal_is_exported_only_when_configured(env, kw, want):
    assert _exported(load(env, otlp_default=False, **kw)) == want
    # with the default (enable_telemetry() asked for nothing else), an unconfigured signal goes to localhost:4318
    full = _exported(load(env, **kw))
    assert all(w == f or (w == () and f == ("otlp",)) for w, f in zip(want, full)), full


@pytest.mark.parametrize(
    ("var", "value", "words"),
    [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "localhost:4318", "scheme http or https"),
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://", "scheme http or https"),
        ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://h:notaport/v1/traces", "not a URL"),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json", "http/protobuf or grpc"),
        ("OTEL_EXPORTER_OTLP_METRICS_PROTOCOL", "thrift", "not an OTLP protocol"),
        ("OTEL_EXPORTER_OTLP_TIMEOUT", "10s", "milliseconds"),
        ("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "-5", "non-negative"),
        ("OTEL_EXPORTER_OTLP_COMPRESSION", "brotli", "gzip or none"),
        ("OTEL_EXPORTER_OTLP_INSECURE", "yes", "true or false"),
        ("OTEL_EXPORTER_OTLP_CERTIFICATE", "/no/such/ca.pem", "no such file"),
        ("OTEL_SDK_DISABLED", "1", "true or false"),
        ("OTEL_METRIC_EXPORT_INTERVAL", "0", "positive"),
        ("OTEL_METRIC_EXPORT_INTERVAL", "sixty", "milliseconds"),
        ("OTEL_BSP_MAX_QUEUE_SIZE", "-1", "above 0"),
        ("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "4096", "must not exceed OTEL_BSP_MAX_QUEUE_SIZE"),
        ("OTEL_TRACES_EXPORTER", "zipkin", "unknown exporter"),
        ("OTEL_METRICS_EXPORTER", "prometheus", "prometheus_port"),
        ("OTEL_METRICS_EXPORTER", "none,otlp", "cannot be combined"),
        ("OTEL_RESOURCE_ATTRIBUTES", "team=ml,broken", "entry 2 is not key=value"),
        ("OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE", "sometimes", "cumulative"),
    ],
)
def test_a_malformed_variable_is_an_error_naming_it(var, value, words):
    with pytest.raises(TelemetryConfigError) as err:
        load({var: value})
    assert str(err.value).startswith(f"{var}:") and words in str(err.value)
    assert isinstance(err.value, ValueError)


def test_a_malformed_header_never_shows_its_values():
    secret = "Bearer s3cr3t-token"
    with pytest.raises(TelemetryConfigError) as err:
        load({"OTEL_EXPORTER_OTLP_HEADERS": f"authorization={quote(secret)},{secret}"})
    assert "OTEL_EXPORTER_OTLP_HEADERS" in str(err.value) and "s3cr3t" not in str(err.value)
    assert "s3cr3t" not in repr(load({"OTEL_EXPORTER_OTLP_HEADERS": "api-key=s3cr3t"}).traces)


@pytest.mark.parametrize(
    ("kw", "words"),
    [
        ({"timeout": -1}, "timeout"),
        ({"timeout": "10"}, "timeout"),
        ({"metric_export_interval": 0}, "metric_export_interval"),
        ({"endpoint": "collector:4318"}, "endpoint"),
        ({"service_name": " "}, "service_name"),
        ({"protocol": "udp"}, "protocol"),
    ],
)
def test_a_bad_argument_is_an_error_naming_it(kw, words):
    with pytest.raises(TelemetryConfigError, match=words):
        load({}, **kw)


def test_redact_url_drops_userinfo_and_query():
    assert otlp_config.redact_url("https://user:pw@host:4318/v1/traces?token=x") == "https://host:4318/v1/traces"


_key = st.text(string.ascii_letters + string.digits + "._-", min_size=1, max_size=12)
_value = st.text(min_size=0, max_size=20)


@given(st.dictionaries(_key, _value, max_size=6))
def test_pairs_round_trip_through_percent_encoding(pairs):
    raw = ",".join(f"{k}={quote(v, safe='')}" for k, v in pairs.items())
    assert otlp_config.parse_pairs("X", raw, "pairs") == pairs  # encoded blanks are kept, bare ones trimmed
