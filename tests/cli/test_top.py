"""``streamscope top``: its parsing and numbers (fast), and as a person uses it, under tmux, on a real job."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from streamscope.cli import main
from streamscope.cli.top import Scrape, Top, fetch, normalize_url, parse_exposition, rank_lines, rank_view
from streamscope.events.registry import BUCKETS_S, M
from streamscope.events.view import Histogram, MetricsView, Point

ROOT = Path(__file__).resolve().parents[2]
ENV = {"PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT}", "LITDATA_DISABLE_VERSION_CHECK": "1"}
R0 = (("node", "0"), ("rank", "0"))


def _text(view: MetricsView) -> str:
    prometheus_client = pytest.importorskip("prometheus_client")
    from streamscope.telemetry import prometheus as prom

    reg = prometheus_client.CollectorRegistry(auto_describe=False)

    class _C:
        def collect(self):
            return iter(prom.families(view))

    reg.register(_C())
    return prometheus_client.generate_latest(reg).decode()


def _scrape(at: float, *, wait: float, stages: dict[str, float], batches: float, samples: float, dl: list[int],
            hits: float, misses: float, knob: float = 4) -> Scrape:  # fmt: skip
    counts = [0] * (len(BUCKETS_S) + 1)
    for i in dl:
        counts[i] += 1
    pts = [
        Point(M.LOADER_WAIT, R0, wait),
        *[Point(M.LOADER_WAIT_STAGE, tuple(sorted((*R0, ("stage", st)))), v) for st, v in stages.items()],
        Point(M.LOADER_BATCHES, tuple(sorted((*R0, ("dataset", "imgs")))), batches),
        Point(M.LOADER_SAMPLES, tuple(sorted((*R0, ("dataset", "imgs")))), samples),
        Point(M.LOADER_BYTES, tuple(sorted((*R0, ("dataset", "imgs")))), samples * 1000),
        Point(M.DOWNLOAD_DURATION, R0, 0.0, Histogram(BUCKETS_S, tuple(counts), len(dl), 1.0, 1.0)),
        Point(M.DOWNLOAD_BYTES, R0, len(dl) * 1e6),
        Point(M.CACHE_HITS, R0, hits),
        Point(M.CACHE_MISSES, R0, misses),
        Point(M.DOWNLOAD_IN_FLIGHT, tuple(sorted((*R0, ("worker", "0")))), 2),
        Point(M.DOWNLOAD_IN_FLIGHT, tuple(sorted((*R0, ("worker", "1")))), 1),
        Point(M.KNOB_VALUE, tuple(sorted((*R0, ("knob", "download_concurrency")))), knob),
    ]
    return Scrape("http://h:1/metrics", at, parse_exposition(_text(MetricsView(tuple(pts)))))


def test_the_exposition_parser_reads_labels_escapes_and_values():
    text = (
        "# HELP x_total a\n# TYPE x_total counter\n"
        'x_total{a="1",b="q\\"uote\\\\ \\n"} 3.5\n'
        "y 2 1700000000000\n"
        'z_bucket{le="+Inf"} 7\n'
        "not a sample line\n"
    )
    got = parse_exposition(text)
    assert got["x_total"] == [({"a": "1", "b": 'q"uote\\ \n'}, 3.5)]
    assert got["y"] == [({}, 2.0)] and got["z_bucket"] == [({"le": "+Inf"}, 7.0)]
    assert len(got) == 3


def test_a_rank_s_numbers_over_an_interval():
    stages = {"download": 1.0, "decompress": 0.0, "read": 0.5, "decode": 2.0, "idle": 0.5}
    a = _scrape(10.0, wait=4.0, stages=stages, batches=100, samples=800, dl=[5, 5], hits=2, misses=2)
    later = {"download": 1.6, "decompress": 0.0, "read": 0.5, "decode": 2.2, "idle": 0.7}  # +1 s of wait
    b = _scrape(12.0, wait=5.0, stages=later, batches=150, samples=1200, dl=[5, 5, 12, 12, 12, 15], hits=5, misses=3,
                knob=8)  # fmt: skip
    first = rank_view(a, None, "0")
    assert first.wait_pct is None and first.samples_s is None and first.samples == 800  # rates need two
    assert first.hit_pct == 50.0 and first.dl_p50 == BUCKETS_S[5]  # totals so far
    v = rank_view(b, a, "0")
    assert v.wait_pct == pytest.approx(50.0)  # 1 s of wait in 2 s
    assert v.ms_per_batch == pytest.approx(20.0)  # 1 s over 50 batches
    assert v.split == pytest.approx({"download": 60.0, "decompress": 0.0, "read": 0.0, "decode": 20.0, "idle": 20.0})
    assert v.samples_s == pytest.approx(200.0) and v.batches_s == pytest.approx(25.0)
    assert v.mb_s == pytest.approx(0.2) and v.dl_mb_s == pytest.approx(2.0)
    assert v.hit_pct == pytest.approx(75.0)  # 3 hits, 1 miss in the interval
    assert v.dl_p50 == BUCKETS_S[12] and v.dl_p99 == BUCKETS_S[15]  # this interval's downloads only
    assert v.in_flight == 3 and v.knobs == {"download_concurrency": 8.0} and v.datasets == ["imgs"]
    lines = "\n".join(rank_lines(v))
    assert "wait      50.0% of the time  20.0 ms/batch" in lines and "download 60%" in lines
    assert "200.0 samples/s" in lines and "3 in flight" in lines and "hit 75%" in lines
    # a job restarted between two scrapes: its counters went down, no rate is made up
    restarted = rank_view(a, b, "0")
    assert restarted.wait_pct is None and restarted.samples_s is None


def test_a_knob_change_is_listed_as_a_decision():
    stages = dict.fromkeys(("download", "decompress", "read", "decode", "idle"), 0.0)
    scrapes = iter(
        [
            _scrape(1.0, wait=0, stages=stages, batches=0, samples=0, dl=[], hits=0, misses=0, knob=4),
            _scrape(2.0, wait=0, stages=stages, batches=0, samples=0, dl=[], hits=0, misses=0, knob=6),
        ]
    )
    top = Top(["http://h:1/metrics"], 1.0, fetcher=lambda url, timeout: next(scrapes))
    top.refresh()
    assert "none yet" in "\n".join(top.lines())
    top.refresh()
    screen = "\n".join(top.lines())
    assert re.search(r"\d\d:\d\d:\d\d  rank 0  download_concurrency: 4 -> 6", screen), screen
    top.close()


def test_urls_are_checked():
    assert normalize_url("127.0.0.1:9464") == "http://127.0.0.1:9464/metrics"
    assert normalize_url("https://h/custom") == "https://h/custom"
    for bad in ("ftp://h:1", "h:", "h:abc", "http://:80"):
        with pytest.raises(ValueError, match="h|:80"):
            normalize_url(bad)


def test_bad_arguments_exit_2_with_a_message(capsys):
    assert main(["top", "--url", "ftp://x:1"]) == 2
    assert "not an http(s) URL of a metrics endpoint: 'ftp://x:1'" in capsys.readouterr().err
    assert main(["top", "--url", "h:1", "--interval", "0"]) == 2
    assert "--interval must be > 0" in capsys.readouterr().err


class _Page(BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 - http.server's name
        if self.path == "/missing":
            self.send_error(404)
            return
        body = b"<html>hello</html>"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def test_every_way_an_endpoint_fails_is_said_in_words():
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        dead = free.getsockname()[1]  # closed below: nothing listens there
    assert fetch(f"http://127.0.0.1:{dead}/metrics", 2).error.startswith("connection refused")
    with socket.socket() as mute:  # accepts connections (the kernel does) and never answers
        mute.bind(("127.0.0.1", 0))
        mute.listen(8)
        t0 = time.monotonic()
        assert fetch(f"http://127.0.0.1:{mute.getsockname()[1]}/metrics", 0.5).error == "timed out"
        assert time.monotonic() - t0 < 5
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Page)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        port = srv.server_address[1]
        assert fetch(f"http://127.0.0.1:{port}/missing", 2).error == "HTTP 404 Not Found"
        assert "serves no streamscope metrics" in fetch(f"http://127.0.0.1:{port}/metrics", 2).error
    finally:
        srv.shutdown()
        srv.server_close()
    assert fetch("http://no-such-host.invalid:1/metrics", 2).error.startswith("unknown host")


# -- as a person uses it: under tmux -------------------------------------------------------------------------


@pytest.fixture
def job(tmp_path):
    """A real streaming job (tests/cli/_top_job.py) serving its metrics; its URL."""
    pytest.importorskip("prometheus_client")
    env = dict(os.environ, **ENV)
    log = open(tmp_path / "job.log", "wb")
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "tests" / "cli" / "_top_job.py"), str(tmp_path), "120"],
        env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 90
        while not (tmp_path / "port").exists():  # the job writes its port once it serves
            assert proc.poll() is None, (tmp_path / "job.log").read_text()
            assert time.monotonic() < deadline, "the job did not start serving within 90 s"
            time.sleep(0.1)
        yield f"http://127.0.0.1:{(tmp_path / 'port').read_text()}/metrics"
    finally:
        (tmp_path / "stop").touch()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
        log.close()


def _samples(screen: str) -> int:
    m = re.search(r"samples ([\d,]+)$", screen, re.M)
    assert m, screen
    return int(m.group(1).replace(",", ""))


@pytest.mark.slow
def test_top_shows_a_live_job_and_q_quits(job):
    from tests.support.tmux_driver import TmuxSession

    cmd = [sys.executable, "-m", "streamscope", "top", "--url", job, "--interval", "0.5"]
    with TmuxSession(cmd, width=160, height=40, env=ENV, cwd=ROOT) as tm:
        screen = tm.wait_for_text(re.compile(r"wait\s+\d+\.\d% of the time\s+\d+\.\d ms/batch"), timeout=60)
        assert re.search(r"split: download \d+%  decompress \d+%  read \d+%  decode \d+%  idle \d+%", screen), screen
        assert re.search(r"[\d,.]+ samples/s", screen) and "datasets: images" in screen
        assert "knobs     download_concurrency=" in screen and "recent tuner decisions" in screen
        first = _samples(screen)
        deadline = time.monotonic() + 30
        while (now := _samples(tm.capture())) <= first:  # the numbers move while the job runs
            assert time.monotonic() < deadline, f"samples stayed at {first}:\n{tm.capture()}"
            time.sleep(0.2)
        assert now > first
        tm.send_keys("q")
        assert tm.wait_for_exit(timeout=10) == 0
        assert "Traceback" not in tm.capture(history=True)


@pytest.mark.slow
def test_top_says_an_endpoint_is_unreachable_and_q_quits():
    from tests.support.tmux_driver import TmuxSession

    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        dead = free.getsockname()[1]
    url = f"http://127.0.0.1:{dead}/metrics"
    cmd = [sys.executable, "-m", "streamscope", "top", "--url", url, "--interval", "0.5"]
    with TmuxSession(cmd, width=160, height=20, env=ENV, cwd=ROOT) as tm:
        screen = tm.wait_for_text(f"{url}: unreachable: connection refused", timeout=30)
        assert "Traceback" not in screen
        tm.send_keys("q")
        assert tm.wait_for_exit(timeout=10) == 0
