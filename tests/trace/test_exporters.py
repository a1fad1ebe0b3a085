"""Every exporter of this layer goes through the same checks (the exporter interface of streamscope.events)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from streamscope.events import EventBatch, Exporter, ExportResult
from streamscope.trace.exporters import LitracerFileSink
from tests.support.litracer_parser import check_log

ENV = {"dist_world_size": 1, "dist_global_rank": 0, "dist_num_nodes": 1, "worker_world_size": 1, "worker_rank": 0}


def _litracer(tmp_path: Any) -> tuple[Any, Callable[[], int]]:
    path = str(tmp_path / "t.log")
    return LitracerFileSink(path), lambda: len(check_log(Path(path).read_text()))


EXPORTERS = {"litracer-file": _litracer}


@pytest.fixture(params=sorted(EXPORTERS))
def exporter(request: Any, tmp_path: Any) -> Any:
    return EXPORTERS[request.param](tmp_path)


def _batch(n: int) -> EventBatch:
    events = [("I", "retry", "download", 1_000 * i, os.getpid(), 1, {"attempt": i}) for i in range(n)]
    return EventBatch(events, 0, dict(ENV))


def test_export_flush_and_shutdown_have_opentelemetrys_shape(exporter):
    sink, delivered = exporter
    assert isinstance(sink, Exporter)
    assert sink.export(_batch(3)) is ExportResult.SUCCESS
    assert sink.export(_batch(2)) is ExportResult.SUCCESS
    assert sink.force_flush(timeout_millis=1000) is True
    assert sink.force_flush() is True
    sink.shutdown()
    sink.shutdown()  # idempotent
    assert delivered() == 5


def test_export_after_shutdown_fails_without_delivering(exporter):
    sink, delivered = exporter
    sink.shutdown()
    try:
        result = sink.export(_batch(1))
    except OSError:
        result = ExportResult.FAILURE
    assert result is ExportResult.FAILURE
    assert delivered() == 0
