"""Every expression of the dashboard returns data from the real Prometheus that scraped a real streaming run.

The run: a StreamingDataLoader with two forked workers reading an S3 dataset (the moto server) so that the
download metrics exist, this process serving its Prometheus endpoint, Prometheus 2.42 scraping it every second.
The S3 is reached through the fault proxy (every request 50 ms slower, 5% of GETs answered 503 SlowDown) and the
cache holds four chunks, so every epoch downloads, retries and evicts: the workers' gauges (downloads in flight,
prefetch depth) are served whenever a scrape comes, not only in the first epoch. The metrics being on, the loader
starts the capacity model's observer (tune/observe.py), whose gauges the "Is the wait the loader's or the
storage's?" row draws. Halfway, a live knob moves as
the tuner would move it, so the "Tuner decisions" annotation has a change to find.
Then each panel's and annotation's expression, with Grafana's variables as the dashboard's "All" (``.*``) and
``$__rate_interval``/``$__range`` as 1m, must return at least one series, and each variable at least one value.
"""

from __future__ import annotations

import gc
import os
import threading
import time

import pytest

from streamscope._core import config
from streamscope.engine.dataloader import StreamingDataLoader
from streamscope.engine.dataset import StreamingDataset
from streamscope.events.registry import M, prometheus_name
from tests.dashboards.dashboard_json import expressions, load, panels, variable_promql, variables
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

    # loaders earlier tests of this process left for the collector serve their series until collected (a second
    # dataset label reached Prometheus in a CI run at 7d99f27): this run's endpoint serves this run's loader
    gc.collect()
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
            # the capacity model's gauges (tune/observe.py: the observer a loader starts with metrics on) come
            # after its first windows: the "Is the wait the loader's or the storage's?" row's panels read them
            prom.wait_for_series(prometheus_name(M.MODEL_SPEEDUP), timeout=60)
            prom.wait_for_series(f"{prometheus_name(M.STORAGE_UNLOADED_LATENCY)} > 0", timeout=60)
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
            _ratios_divide_like_by_like(prom, checks)
            _knobs_on_the_panel_of_their_unit(prom, doc)
    finally:
        stop.set()
        feeder.join(30)
        endpoint.stop_endpoint()
    assert not feeder.is_alive()


def _balanced(text: str) -> bool:
    return text.count("(") == text.count(")")


def _ratios_divide_like_by_like(prom: PrometheusServer, checks: dict[str, str]) -> None:
    """Each side of every ratio, run on its own with a dataset chosen, returns the same label sets as the other:
    each numerator series has its denominator, and the chosen dataset narrows both sides or neither. Chosen: the
    dataset the run read, and one this rank did not read (another job's, in a shared Prometheus), which empties a
    side filtered by ``$dataset`` while the other (the wait has no dataset label) still answers (issue 31, item 11).
    """
    # the dataset this run read ("ds", its input directory's last part); a loader an earlier test of the process
    # left uncollected may serve its own beside it, which only adds a third dataset to the checks' cases
    one = "ds"
    assert one in {s.labels["dataset"] for s in prom.query(prometheus_name(M.LOADER_BATCHES))}
    seen = 0
    for where, expr in checks.items():
        if "\n  / " not in expr:
            continue
        num, den = expr.split("\n  / ", 1)
        if not (_balanced(num) and _balanced(den)):
            continue  # the ratio inside a max/avg over ranks: the same as the panel's own, checked there
        for dataset in (one, "not-read-here"):
            sides = [prom.query(substitute_grafana_vars(side, {"dataset": dataset})) for side in (num, den)]
            labels = [{frozenset(s.labels.items()) for s in side} for side in sides]
            assert labels[0] and labels[0] == labels[1], f"{where}, dataset {dataset}: {labels[0]} / {labels[1]}"
        seen += 1
    assert seen >= 3  # the wait and the decode CPU per batch, and the cache's hit ratio


def _knobs_on_the_panel_of_their_unit(prom: PrometheusServer, doc: dict) -> None:
    """The knob panels of a real scrape: the bytes panel has the byte knobs and only them, the counts panel the
    others (the prefetch depth that moved among them)."""
    live = {row["name"]: row["unit"] for row in config.table() if row["live"]}
    got: dict[str, set[str]] = {}
    for p in panels(doc):
        if p.get("title", "").startswith("Live knob values"):
            (t,) = p["targets"]
            got[p["fieldConfig"]["defaults"]["unit"]] = {
                s.labels["knob"] for s in prom.query(substitute_grafana_vars(t["expr"]))
            }
    assert got["bytes"] and all(live[k] == "bytes" for k in got["bytes"]), got
    assert KNOB in got["short"] and all(live[k] != "bytes" for k in got["short"]), got
