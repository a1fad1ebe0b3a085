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
from streamscope.cli.top import Scrape, Top, _name, fetch, normalize_url, parse_exposition, rank_lines, rank_view
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
            hits: float, misses: float, knob: float = 4, per_batch: tuple[int, float] | None = None,
            knobs: dict[str, float] | None = None, nbytes: float | None = None) -> Scrape:  # fmt: skip
    """An endpoint's answer; ``per_batch``: the wait histogram's (count, sum), none by default (an endpoint
    without it); ``knobs``: more live knobs."""
    counts = [0] * (len(BUCKETS_S) + 1)
    for i in dl:
        counts[i] += 1
    pts = [
        Point(M.LOADER_WAIT, R0, wait),
        *[Point(M.LOADER_WAIT_STAGE, tuple(sorted((*R0, ("stage", st)))), v) for st, v in stages.items()],
        Point(M.LOADER_BATCHES, tuple(sorted((*R0, ("dataset", "imgs")))), batches),
        Point(M.LOADER_SAMPLES, tuple(sorted((*R0, ("dataset", "imgs")))), samples),
        Point(M.LOADER_BYTES, tuple(sorted((*R0, ("dataset", "imgs")))), samples * 1000 if nbytes is None else nbytes),
        Point(M.DOWNLOAD_DURATION, R0, 0.0, Histogram(BUCKETS_S, tuple(counts), len(dl), 1.0, 1.0)),
        Point(M.DOWNLOAD_BYTES, R0, len(dl) * 1e6),
        Point(M.CACHE_HITS, R0, hits),
        Point(M.CACHE_MISSES, R0, misses),
        Point(M.DOWNLOAD_IN_FLIGHT, tuple(sorted((*R0, ("worker", "0")))), 2),
        Point(M.DOWNLOAD_IN_FLIGHT, tuple(sorted((*R0, ("worker", "1")))), 1),
        Point(M.KNOB_VALUE, tuple(sorted((*R0, ("knob", "download_concurrency")))), knob),
        *[Point(M.KNOB_VALUE, tuple(sorted((*R0, ("knob", k)))), x) for k, x in (knobs or {}).items()],
    ]
    if per_batch is not None:
        wc = [0] * (len(BUCKETS_S) + 1)
        wc[0] = per_batch[0]
        pts.append(
            Point(M.LOADER_WAIT_DURATION, R0, 0.0, Histogram(BUCKETS_S, tuple(wc), per_batch[0], per_batch[1], 1.0))
        )
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


_ZERO = dict.fromkeys(("download", "decompress", "read", "decode", "idle"), 0.0)


def test_the_split_is_each_stage_s_share_of_the_stages_total_in_the_interval():
    """The workers settle the stages a tick after the wait: in the issue's refresh the wait counter had moved by
    little while the stages brought in the last tick's wait ("decode 5322% idle 301%"), and in the next the wait
    had moved and the stages not (0% everywhere). Each share is now of the stages' own total over the interval."""
    a = _scrape(10.0, wait=4.0, stages={**_ZERO, "decode": 2.0, "idle": 1.0}, batches=100, samples=800, dl=[],
                hits=0, misses=0)  # fmt: skip
    late = {**_ZERO, "decode": 2.0 + 1.0644, "idle": 1.0 + 0.0602, "read": 0.01}  # what the workers settled now
    b = _scrape(11.0, wait=4.02, stages=late, batches=150, samples=1200, dl=[], hits=0, misses=0)
    v = rank_view(b, a, "0")
    assert sum(v.split.values()) == pytest.approx(100.0)
    assert v.split["decode"] == pytest.approx(100 * 1.0644 / 1.1346) and v.split["download"] == 0.0
    line = next(ln for ln in rank_lines(v) if ln.startswith("  split"))
    assert line == "  split     download 0%  decompress 0%  read 1%  decode 94%  idle 5%"  # whole percents, sum 100
    # the wait counter moved, the stages not yet: no split to show for this interval, and it says why
    c = _scrape(12.0, wait=4.5, stages=late, batches=200, samples=1600, dl=[], hits=0, misses=0)
    v = rank_view(c, b, "0")
    assert v.split == {}
    assert "  split     no wait (not reported by the workers yet)" in rank_lines(v)
    # no batch, no wait: "no wait", not 0% for each stage
    d = _scrape(13.0, wait=4.5, stages=late, batches=200, samples=1600, dl=[], hits=0, misses=0)
    v = rank_view(d, c, "0")
    lines = rank_lines(v)
    assert "  split     no wait" in lines and v.wait_pct == 0.0
    assert "  wait      0.0% of the time  - ms/batch" in lines
    assert any(ln.startswith("  flow      0.0 samples/s  0.00 MB/s  0.0 batches/s") for ln in lines), lines


