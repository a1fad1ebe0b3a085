"""A real Prometheus (Debian's 2.42) scrapes a real streaming run through the endpoint.

One run in this process, as a training script would do it: the endpoint on a free port, then a local dataset
(two forked workers, three epochs, so the workers restart between epochs) and an S3 dataset on the moto server
behind a proxy that slows every GET (two workers, two epochs: downloads in flight while Prometheus scrapes).
A thread scrapes the endpoint every few ms all along: every scrape answers and parses, and no counter ever goes
down while workers exit and new ones start. Then Prometheus must hold every registry metric the run exercised,
with the run's numbers, few and bounded labels, and no credential anywhere.
"""

from __future__ import annotations

import gc
import os
import threading
import time
import urllib.request

import pytest

from streamscope import events as ev
from streamscope.engine.dataloader import StreamingDataLoader
from streamscope.engine.dataset import StreamingDataset
from streamscope.events.registry import ATTRIBUTES, METRICS, Instrument, M, prometheus_name
from streamscope.telemetry import prometheus as prom
from tests.engine._data import image_sample, write_dataset
from tests.support.prometheus_server import PrometheusServer
from tests.support.tracing import clean_tracer  # noqa: F401
from tests.telemetry.test_prometheus_docs import promql_examples

pytest.importorskip("prometheus_client")
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("clean_tracer")]

LOCAL_N, S3_N, BATCH = 240, 120, 8


def _slow(sample):
    time.sleep(0.002)
    return sample


