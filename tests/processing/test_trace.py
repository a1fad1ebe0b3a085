"""optimize() traces its stages, in the main process and in its worker processes."""

from __future__ import annotations

import os

import pytest

from streamscope import events as ev
from streamscope.processing import optimize
from tests.processing import _fns

_ENV = ("STREAMSCOPE_LOG_FILE", "STREAMSCOPE_TRACE_LEVEL", "STREAMSCOPE_TRACE_CATEGORIES")


@pytest.fixture
def tracer(tmp_path, monkeypatch):
    api = pytest.importorskip("streamscope.api.tracing")
    for var in (*_ENV, "STREAMSCOPE_TRACE_FLUSH_INTERVAL", "STREAMSCOPE_TRACE_SINKS"):
        monkeypatch.delenv(var, raising=False)
    log = tmp_path / "trace.log"
    api.enable_tracer(categories=["epoch", "read", "sample", "download", "upload", "write", "crash"], log_file=str(log))
    try:
        yield log, api
    finally:
        ev.configure(set(), set())


def test_spans_from_main_and_workers_reach_the_log(tmp_path, tracer):
    log, api = tracer
    optimize(_fns.keep_even, list(range(20)), str(tmp_path / "ds"), chunk_size=3, num_workers=2, verbose=False)
    api.flush_tracer()
    text = log.read_text()
    lines = text.splitlines()

    def pids(name: str) -> set[str]:
        return {
            part.split(":", 1)[1].strip()
            for line in lines
            if f"name: {name};" in line
            for part in line.split(";")
            if part.strip().startswith("pid:")
        }

    main = str(os.getpid())
    assert pids("optimize") == {main} and pids("index_merge") == {main}
    for name in ("optimize_fn", "serialize", "upload", "chunk_write"):
        got = pids(name)
        assert len(got) == 2 and main not in got, (name, got)  # one per worker process
    # the write path's own categories: `download` means chunk downloads, `read` the read path's reads
    cats = {(part["name"], part["cat"]) for part in (dict(_pairs(line)) for line in lines) if "name" in part}
    assert ("upload", "upload") in cats and ("chunk_write", "write") in cats, cats
    assert not {c for n, c in cats if n in ("upload", "chunk_write")} - {"upload", "write"}, cats


def _pairs(line: str) -> list[tuple[str, str]]:
    return [(k.strip(), v.strip()) for k, _, v in (p.partition(":") for p in line.split(";")) if v.strip()]


def test_failing_input_leaves_a_crash_event(tmp_path, tracer):
    from streamscope._core.errors import WorkerFailedError

    log, api = tracer
    with pytest.raises(WorkerFailedError):
        optimize(_fns.fail_on_13, list(range(20)), str(tmp_path / "ds"), chunk_size=3, num_workers=2, verbose=False)
    api.flush_tracer()
    crashes = [line for line in log.read_text().splitlines() if "name: crash;" in line]
    assert len(crashes) == 1
    assert "input: 13;" in crashes[0] and "KeyError" in crashes[0]
