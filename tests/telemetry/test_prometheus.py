"""The Prometheus endpoint: the collector's translation of the registry, and where and how it listens."""

from __future__ import annotations

import multiprocessing as mp
import os
import pickle
import socket
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from streamscope import recording
from streamscope._core.errors import ConfigError, PrometheusPortError
from streamscope.events import vocab
from streamscope.events.registry import BUCKETS_S, METRICS, M, prometheus_name
from streamscope.events.view import Histogram, MetricsView, Point
from streamscope.recording.snapshots import MetricsSnapshot
from streamscope.recording.views import build
from streamscope.telemetry import prometheus as prom
from tests.support.tracing import clean_tracer  # noqa: F401

prometheus_client = pytest.importorskip("prometheus_client")
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

PLAIN = (("node", "0"), ("rank", "3"))


def _exposition(view: MetricsView) -> str:
    reg = prometheus_client.CollectorRegistry(auto_describe=False)

    class _C:
        def collect(self):
            return iter(prom.families(view))

    reg.register(_C())
    return prometheus_client.generate_latest(reg).decode()


def _samples(text: str) -> dict[tuple[str, frozenset], float]:
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
    }


def test_counters_gauges_and_histograms_are_translated():
    counts = [0] * (len(BUCKETS_S) + 1)
    counts[0], counts[5], counts[-1] = 2, 3, 1  # 2 at <= 10 us, 3 at <= 500 us, 1 above 60 s
    hist = Histogram(BUCKETS_S, tuple(counts), 6, 75.5, 70.0)
    view = MetricsView(
        (
            Point(M.LOADER_WAIT, PLAIN, 1.25),
            Point(M.LOADER_WAIT_STAGE, tuple(sorted((*PLAIN, ("stage", "download")))), 0.75),
            Point(M.DOWNLOAD_DURATION, PLAIN, 0.0, hist),
            Point(M.DOWNLOAD_IN_FLIGHT, tuple(sorted((*PLAIN, ("worker", "1")))), 2.0),
            Point(M.LOADER_SAMPLES, tuple(sorted((*PLAIN, ("dataset", "images")))), 640.0),
        )
    )
    text = _exposition(view)
    got = _samples(text)
    base = frozenset(dict(PLAIN).items())
    assert got[("streamscope_loader_wait_seconds_total", base)] == 1.25
    assert got[("streamscope_loader_wait_stage_seconds_total", base | {("stage", "download")})] == 0.75
    assert got[("streamscope_download_in_flight", base | {("worker", "1")})] == 2.0
    assert got[("streamscope_loader_samples_total", base | {("dataset", "images")})] == 640.0
    # cumulative buckets, +Inf = count, the sum
    name = "streamscope_download_duration_seconds"
    assert got[(f"{name}_bucket", base | {("le", "1e-05")})] == 2
    assert got[(f"{name}_bucket", base | {("le", "0.00025")})] == 2
    assert got[(f"{name}_bucket", base | {("le", "0.0005")})] == 5
    assert got[(f"{name}_bucket", base | {("le", "60.0")})] == 5
    assert got[(f"{name}_bucket", base | {("le", "+Inf")})] == 6
    assert got[(f"{name}_count", base)] == 6 and got[(f"{name}_sum", base)] == 75.5
    assert "# TYPE streamscope_loader_wait_seconds_total counter" in text
    assert "# TYPE streamscope_download_duration_seconds histogram" in text
    assert "# TYPE streamscope_download_in_flight gauge" in text  # an up-down counter is a gauge
    assert f"# HELP streamscope_loader_wait_seconds_total {M.LOADER_WAIT.description}" in text
    # metrics without a point are left out
    assert "streamscope_cache_hits_total" not in text