class _Scraper(threading.Thread):
    """GETs the endpoint in a loop; keeps every failure and each counter's values in order."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.url, self.stop, self.scrapes = url, threading.Event(), 0
        self.failures: list[str] = []
        self.counters: dict[tuple, list[float]] = {}
        self.workers_seen: set[float] = set()

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                with urllib.request.urlopen(self.url, timeout=10) as r:
                    text = r.read().decode()
                for fam in text_string_to_metric_families(text):
                    for s in fam.samples:
                        if fam.type == "counter" and s.name.endswith("_total"):
                            self.counters.setdefault((s.name, tuple(sorted(s.labels.items()))), []).append(s.value)
                        if s.name == prometheus_name(M.LOADER_WORKERS):
                            self.workers_seen.add(s.value)
                self.scrapes += 1
            except Exception as exc:  # noqa: BLE001 - every failure is the finding
                self.failures.append(f"{type(exc).__name__}: {exc}")
            time.sleep(0.02)


def _run(loader: StreamingDataLoader, epochs: int) -> int:
    n = 0
    for _ in range(epochs):
        n += sum(len(b["label"]) for b in loader)
    return n


def test_prometheus_scrapes_a_streaming_run(tmp_path, s3_server, fault_proxy):
    os.environ["STREAMSCOPE_METRICS_INTERVAL"] = "0.2"  # clean_tracer restores the environment
    # loaders earlier tests of this process left for the collector serve their series until collected (a raw
    # loader's samples_total at 0 reached Prometheus under load): this run's endpoint serves this run's loaders
    gc.collect()
    local = write_dataset(str(tmp_path / "images"), LOCAL_N, image_sample, chunk_size=20)
    remote = write_dataset(str(tmp_path / "remote"), S3_N, image_sample, chunk_size=10)
    client = s3_server.boto3_client()
    for name in os.listdir(remote):
        client.upload_file(os.path.join(remote, name), s3_server.bucket, f"shards/{name}")

    port = prom.start_endpoint(0)
    scraper = _Scraper(f"http://127.0.0.1:{port}/metrics")
    t0 = time.time()
    try:
        with PrometheusServer([f"127.0.0.1:{port}"]) as prometheus:
            # Prometheus's first sample takes ~6 s: the run starts once it scrapes, so it sees the run live
            prometheus.wait_for_series(prometheus_name(M.LOADER_WAIT), timeout=30)
            scraper.start()
            t_run = time.time()
            loader = StreamingDataLoader(StreamingDataset(local, transform=_slow), batch_size=BATCH, num_workers=2)
            assert _run(loader, 3) == 3 * LOCAL_N
            ep = fault_proxy.s3
            fault_proxy.delay_s = 0.3
            fault_proxy.configure(delay_rate=1.0, methods=("GET",))  # downloads under way across scrapes
            ds = StreamingDataset(
                ep.url("shards"), cache_dir=str(tmp_path / "cache"), storage_options=ep.storage_options()
            )
            s3_loader = StreamingDataLoader(ds, batch_size=BATCH, num_workers=2)
            assert _run(s3_loader, 2) == 2 * S3_N
            ev.flush()
            time.sleep(1.0)  # the endpoint keeps serving; the scraper sees the last epoch's final numbers
            scraper.stop.set()
            scraper.join(10)

            got = prometheus.wait_for_series(
                f"sum by (dataset) ({prometheus_name(M.LOADER_SAMPLES)})",
                timeout=20,
                # this run's two datasets; a loader an earlier test of this process left uncollected may add its
                # own series (dataset "raw", 0 samples, seen under load): the process serves every live loader's
                predicate=lambda ss: (
                    {s.labels.get("dataset"): s.value for s in ss if s.labels.get("dataset") in ("images", "shards")}
                    == {"images": 3 * LOCAL_N, "shards": 2 * S3_N}
                ),
            )
            window = f"[{int(time.time() - t0) + 60}s]"
            # every registry metric the run exercised is in Prometheus (gauges of workers gone: over the window)
            for m in METRICS:
                want = prometheus_name(m) + ("_count" if m.instrument is Instrument.HISTOGRAM else "")
                assert prometheus.query(f"last_over_time({want}{window})"), (
                    f"{m.name} ({want}) never reached Prometheus"
                )

            def value(expr: str) -> float:
                res = prometheus.query(expr)
                assert res, expr
                return sum(s.value for s in res)

            wait = value(prometheus_name(M.LOADER_WAIT))
            stages = value(f"sum({prometheus_name(M.LOADER_WAIT_STAGE)})")
            assert wait > 0 and stages == pytest.approx(wait, rel=1e-6)  # idle included, settled by the workers
            # what Prometheus holds is what the view says, number for number. The run is over, but a gauge of
            # the last workers (the cache's bytes) falls to 0 only once the main process has seen them exit, which
            # on a loaded machine can come after Prometheus's last scrape: compare until a scrape has caught up.
            deadline = time.monotonic() + 20
            while True:
                view = ev.metrics_view()
                differ = []
                for p in view.points:
                    if p.metric.instrument is Instrument.HISTOGRAM:
                        continue
                    sel = ",".join(f'{k}="{v}"' for k, v in p.attributes)
                    held = value(f"{prometheus_name(p.metric)}{{{sel}}}")
                    if held != pytest.approx(p.value, rel=1e-9, abs=1e-9):
                        differ.append((p.metric.name, p.attributes, held, p.value))
                if not differ or time.monotonic() > deadline:
                    break
                time.sleep(0.5)
            assert not differ, differ  # (name, attributes, in Prometheus, in the view)
            h = view.histogram(M.DOWNLOAD_DURATION)
            assert value(f"{prometheus_name(M.DOWNLOAD_DURATION)}_count") == h.count > 0
            batches = value(prometheus_name(M.LOADER_BATCHES))
            assert batches == 3 * LOCAL_N // BATCH + 2 * S3_N // BATCH
            dl = prometheus_name(M.DOWNLOAD_DURATION)
            assert value(f"{dl}_count") >= S3_N // 10  # every chunk of the S3 set, at least once
            assert value(f"histogram_quantile(0.5, sum by (le) ({dl}_bucket))") >= 0.25  # the proxy's delay
            assert value(prometheus_name(M.DOWNLOAD_BYTES)) > 0
            assert value(prometheus_name(M.CACHE_MISSES)) >= S3_N // 10
            assert value(f"max(max_over_time({prometheus_name(M.DOWNLOAD_IN_FLIGHT)}{window}))") >= 1
            assert value(f"max(max_over_time({prometheus_name(M.LOADER_WORKERS)}{window}))") == 2

            # labels: few, from the registry, bounded values, no credential
            series = prometheus.query('{__name__=~"streamscope_.+"}')
            allowed = set(ATTRIBUTES) | {"__name__", "le", "job", "instance"}
            per_metric: dict[str, int] = {}
            for s in series:
                assert set(s.labels) <= allowed, s.labels
                assert s.labels.get("worker", "0") in ("0", "1")
                if not s.labels["__name__"].startswith(("streamscope_model_", "streamscope_storage_")):
                    assert s.labels.get("dataset", "images") in ("images", "shards"), s.labels
                # the model's gauges are per live loader of the process: an earlier test's loader on this xdist
                # worker that is not collected yet still has its own (e.g. dataset "raw"); bounded all the same
                assert len(s.labels.get("dataset", "")) <= 64, s.labels
                for v in s.labels.values():
                    assert s3_server.secret_key not in v and s3_server.access_key not in v, s.labels
                per_metric[s.labels["__name__"]] = per_metric.get(s.labels["__name__"], 0) + 1
            assert max(per_metric.values()) <= 2 * 30  # a histogram's buckets x 2 datasets at most
            assert all(t["health"] == "up" for t in prometheus.targets())
            # the documented queries answer on a real run (a gauge of workers only while they ran)
            moments = [t_run + i * 0.5 for i in range(int((time.time() - t_run) / 0.5) + 1)]
            for expr in promql_examples():
                assert any(prometheus.query(expr, at=t) for t in moments), (
                    f"docs/telemetry.md: {expr!r} returned nothing"
                )
            up = prometheus.query(f"min_over_time(up{window})")
            assert up and up[0].value == 1  # no failed scrape, workers restarting or not
    finally:
        scraper.stop.set()
        prom.stop_endpoint()

    assert not scraper.failures, scraper.failures[:5]
    assert scraper.scrapes > 20 and 2 in scraper.workers_seen
    for key, values in scraper.counters.items():  # finished workers' numbers stay in: counters never go down
        drops = [a - b for a, b in zip(values, values[1:]) if b < a]
        assert not drops, (key, f"went down {len(drops)} times, by up to {max(drops) if drops else 0}", values[-1])
    assert got
