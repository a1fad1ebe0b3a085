"""Every expression of the dashboard returns data from the real Prometheus that scraped a real streaming run.

The run: a StreamingDataLoader with two forked workers reading an S3 dataset (the moto server) so that the
download metrics exist, this process serving its Prometheus endpoint, Prometheus 2.42 scraping it every second.
The S3 is reached through the fault proxy (every request 50 ms slower, 5% of GETs answered 503 SlowDown) and the
cache holds four chunks, so every epoch downloads, retries and evicts: the workers' gauges (downloads in flight,
prefetch depth) are served whenever a scrape comes, not only in the first epoch. Halfway, a live knob moves as
the tuner would move it, so the "Tuner decisions" annotation has a change to find.
Then each panel's and annotation's expression, with Grafana's variables as the dashboard's "All" (``.*``) and
``$__rate_interval``/``$__range`` as 1m, must return at least one series, and each variable at least one value.
"""

from __future__ import annotations

import os
import threading
import time

import pytest

from streamscope._core import config
from streamscope.engine.dataloader import StreamingDataLoader
from streamscope.engine.dataset import StreamingDataset
from streamscope.events.registry import M, prometheus_name
from tests.dashboards.dashboard_json import expressions, load, variable_promql, variables
from tests.engine._data import image_sample, write_dataset
from tests.support.prometheus_server import PrometheusServer, substitute_grafana_vars
from tests.support.tracing import clean_tracer  # noqa: F401

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("clean_tracer")]

KNOB = "prefetch_depth"  # a live knob (docs/knobs.md): what the tuner moves


def _feed(loader: StreamingDataLoader, stop: threading.Event, errors: list[BaseException]) -> None:
    """Iterate epoch after epoch, slowly, so that the workers (and their prefetchers' gauges) stay alive."""
    try:
        while not stop.is_set():
            for _batch in loader:
                if stop.wait(0.01):
                    break
    except BaseException as e:  # handed to the test's thread
        errors.append(e)


def test_every_dashboard_expression_returns_data_from_a_scraped_run(tmp_path, s3_server, fault_proxy):
    from streamscope.telemetry import prometheus as endpoint

    local = write_dataset(str(tmp_path / "ds"), 240, image_sample, chunk_size=10)
    client = s3_server.boto3_client()
    for name in os.listdir(local):
        client.upload_file(os.path.join(local, name), s3_server.bucket, f"ds/{name}")
    chunk = max(os.path.getsize(os.path.join(local, n)) for n in os.listdir(local) if n.endswith(".bin"))
    fault_proxy.fixed_delay_s = 0.05
    fault_proxy.configure(error_rate=0.05, methods=("GET",))
    ep = fault_proxy.s3
    ds = StreamingDataset(
        ep.url("ds"),
        cache_dir=str(tmp_path / "cache"),
        storage_options=ep.storage_options(),
        max_cache_size=4 * chunk,
    )
    loader = StreamingDataLoader(ds, batch_size=8, num_workers=2)

    os.environ["STREAMSCOPE_METRICS_INTERVAL"] = "0.25"  # clean_tracer restores the environment
    port = endpoint.start_endpoint(0)
    assert port
    stop, errors = threading.Event(), []
    feeder = threading.Thread(target=_feed, args=(loader, stop, errors), daemon=True)
    try:
        with PrometheusServer([f"127.0.0.1:{port}"]) as prom:
            feeder.start()
            batches = prometheus_name(M.LOADER_BATCHES)
            prom.wait_for_series(f"{batches} > 0", timeout=30)
            before = config.get(KNOB)
            time.sleep(1.5)  # the old value in at least one more scrape
            config.set_value(KNOB, int(before or 0) + 3)
            prom.wait_for_series(f"changes({prometheus_name(M.KNOB_VALUE)}{{knob={KNOB!r}}}[1m]) > 0", timeout=20)

            doc = load()
            checks = dict(expressions(doc))
            for name, var in variables(doc).items():
                if var["type"] == "query":
                    checks[f"variable {name}"] = variable_promql(var["query"])[0]
            empty: dict[str, str] = {}
            for where, expr in checks.items():
                promql = substitute_grafana_vars(expr)
                try:
                    prom.wait_for_series(promql, timeout=10)
                except TimeoutError:
                    empty[where] = promql
            assert not errors, errors
            assert not empty, "no series for:\n" + "\n".join(f"{w}: {q}" for w, q in empty.items())
    finally:
        stop.set()
        feeder.join(30)
        endpoint.stop_endpoint()
    assert not feeder.is_alive()