def test_the_wait_share_is_the_wait_per_batch_times_the_batches_per_second():
    """The wait counter and histogram are as of the job's last metrics tick; the batches as of the scrape. The
    share of the time is the histogram's wait per batch (its own sum over its own count) times the scrapes'
    batches per second, not a tick's wait over a refresh's seconds (which read 0% or 200%)."""
    a = _scrape(10.0, wait=1.0, stages=_ZERO, batches=100, samples=800, dl=[], hits=0, misses=0, per_batch=(100, 1.0))
    # one refresh of 1 s: the tick brought 0.9 s of wait for 60 batches (15 ms each); 50 batches were handed over
    b = _scrape(11.0, wait=1.9, stages=_ZERO, batches=150, samples=1200, dl=[], hits=0, misses=0,
                per_batch=(160, 1.9))  # fmt: skip
    v = rank_view(b, a, "0")
    assert v.ms_per_batch == pytest.approx(15.0)
    assert v.wait_pct == pytest.approx(75.0)  # 15 ms a batch, 50 batches a second (not 0.9 s in 1 s: 90%)
    # no tick in the refresh: the batches moved, the wait not yet: not known, not 0%
    c = _scrape(12.0, wait=1.9, stages=_ZERO, batches=200, samples=1600, dl=[], hits=0, misses=0, per_batch=(160, 1.9))
    v = rank_view(c, b, "0")
    assert v.wait_pct is None and v.ms_per_batch is None and v.samples_s == pytest.approx(400.0)


def test_samples_and_megabytes_per_second_come_from_the_same_two_scrapes():
    a = _scrape(10.0, wait=0, stages=_ZERO, batches=10, samples=80, dl=[], hits=0, misses=0, nbytes=80 * 2000)
    b = _scrape(12.0, wait=0, stages=_ZERO, batches=60, samples=480, dl=[], hits=0, misses=0, nbytes=480 * 2000)
    c = _scrape(13.0, wait=0, stages=_ZERO, batches=70, samples=560, dl=[], hits=0, misses=0, nbytes=560 * 2000)
    for cur, prev, sps in ((b, a, 200.0), (c, b, 80.0)):
        v = rank_view(cur, prev, "0")
        assert v.samples_s == pytest.approx(sps) and v.mb_s == pytest.approx(sps * 2000 / 1e6)


def test_the_screen_fits_80_columns_with_many_knobs_and_datasets():
    knobs = {f"some_rather_long_knob_name_{i}": 1e10 + i for i in range(12)}
    cur = _scrape(1.0, wait=0, stages=_ZERO, batches=0, samples=0, dl=[], hits=0, misses=0, knobs=knobs)
    cur.series[_name(M.LOADER_SAMPLES)] += [({"rank": "0", "dataset": f"dataset-{i}"}, 1.0) for i in range(9)]
    top = Top(["http://h:1/metrics"], 1.0, fetcher=lambda url, timeout: cur)
    top.refresh()
    for width in (80, 79, 120):
        lines = top.lines(width)
        assert all(len(ln) <= width for ln in lines), [ln for ln in lines if len(ln) > width]
        flat = " ".join(ln.strip() for ln in lines)
        for k, x in knobs.items():
            assert f"{k}={x:g}" in flat.split(), k
        assert all(f"dataset-{i}" in flat for i in range(9))
    assert len(top.lines(80)) > len(top.lines(200))  # the knobs wrapped
    top.close()


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
def job(tmp_path, request):
    """A real streaming job (tests/cli/_top_job.py) serving its metrics; its URL. Parametrized indirectly, its
    parameter is more arguments (``["step"]``: fast workers, a slow training step)."""
    pytest.importorskip("prometheus_client")
    env = dict(os.environ, **ENV)
    log = open(tmp_path / "job.log", "wb")
    extra = list(getattr(request, "param", []))
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "tests" / "cli" / "_top_job.py"), str(tmp_path), "120", *extra],
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


