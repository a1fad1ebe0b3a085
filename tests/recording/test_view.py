"""metrics_view(): registry data points from the merged run, read without side effects."""

from __future__ import annotations

import os

import pytest

from streamscope import events as ev
from streamscope import recording
from streamscope.events.registry import METRICS, M
from streamscope.recording import collect, snapshots
from streamscope.recording.metrics import SpanStats
from streamscope.recording.snapshots import MetricsSnapshot
from streamscope.recording.views import build
from tests.support.tracing import clean_tracer  # noqa: F401

pytestmark = pytest.mark.usefixtures("clean_tracer")


def _stats(*secs: float) -> SpanStats:
    st = SpanStats()
    for s in secs:
        st.observe_ns(int(s * 1e9))
    return st


def test_build_maps_the_merged_numbers_to_registry_points():
    snap = MetricsSnapshot(
        spans={"stall/stall": _stats(0.010, 0.030), "download/download": _stats(0.2, 0.4)},
        instants={"download/retry": 3},
        values={
            f"{M.LOADER_WAIT_STAGE.name}|stage=download": 0.025,
            f"{M.LOADER_WAIT_STAGE.name}|stage=decode": 0.005,
            f"{M.LOADER_WAIT_STAGE.name}|stage=idle": 0.010,
            f"{M.LOADER_BATCHES.name}|dataset=imgs": 7,
            f"{M.PREFETCH_DEPTH.name}|worker=0": 2,
            f"{M.PREFETCH_DEPTH.name}|worker=1": 3,
            "streamscope.unknown|x=1": 5,
        },
        gauges_max={"cache/cache_bytes": 1024.0},
        dropped=4,
    )
    snap.spans["download/download"].bytes = 99
    v = build(snap, rank=3, node=1)
    assert v.value(M.LOADER_WAIT) == pytest.approx(0.040)
    assert v.value(M.LOADER_WAIT_STAGE, stage="download") == pytest.approx(0.025)
    assert v.value(M.LOADER_WAIT_STAGE, stage="idle") == pytest.approx(0.010)  # as the processes settled it
    assert v.value(M.LOADER_WAIT_STAGE) == pytest.approx(v.value(M.LOADER_WAIT))
    del snap.values[f"{M.LOADER_WAIT_STAGE.name}|stage=idle"]
    assert build(snap).value(M.LOADER_WAIT_STAGE, stage="idle") == 0  # never made up from the wait
    h = v.histogram(M.DOWNLOAD_DURATION, rank=3)
    assert h.count == 2 and h.sum == pytest.approx(0.6) and h.quantile(0.5) == 0.25
    assert v.value(M.DOWNLOAD_BYTES) == 99 and v.value(M.DOWNLOAD_RETRIES) == 3 and v.value(M.EVENTS_DROPPED) == 4
    assert v.value(M.LOADER_BATCHES, dataset="imgs") == 7 and v.value(M.LOADER_BATCHES, dataset="other") == 0
    assert v.value(M.PREFETCH_DEPTH) == 5 and v.value(M.PREFETCH_DEPTH, worker=1) == 3
    assert v.value(M.CACHE_SIZE) == 1024
    assert all(p.attrs["rank"] == "3" and p.attrs["node"] == "1" for p in v.points)
    assert {p.metric.name for p in v.points} <= {m.name for m in METRICS}  # the unknown key is left out
    assert v.of(M.KNOB_VALUE) and all("knob" in p.attrs for p in v.of(M.KNOB_VALUE))
    with pytest.raises(TypeError):
        v.value(M.DOWNLOAD_DURATION)


class _Counting:
    exports = 0

    def export(self, batch):
        _Counting.exports += 1

    def force_flush(self, timeout_millis=30_000):
        return True

    def shutdown(self):
        pass


def test_a_read_takes_nothing_exports_nothing_and_reads_no_file(monkeypatch, tmp_path):
    monkeypatch.setenv("STREAMSCOPE_METRICS_INTERVAL", "60")
    monkeypatch.setenv("STREAMSCOPE_TRACE_SINKS", "tests.recording.test_view:_Counting")
    monkeypatch.setenv("STREAMSCOPE_LOG_FILE", str(tmp_path / "never.log"))
    _Counting.exports = 0
    ev.configure(trace={"download"}, metrics={"download", "stall"})
    with ev.span("download", "download", chunk=1) as f:
        f["bytes"] = 10
    ev.flush()
    assert _Counting.exports == 1
    with ev.span("download", "download", chunk=2) as f:
        f["bytes"] = 5
    buffered = len(ev.BUF)

    def no_scan(*a, **k):
        raise AssertionError("a read scanned the run directory")

    monkeypatch.setattr(collect, "read_snapshots", no_scan)
    monkeypatch.setattr(snapshots, "read_snapshots", no_scan)
    v = ev.metrics_view()
    assert v.value(M.DOWNLOAD_BYTES) == 10  # as of the last flush: the second span is still in the buffer
    assert len(ev.BUF) == buffered and _Counting.exports == 1
    assert not os.path.exists(tmp_path / "never.log")


def test_metrics_only_mode_writes_no_log(monkeypatch, tmp_path):
    from streamscope.api.tracing import enable_metrics

    log = tmp_path / "litdata_debug.log"
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("STREAMSCOPE_METRICS_INTERVAL", "60")
    enable_metrics("chunk")
    with ev.span("download", "download", chunk=1) as f:
        f["bytes"] = 7
    ev.flush()
    assert (
        ev.metrics_view().value(M.DOWNLOAD_BYTES) == 7 and ev.metrics_view().histogram(M.DOWNLOAD_DURATION).count == 1
    )
    assert not log.exists() and not recording.RECORDER.sinks


def test_the_knob_gauges_come_from_the_active_knob_board():
    from streamscope._core.board import KnobBoard

    board = KnobBoard({"prefetch_depth": (5, False, "max_pre_download")})  # the newest board is the active one
    board.propose("download_concurrency", 11)
    v = build(MetricsSnapshot())
    assert v.value(M.KNOB_VALUE, knob="prefetch_depth") == 5
    assert v.value(M.KNOB_VALUE, knob="download_concurrency") == 11
    assert {p.attrs["knob"] for p in v.of(M.KNOB_VALUE)} == set(board.names)
    board.propose("prefetch_depth", 9)  # what the workers read is what the next read of the metrics reports
    assert build(MetricsSnapshot()).value(M.KNOB_VALUE, knob="prefetch_depth") == 9