def test_a_built_view_serves_every_registry_metric_of_a_rank():
    """What the main process serves before any loader ran: every metric of the rank as a whole, at 0."""
    text = _exposition(build(MetricsSnapshot(), rank=1, node=0))
    names = {s.name for fam in text_string_to_metric_families(text) for s in fam.samples}
    for m in METRICS:
        if set(m.attributes) <= {"rank", "node"}:
            want = prometheus_name(m) + ("_count" if m.instrument.value == "histogram" else "")
            assert want in names, want
    assert "streamscope_knob_value" in names  # the live knobs


def test_credentials_never_reach_a_label():
    bad = "s3://AKIAEXAMPLE:hunter2secret@bucket/x?X-Amz-Signature=abcdef"
    view = MetricsView((Point(M.LOADER_BATCHES, tuple(sorted((*PLAIN, ("dataset", bad)))), 1.0),))
    text = _exposition(view)
    assert "hunter2secret" not in text and "abcdef" not in text and "streamscope_loader_batches_total" in text


def test_counters_and_gauges_are_served_as_the_view_reads_them():
    """The endpoint keeps nothing between scrapes: the view's counters never go down by construction (each
    process's counters only grow; the wait split is settled once per wait and worker), so it serves them as
    they are, and a gauge that goes down is served down."""
    idle = tuple(sorted((*PLAIN, ("stage", "idle"))))
    key = ("streamscope_loader_wait_stage_seconds_total", frozenset(idle))
    for v in (2.0, 1.5, 2.5):  # (a view that went down would be served down: nothing papers over it here)
        assert _samples(_exposition(MetricsView((Point(M.LOADER_WAIT_STAGE, idle, v),))))[key] == v
    gauge = tuple(sorted((*PLAIN, ("worker", "0"))))
    _exposition(MetricsView((Point(M.PREFETCH_DEPTH, gauge, 3.0),)))
    down = _samples(_exposition(MetricsView((Point(M.PREFETCH_DEPTH, gauge, 1.0),))))
    assert down[("streamscope_prefetch_depth", frozenset(gauge))] == 1.0  # gauges go down as they please


def test_series_per_metric_are_capped(capsys):
    pts = tuple(Point(M.KNOB_VALUE, tuple(sorted((*PLAIN, ("knob", f"k{i}")))), float(i)) for i in range(400))
    fams = prom.families(MetricsView(pts))
    assert len(fams) == 1 and len(fams[0].samples) == prom.MAX_SERIES_PER_METRIC
    prom.families(MetricsView(pts))
    err = capsys.readouterr().err
    assert err.count("streamscope_knob_value has 400 series") == 1


# -- the endpoint ----------------------------------------------------------------------------------------------


@pytest.fixture
def endpoint(clean_tracer) -> Iterator[None]:  # noqa: F811
    os.environ.pop("LOCAL_RANK", None)
    try:
        yield
    finally:
        prom.stop_endpoint()


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as r:
        assert r.status == 200
        return r.read().decode()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_port_zero_serves_on_a_free_port_said_aloud(endpoint, capsys):
    assert not recording.RECORDER.metric_cats
    port = prom.start_endpoint(0)
    assert port and prom.endpoint_port() == port and prom.endpoint_url() == f"http://127.0.0.1:{port}/metrics"
    assert f"Prometheus metrics of rank 0 at http://127.0.0.1:{port}/metrics" in capsys.readouterr().err
    text = _get(prom.endpoint_url())
    assert "streamscope_loader_wait_seconds_total" in text and "streamscope_knob_value" in text
    # serving switched metrics on (metrics only: no trace log), for this process and the workers it starts
    assert vocab.LEVELS["chunk"] <= recording.RECORDER.metric_cats and not recording.RECORDER.trace_cats
    assert set(os.environ["STREAMSCOPE_METRICS_LEVEL"].split(",")) >= vocab.LEVELS["chunk"]
    assert prom.start_endpoint(0) == port and prom.start_endpoint(port) == port  # already serving
    prom.stop_endpoint()
    assert prom.endpoint_port() is None and prom.endpoint_url() is None