_SPLIT = re.compile(r"^  split     (.*)$", re.M)
_TIME = re.compile(r"q quits\s+(\d\d:\d\d:\d\d)")


def _served_knobs(url: str) -> dict[str, float]:
    """The live knobs the endpoint serves now (as a person would see them with curl)."""
    series = fetch(url, 10).series
    return {labels["knob"]: v for labels, v in series.get("streamscope_knob_value", ()) if "knob" in labels}


def _screens(tm, n: int, timeout: float) -> list[str]:
    """The next ``n`` refreshes of the screen (each with its own clock), as they come."""
    out: list[str] = []
    last = None
    deadline = time.monotonic() + timeout
    while len(out) < n:
        assert time.monotonic() < deadline, f"{len(out)} refreshes in {timeout} s:\n{tm.capture()}"
        screen = tm.capture()
        m = _TIME.search(screen)
        key = (m.group(1) if m else None, screen)
        if m and key != last and "ms/batch" in screen:
            out.append(screen)
            last = key
        time.sleep(0.25)
    return out


@pytest.mark.slow
def test_top_shows_a_live_job_in_80_columns_and_q_quits(job):
    """The real job, its 7 live knobs, in an 80-column terminal: nothing is cut (the knobs wrap); the split's
    shares sum to 100% at every refresh (they used to swing between 0% and thousands of percent: each stage was
    divided by a wait counter read at another moment); the numbers move; q quits."""
    from tests.support.tmux_driver import TmuxSession

    knobs = _served_knobs(job)
    assert len(knobs) >= 6, knobs  # many: one line of them is ~150 columns
    cmd = [sys.executable, "-m", "streamscope", "top", "--url", job, "--interval", "0.5"]
    with TmuxSession(cmd, width=80, height=40, env=ENV, cwd=ROOT) as tm:
        screen = tm.wait_for_text(re.compile(r"wait\s+\d+\.\d% of the time\s+\d+\.\d ms/batch"), timeout=60)
        assert re.search(r"[\d,.]+ samples/s", screen) and "datasets: images" in screen
        assert "recent tuner decisions" in screen
        shares = []
        for screen in _screens(tm, 6, timeout=60):
            lines = screen.splitlines()
            assert all(len(ln) < 80 for ln in lines), screen  # curses writes at most 79 columns of 80
            flat = " ".join(ln.strip() for ln in lines)
            for name in knobs:  # each knob whole (name=value), wherever its line wrapped
                assert re.search(rf"(^|\s){name}=-?[\d.e+]+(\s|$)", flat), (name, screen)
            split = _SPLIT.search(screen)
            assert split, screen
            got = re.findall(r"(download|decompress|read|decode|idle) (\d+)%", split.group(1))
            if got:
                assert [st for st, _ in got] == ["download", "decompress", "read", "decode", "idle"], screen
                assert sum(int(p) for _, p in got) == 100, screen
                shares.append(dict(got))
            else:
                assert split.group(1).startswith("no wait"), screen
        assert len(shares) >= 3, shares  # the job waits on its slow transform: most refreshes have a split
        assert any(int(sh["decode"]) >= 50 for sh in shares), shares  # what it waits for: the transform
        first = _samples(tm.capture())
        deadline = time.monotonic() + 30
        while (now := _samples(tm.capture())) <= first:  # the numbers move while the job runs
            assert time.monotonic() < deadline, f"samples stayed at {first}:\n{tm.capture()}"
            time.sleep(0.2)
        assert now > first
        tm.send_keys("q")
        assert tm.wait_for_exit(timeout=10) == 0
        assert "Traceback" not in tm.capture(history=True)


