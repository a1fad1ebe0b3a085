"""The metric registry: OpenTelemetry-style declarations, bounded attributes, the README table kept current."""

from __future__ import annotations

import pathlib
import re

import pytest

from streamscope.events import registry
from streamscope.events.registry import ATTRIBUTES, BUCKETS_S, METRICS, Instrument, M, Metric

ROOT = pathlib.Path(__file__).resolve().parents[2]
#: UCUM units the convention uses: seconds, bytes, bytes per second, dimensionless, and annotations in braces.
_UNIT = re.compile(r"^(s|By|By/s|1|\{[a-z_]+\})$")


def test_every_metric_is_named_and_typed_the_opentelemetry_way():
    names = [m.name for m in METRICS]
    assert len(names) == len(set(names)) and len(METRICS) >= 20
    for m in METRICS:
        assert re.fullmatch(r"streamscope(\.[a-z][a-z0-9_]*)+", m.name), m.name
        assert not m.name.endswith(("total", "_seconds", "_bytes")), m.name  # the Prometheus translation adds those
        assert _UNIT.match(m.unit), (m.name, m.unit)
        assert set(m.attributes) <= set(ATTRIBUTES) and {"rank", "node"} <= set(m.attributes), m.name
        assert m.description.strip()
        assert (m.buckets is not None) == (m.instrument is Instrument.HISTOGRAM)
        if m.instrument is Instrument.HISTOGRAM:
            assert m.unit == "s"


def test_the_brief_s_metrics_are_declared():
    """What the issue asks for, by meaning (each constant exists, so nobody has to spell a name)."""
    wanted = [
        M.LOADER_WAIT, M.LOADER_WAIT_DURATION, M.LOADER_TIME_TO_FIRST_BATCH, M.LOADER_WAIT_STAGE, M.LOADER_BATCHES,
        M.LOADER_SAMPLES, M.LOADER_BYTES, M.DOWNLOAD_DURATION, M.DOWNLOAD_BYTES, M.DOWNLOAD_RETRIES, M.DOWNLOAD_ERRORS,
        M.DOWNLOAD_IN_FLIGHT, M.CACHE_SIZE, M.CACHE_EVICTIONS, M.CACHE_HITS, M.CACHE_MISSES, M.PREFETCH_DEPTH,
        M.LOADER_QUEUE_DEPTH, M.LOADER_WORKERS, M.EVENTS_DROPPED, M.KNOB_VALUE,
    ]  # fmt: skip
    assert all(m in METRICS for m in wanted)
    assert registry.STAGES == ("download", "decompress", "read", "decode", "idle")


def test_histogram_bounds_are_seconds_for_data_loading():
    assert BUCKETS_S == tuple(sorted(BUCKETS_S)) and BUCKETS_S[0] == 1e-5 and BUCKETS_S[-1] == 60.0


def test_a_bad_declaration_is_refused():
    with pytest.raises(ValueError, match="chunk"):
        Metric("streamscope.x", Instrument.COUNTER, "1", "x", ("rank", "chunk"))  # per-chunk labels: unbounded
    with pytest.raises(ValueError):
        Metric("loader.wait", Instrument.COUNTER, "s", "x")
    with pytest.raises(KeyError, match="streamscope.nope"):
        registry.by_name("streamscope.nope")


def test_the_readme_table_is_current():
    text = (ROOT / "src" / "streamscope" / "events" / "README.md").read_text()
    assert text == registry.readme_with_table(text), (
        "src/streamscope/events/README.md's metric table is stale: run `python -m streamscope.events.metric_table`"
    )
    for m in METRICS:
        assert f"| `{m.name}` |" in text
