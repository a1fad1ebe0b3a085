"""docs/telemetry.md's Prometheus section stays true: its table is generated, its names exist, its PromQL parses."""

from __future__ import annotations

import re
from pathlib import Path

from streamscope.events.registry import METRICS, Instrument, prometheus_name
from streamscope.telemetry import prometheus as prom

DOC = Path(__file__).resolve().parents[2] / "docs" / "telemetry.md"


def promql_examples() -> list[str]:
    """The expressions of the ```promql blocks of docs/telemetry.md (comments left out)."""
    text = DOC.read_text()
    blocks = re.findall(r"```promql\n(.*?)```", text, re.S)
    return [ln.strip() for b in blocks for ln in b.splitlines() if ln.strip() and not ln.strip().startswith("#")]


def served_names() -> set[str]:
    out = set()
    for m in METRICS:
        n = prometheus_name(m)
        out.add(n)
        if m.instrument is Instrument.HISTOGRAM:
            out |= {f"{n}_bucket", f"{n}_sum", f"{n}_count"}
    return out


def test_the_names_table_is_current():
    text = DOC.read_text()
    assert text == prom.doc_with_names(text), (
        "docs/telemetry.md is stale: run `python -m streamscope.telemetry.prometheus`"
    )


def test_every_name_the_doc_mentions_is_served():
    mentioned = set(re.findall(r"\bstreamscope_[a-z_]+[a-z]\b", DOC.read_text()))
    assert mentioned and mentioned <= served_names(), mentioned - served_names()


def test_the_promql_examples_parse():
    from tests.support.prometheus_server import promtool_check_rules

    exprs = promql_examples()
    assert len(exprs) >= 8
    assert promtool_check_rules(exprs) == {}
