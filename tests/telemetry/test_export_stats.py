"""The counts of an OTLP pipeline (each export counted once, whatever shutdown did) and its said-once messages."""

from __future__ import annotations

import pytest

from streamscope.telemetry import export_stats
from streamscope.telemetry.export_stats import Stats, say_once


@pytest.fixture(autouse=True)
def _nothing_said_yet(monkeypatch: pytest.MonkeyPatch) -> None:
    # what was said is kept per process, by the Stats' id: a collected one's id may come again
    monkeypatch.setattr(export_stats, "_said", set())


def test_each_export_is_counted_once_whatever_shutdown_did() -> None:
    s = Stats()
    s.sending("traces", 3)
    s.sent("traces", 3, "http://h", None)
    assert s.exported["traces"] == 3 and s.in_flight["traces"] == 0
    s.sending("metrics", 5)
    s.sent("metrics", 5, "http://h", "boom")
    assert s.failed["metrics"] == 1 and s.dropped["metrics"] == 5 and s.in_flight["metrics"] == 0
    s.sending("traces", 4)
    assert s.abandon() == {"traces": 4}  # shutdown counts these as dropped itself
    s.sent("traces", 4, "http://h", "late")  # the outcome it reports afterwards is not counted again
    assert s.exported["traces"] == 3 and s.failed["traces"] == 0 and s.dropped["traces"] == 0
    assert s.in_flight == {"traces": 0, "metrics": 0}


def test_each_fault_is_said_once_and_every_loss_counted(capfd: pytest.CaptureFixture[str]) -> None:
    s = Stats()
    s.fail("traces", 1, "http://h", "down")
    s.fail("traces", 2, "http://h", "down")
    s.drop("metrics", 1, "the queue is full")
    s.drop("metrics", 1, "the queue is full")
    err = capfd.readouterr().err
    assert err.count("OTLP traces export to http://h failed (down)") == 1
    assert err.count("the queue is full;") == 1
    assert s.failed == {"traces": 2, "metrics": 0} and s.dropped == {"traces": 3, "metrics": 2}


def test_say_once_says_each_key_once(capfd: pytest.CaptureFixture[str]) -> None:
    say_once("k", "first")
    say_once("k", "again")
    say_once("other", "second")
    assert capfd.readouterr().err == "streamscope telemetry: first\nstreamscope telemetry: second\n"
