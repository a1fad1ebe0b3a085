"""The real Prometheus scrapes a prometheus_client endpoint and answers queries; promtool checks PromQL."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from tests.support.prometheus_server import (
    PrometheusServer,
    PromQLError,
    free_port,
    promtool_check_rules,
    scrape_config,
    substitute_grafana_vars,
)


class _Endpoint:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.samples = Counter("streamscope_test_samples", "samples", ["stage"], registry=self.registry)
        self.depth = Gauge("streamscope_test_depth", "queue depth", registry=self.registry)
        self.latency = Histogram(
            "streamscope_test_latency_seconds", "latency", buckets=(0.01, 0.1, 1.0), registry=self.registry
        )
        self.port = free_port()
        self.server, self.thread = start_http_server(self.port, addr="127.0.0.1", registry=self.registry)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def endpoint() -> Iterator[_Endpoint]:
    ep = _Endpoint()
    ep.samples.labels("decode").inc(96)
    ep.depth.set(7)
    for v in (0.005, 0.05, 0.5):
        ep.latency.observe(v)
    yield ep
    ep.close()


@pytest.fixture(scope="module")
def prom(endpoint: _Endpoint) -> Iterator[PrometheusServer]:
    with PrometheusServer([f"127.0.0.1:{endpoint.port}"]) as p:
        yield p


@pytest.mark.slow  # the first scrape is queryable ~6 s after Prometheus starts
def test_query_returns_the_scraped_values(prom: PrometheusServer, endpoint: _Endpoint) -> None:
    (s,) = prom.wait_for_series("streamscope_test_samples_total", timeout=20)
    assert s.value == 96
    assert s.labels == {
        "__name__": "streamscope_test_samples_total",
        "stage": "decode",
        "job": "streamscope",
        "instance": f"127.0.0.1:{endpoint.port}",
    }
    assert [x.value for x in prom.query("streamscope_test_depth")] == [7]
    (q,) = prom.query("histogram_quantile(0.5, sum by (le) (streamscope_test_latency_seconds_bucket))")
    assert 0.01 < q.value <= 0.1
    assert prom.query("scalar(sum(up))")[0].value == 1
    endpoint.samples.labels("decode").inc(4)
    prom.wait_for_series("streamscope_test_samples_total", timeout=10, predicate=lambda r: r and r[0].value == 100)


@pytest.mark.slow
def test_targets_report_the_endpoint_up(prom: PrometheusServer, endpoint: _Endpoint) -> None:
    prom.wait_for_series("up", timeout=20)
    (t,) = prom.targets()
    assert (t["job"], t["scrape_url"], t["health"], t["last_error"]) == (
        "streamscope",
        f"http://127.0.0.1:{endpoint.port}/metrics",
        "up",
        "",
    )


@pytest.mark.slow
def test_refused_query_raises_with_prometheus_message(prom: PrometheusServer) -> None:
    with pytest.raises(PromQLError, match="parse error"):
        prom.query("sum by (job (up)")


@pytest.mark.slow
def test_wait_for_series_times_out_with_the_targets(prom: PrometheusServer) -> None:
    # run first on its worker, the test met a Prometheus that had not discovered its target yet ("targets []")
    deadline = time.monotonic() + 20
    while not prom.targets() and time.monotonic() < deadline:
        time.sleep(0.1)
    with pytest.raises(TimeoutError, match=r"'no_such_metric' did not match within 0.3 s.*health"):
        prom.wait_for_series("no_such_metric", timeout=0.3)


def test_a_config_prometheus_refuses_is_an_error_with_its_log(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match=r"did not become ready.*\n.*(?i:error)"):
        PrometheusServer({"bad job": ["127.0.0.1:1"]}, scrape_interval="fast", workdir=tmp_path)


def test_stop_ends_the_process_and_removes_its_directory() -> None:
    prom = PrometheusServer([])
    try:
        workdir, proc = prom.workdir, prom._proc
        assert proc is not None and workdir.is_dir()
    finally:
        prom.stop()
    assert proc.returncode is not None and not workdir.exists()
    with pytest.raises(ConnectionRefusedError):  # nothing listens on its port any more
        socket.create_connection(("127.0.0.1", prom.port), timeout=2).close()


def test_scrape_config_lists_every_job() -> None:
    cfg = scrape_config({"a": ["127.0.0.1:1"], "b": ["127.0.0.1:2", "127.0.0.1:3"]}, "2s")
    assert '"job_name": "b"' in cfg and '"127.0.0.1:3"' in cfg and '"scrape_interval": "2s"' in cfg


# --------------------------------------------------------------------------------------------------
# promtool
# --------------------------------------------------------------------------------------------------

GOOD = [
    'sum by (job) (rate(streamscope_loader_wait_seconds_total{job=~"$job", rank=~"$rank"}[$__rate_interval]))',
    'histogram_quantile(0.99, sum by (le) (rate(x_bucket{dataset=~"${dataset:regex}"}[$__interval])))',
    "max(x) / on() group_left sum(y)",
]
BROKEN = [
    "sum by (job (rate(x_total[1m]))",  # grouping never closed
    "rate(x_total)",  # rate of an instant vector
]


def test_promtool_passes_good_expressions() -> None:
    assert promtool_check_rules(GOOD) == {}


def test_promtool_flags_each_broken_expression_and_only_those() -> None:
    errors = promtool_check_rules(GOOD + BROKEN)
    assert set(errors) == set(BROKEN)
    assert "parse error" in errors[BROKEN[0]] and "grouping opts" in errors[BROKEN[0]]
    assert "range vector" in errors[BROKEN[1]]


def test_promtool_without_substitution_refuses_grafana_variables() -> None:
    (err,) = promtool_check_rules(GOOD[:1], substitute=False).values()
    assert "parse error" in err


def test_substitute_grafana_vars() -> None:
    assert substitute_grafana_vars('rate(x{job=~"$job",rank=~"${rank}"}[$__rate_interval])') == (
        'rate(x{job=~".*",rank=~".*"}[1m])'
    )
    assert substitute_grafana_vars('x{d=~"${dataset:regex}"}[$__range] * $__interval_ms', {"dataset": "a|b"}) == (
        'x{d=~"a|b"}[1m] * 60000'
    )
    with pytest.raises(ValueError, match=r"\$__unknown"):
        substitute_grafana_vars("x[$__unknown]")