@pytest.mark.slow
def test_top_shows_no_wait_while_the_loop_asks_for_no_batch(job, tmp_path):
    """The job's loop holds a batch for a while (tests/cli/_top_job.py's pause): a refresh with no batch shows
    no flow and "no wait" (not 0% for every stage), and the numbers come back when the loop goes on."""
    from tests.support.tmux_driver import TmuxSession

    cmd = [sys.executable, "-m", "streamscope", "top", "--url", job, "--interval", "0.5"]
    with TmuxSession(cmd, width=80, height=40, env=ENV, cwd=ROOT) as tm:
        tm.wait_for_text(re.compile(r"split     download \d+%"), timeout=60)  # running, waiting on its workers
        (tmp_path / "pause").touch()
        deadline = time.monotonic() + 30
        while not (tmp_path / "paused").exists():
            assert time.monotonic() < deadline, "the job did not pause"
            time.sleep(0.05)
        # the stages the workers settle late may still come in the first refreshes: then a refresh has none
        screen = tm.wait_for_text(re.compile(r"split     no wait$", re.M), timeout=30)
        assert re.search(r"wait      0\.0% of the time  - ms/batch", screen), screen
        assert re.search(r"flow      0\.0 samples/s  0\.00 MB/s  0\.0 batches/s", screen), screen
        assert not re.search(r"split .*\d+%", screen), screen
        held = _samples(screen)
        (tmp_path / "pause").unlink()
        deadline = time.monotonic() + 30
        while _samples(tm.capture()) <= held:
            assert time.monotonic() < deadline, f"samples stayed at {held}:\n{tm.capture()}"
            time.sleep(0.2)
        tm.wait_for_text(re.compile(r"split     download \d+%"), timeout=30)
        tm.send_keys("q")
        assert tm.wait_for_exit(timeout=10) == 0
        assert "Traceback" not in tm.capture(history=True)


@pytest.mark.slow
@pytest.mark.parametrize("job", [["step"]], indirect=True)
def test_top_s_megabytes_follow_its_samples_from_one_refresh_to_the_next(job):
    """Workers faster than the loop's step: groups of batches reach the loop long before it takes them. MB/s and
    samples/s are both what was handed to the loop between the same two scrapes, so at every refresh MB/s is
    samples/s times the sample's bytes (they used to part: 2,149 samples/s at 2.35 MB/s, then 996 at 6.47)."""
    from tests.cli._top_job import STEP_SAMPLE_BYTES
    from tests.support.tmux_driver import TmuxSession

    cmd = [sys.executable, "-m", "streamscope", "top", "--url", job, "--interval", "1"]
    flow = re.compile(r"flow      ([\d,]+\.\d) samples/s  (\d+\.\d\d) MB/s")
    with TmuxSession(cmd, width=80, height=40, env=ENV, cwd=ROOT) as tm:
        tm.wait_for_text(flow, timeout=90)
        rates = []
        for screen in _screens(tm, 6, timeout=60):
            m = flow.search(screen)
            assert m, screen
            sps, mbs = float(m.group(1).replace(",", "")), float(m.group(2))
            if sps >= 100:  # a refresh across an epoch's end (workers starting) hands out fewer
                # both shown rounded: samples/s to 0.1, MB/s to 0.01
                assert mbs == pytest.approx(sps * STEP_SAMPLE_BYTES / 1e6, abs=0.006 + 0.05 * STEP_SAMPLE_BYTES / 1e6)
                rates.append((sps, mbs))
        assert len(rates) >= 3, rates
        tm.send_keys("q")
        assert tm.wait_for_exit(timeout=10) == 0


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
