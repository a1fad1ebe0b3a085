"""The batch processor: exporters' results, failures and flushes counted, never raised."""

from __future__ import annotations

from streamscope.events import ExportResult
from streamscope.events.processor import BatchProcessor
from streamscope.events.report import Reporter


class _Failing:
    def export(self, batch):
        return ExportResult.FAILURE

    def force_flush(self, timeout_millis=30_000):
        self.timeout = timeout_millis
        return False

    def shutdown(self):
        pass


class _Legacy:
    """A sink of the first interface: export returns None, force_flush takes no timeout."""

    flushed = 0

    def export(self, batch):
        return None

    def force_flush(self):
        _Legacy.flushed += 1

    def shutdown(self):
        pass


def test_failures_are_counted_and_reported_once_and_old_sinks_still_work(capsys, monkeypatch):
    monkeypatch.delenv("STREAMSCOPE_TRACE_SINKS", raising=False)
    failing = _Failing()
    p = BatchProcessor(Reporter(), [lambda: failing, _Legacy])
    events = [("I", "x", "read", 1, 1, 1, {})]
    p.export(events, 0)
    p.export(events, 0)
    assert p.errors == 2
    assert capsys.readouterr().err.count("failed to export a batch") == 1
    assert p.force_flush(250) is False and failing.timeout == 250 and _Legacy.flushed == 1
    assert p.errors == 3  # the failing flush; the legacy sink's None counts as done
    p.shutdown_sinks()
    assert p.sinks is None