def test_a_port_in_use_is_an_error_naming_it(endpoint):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        busy = s.getsockname()[1]
        with pytest.raises(PrometheusPortError, match=f"port {busy} on 127.0.0.1 is already in use") as info:
            prom.start_endpoint(busy)
        assert isinstance(info.value, OSError) and info.value.errno is not None
    assert prom.endpoint_port() is None


def test_moving_to_a_busy_port_keeps_the_running_endpoint(endpoint):
    port = prom.start_endpoint(0)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        with pytest.raises(PrometheusPortError):
            prom.start_endpoint(s.getsockname()[1])
    assert prom.endpoint_port() == port and _get(f"http://127.0.0.1:{port}/metrics")


@pytest.mark.parametrize("bad", [-1, 65536, "9464", 1.5, True, None])
def test_a_bad_port_is_refused(endpoint, bad):
    with pytest.raises(ConfigError, match="0..65535"):
        prom.start_endpoint(bad)


@pytest.mark.parametrize("raw, match", [("abc", "STREAMSCOPE_PROMETHEUS_PORT='abc'"), ("70000", "0..65535")])
def test_a_bad_environment_port_names_the_variable(endpoint, monkeypatch, capsys, raw, match):
    monkeypatch.setenv("STREAMSCOPE_PROMETHEUS_PORT", raw)
    with pytest.raises(ConfigError, match=match):
        prom.start_from_env(warn=False)
    capsys.readouterr()
    assert prom.start_from_env() is None and prom.endpoint_port() is None  # the variable's path: a warning
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("streamscope: warning: ") and match in lines[0], lines


def test_a_port_in_use_by_the_variable_is_one_warning_line(endpoint, monkeypatch, capsys):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        monkeypatch.setenv("STREAMSCOPE_PROMETHEUS_PORT", str(port))
        with pytest.raises(PrometheusPortError, match=f"port {port} on 127.0.0.1 is already in use"):
            prom.start_from_env(warn=False)
        capsys.readouterr()
        assert prom.start_from_env() is None and prom.endpoint_port() is None
    lines = capsys.readouterr().err.splitlines()
    assert lines == [
        f"streamscope: warning: STREAMSCOPE_PROMETHEUS_PORT={port}: no Prometheus endpoint for rank 0: the Prometheus "
        f"endpoint's port {port} on 127.0.0.1 is already in use (another process listens there: choose another "
        "port, or 0 for a free one); training goes on without it"
    ]


def test_the_environment_starts_it_and_unset_does_not(endpoint, monkeypatch):
    assert prom.start_from_env() is None and prom.endpoint_port() is None
    monkeypatch.setenv("STREAMSCOPE_PROMETHEUS_PORT", "0")
    port = prom.start_from_env()
    assert port and "streamscope_" in _get(f"http://127.0.0.1:{port}/metrics")


def test_the_environment_keeps_an_endpoint_started_from_code(endpoint, monkeypatch):
    port = prom.start_endpoint(0)
    monkeypatch.setenv("STREAMSCOPE_PROMETHEUS_PORT", str(_free_port()))
    assert prom.start_from_env() == port and prom.endpoint_port() == port  # not moved to the variable's port


def test_local_rank_r_listens_on_port_plus_r(endpoint, monkeypatch):
    for _ in range(20):  # a base port whose next one is free too
        base = _free_port()
        try:
            with socket.socket() as s:
                s.bind(("127.0.0.1", base + 2))
            break
        except OSError:
            continue
    monkeypatch.setenv("LOCAL_RANK", "2")
    assert prom.start_endpoint(base) == base + 2
    prom.stop_endpoint()
    monkeypatch.setenv("LOCAL_RANK", "x")
    with pytest.raises(ConfigError, match="LOCAL_RANK='x'"):
        prom.start_endpoint(base)


def _start_in_child() -> tuple[bool, int | None]:
    return prom.is_rank_main_process(), prom.start_endpoint(0)


def _run_daemon(q) -> None:
    q.put(_start_in_child())


def test_a_daemonic_worker_starts_nothing(endpoint):
    """DataLoader and optimize workers are daemonic multiprocessing children: no endpoint there."""
    for method in ("fork", "spawn"):
        ctx = mp.get_context(method)
        q = ctx.Queue()
        p = ctx.Process(target=_run_daemon, args=(q,), daemon=True)
        p.start()
        assert q.get(timeout=60) == (False, None), method
        p.join(30)


class _Probe:
    """Records, as it is unpickled in a spawned child, whether that child thinks it is a rank's main process."""

    def __init__(self) -> None:
        self.seen = None  # a state to restore, so that unpickling calls __setstate__

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self.seen = prom.is_rank_main_process()


def _report_probe(probe: _Probe, q) -> None:
    q.put(probe.seen)


def test_a_spawned_child_unpickling_its_arguments_is_not_a_main_process(endpoint):
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    p = ctx.Process(target=_report_probe, args=(_Probe(), q))  # not daemonic: only the spawn phase tells
    p.start()
    assert q.get(timeout=60) is False
    p.join(30)
    assert pickle.loads(pickle.dumps(_Probe())).seen is True  # here, in the main process


def _hold(conn) -> None:
    conn.recv()  # stay alive, holding whatever was inherited, until told to go


def test_a_forked_child_does_not_keep_the_port(endpoint):
    port = prom.start_endpoint(0)
    ctx = mp.get_context("fork")
    parent, child = ctx.Pipe()
    p = ctx.Process(target=_hold, args=(child,))
    p.start()
    try:
        prom.stop_endpoint()
        with socket.socket() as s:  # the child closed its copy of the listening socket: the port is free
            s.bind(("127.0.0.1", port))
    finally:
        parent.send("go")
        p.join(30)


def test_a_dataloader_worker_starts_nothing(endpoint):
    torch_data = pytest.importorskip("torch.utils.data")

    class _Starts(torch_data.Dataset):
        def __len__(self) -> int:
            return 2

        def __getitem__(self, i: int) -> int:
            return -1 if prom.start_endpoint(0) is None else 1

    loader = torch_data.DataLoader(_Starts(), batch_size=None, num_workers=1, multiprocessing_context="fork")
    assert [int(x) for x in loader] == [-1, -1]
    assert prom.endpoint_port() is None


_RANK_SCRIPT = """
import sys, time, urllib.request
from streamscope.telemetry.prometheus import start_endpoint
port = start_endpoint(int(sys.argv[1]))
print(port, flush=True)
sys.stdin.readline()  # serve until the test has read both ranks
"""


def test_two_ranks_of_a_node_serve_on_port_and_port_plus_one(tmp_path):
    import subprocess
    import sys

    from streamscope.cli.top import parse_exposition

    root = Path(__file__).resolve().parents[2]
    for _ in range(20):  # a base port whose next one is free too
        base = _free_port()
        try:
            with socket.socket() as s:
                s.bind(("127.0.0.1", base + 1))
            break
        except OSError:
            continue
    procs = []
    try:
        for rank in (0, 1):
            env = dict(os.environ, PYTHONPATH=f"{root / 'src'}{os.pathsep}{root}", RANK=str(rank),
                       LOCAL_RANK=str(rank), WORLD_SIZE="2", LOCAL_WORLD_SIZE="2")  # fmt: skip
            procs.append(
                subprocess.Popen(
                    [sys.executable, "-c", _RANK_SCRIPT, str(base)],
                    env=env,
                    text=True,
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                )  # fmt: skip
            )
        ports = [int(p.stdout.readline()) for p in procs]
        assert ports == [base, base + 1]
        for rank, port in enumerate(ports):
            series = parse_exposition(_get(f"http://127.0.0.1:{port}/metrics"))
            assert {lb["rank"] for lb, _ in series[prometheus_name(M.LOADER_WAIT)]} == {str(rank)}
    finally:
        errs = [p.communicate("\n", timeout=30)[1] for p in procs]
    assert all(p.returncode == 0 for p in procs), errs
    assert f"Prometheus metrics of rank 1 at http://127.0.0.1:{base + 1}/metrics" in errs[1]
