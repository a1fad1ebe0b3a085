"""The committed dashboard JSON: registry names only, the issue's panels and variables, a sound layout; it
type-checks against @grafana/schema 11.6 (tsc) and every expression parses (promtool check rules).

These read dashboards/streamscope.json and need no Grafana SDK; test_generate.py checks that the JSON is what
the generator makes of the registry now.
"""

from __future__ import annotations

import copy
import re

import pytest

from streamscope.events.registry import METRICS, Instrument, M, Metric, prometheus_name
from tests.dashboards.dashboard_json import (
    PROMETHEUS_ANNOTATION_KEYS,
    annotations,
    expressions,
    for_tsc,
    load,
    panels,
    targets,
    variable_promql,
    variables,
)

ROWS = [
    "Overview",
    "Is the wait the loader's or the storage's?",
    "Wait attribution",
    "Throughput",
    "Storage",
    "Cache",
    "Tuner",
]
VARIABLES = ("job", "rank", "dataset")
GRAFANA_BUILTINS = {"__rate_interval", "__range", "__interval"}
_NAME = re.compile(r"\bstreamscope_[a-z0-9_]+")
_VAR = re.compile(r"\$\{?(\w+)")


def _series_names(m: Metric) -> set[str]:
    base = prometheus_name(m)
    if m.instrument is Instrument.HISTOGRAM:
        return {f"{base}_bucket", f"{base}_sum", f"{base}_count"}
    return {base}


@pytest.fixture(scope="module")
def doc():
    return load()


def _queries_text(doc) -> list[str]:
    return list(expressions(doc).values()) + [v.get("query", "") for v in variables(doc).values()]


def test_every_name_comes_from_the_registry_and_every_metric_is_shown(doc):
    known = {n: m for m in METRICS for n in _series_names(m)}
    used: set[str] = set()
    for text in _queries_text(doc):
        for name in _NAME.findall(str(text)):
            assert name in known, f"{name!r} in {text!r} is no registry metric's Prometheus series"
            used.add(known[name].name)
    not_shown = sorted({m.name for m in METRICS} - used)
    assert not not_shown, f"registry metrics on no panel (add one in dashboards/generate.py): {not_shown}"


def test_rows_in_order_and_a_sound_grid(doc):
    top = doc["panels"]
    assert [p["title"] for p in top if p["type"] == "row"] == ROWS
    assert top[0]["type"] == "row"
    ids = [p["id"] for p in panels(doc)]
    assert len(ids) == len(set(ids)), f"panel ids repeat: {ids}"
    cells: dict[tuple[int, int], str] = {}
    for p in panels(doc):
        g = p["gridPos"]
        assert 0 < g["w"] and g["x"] + g["w"] <= 24 and g["h"] > 0, f"{p['title']}: gridPos {g}"
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                assert (x, y) not in cells, f"{p['title']} overlaps {cells[(x, y)]} at {(x, y)}"
                cells[(x, y)] = p["title"]


def test_every_query_names_its_data_source_and_a_ref_id(doc):
    for p in panels(doc):
        if p["type"] == "row":
            continue
        assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, p["title"]
        refs = [t.get("refId") for t in p.get("targets") or []]
        assert refs and all(refs) and len(set(refs)) == len(refs), f"{p['title']}: refIds {refs}"
    for p, t in targets(doc):
        assert t["datasource"] == p["datasource"] and t["expr"].strip(), (p["title"], t)
    for a in annotations(doc):
        assert a["datasource"]["uid"] == "${datasource}" and a["expr"].strip(), a


def test_variables_job_rank_dataset_from_label_values(doc):
    vs = variables(doc)
    assert vs["datasource"]["type"] == "datasource" and vs["datasource"]["query"] == "prometheus"
    for name in VARIABLES:
        v = vs[name]
        assert v["type"] == "query" and v["multi"] and v["includeAll"] and v["allValue"] == ".*", v
        promql, label = variable_promql(v["query"])
        assert label == name and _NAME.search(promql), v["query"]
    for where, expr in expressions(doc).items():
        for var in _VAR.findall(expr):
            assert var in VARIABLES or var in GRAFANA_BUILTINS, f"{where}: ${var} is no dashboard variable"


def _panel_using(doc, *metrics: Metric, kind: str | None = None):
    """The panels whose queries read every one of ``metrics``."""
    found = []
    for p in panels(doc):
        text = " ".join(t.get("expr", "") for t in p.get("targets") or [])
        names = set(_NAME.findall(text))
        if all(names & _series_names(m) for m in metrics) and (kind is None or p["type"] == kind):
            found.append(p)
    return found


def test_the_issues_panels_are_there(doc):
    # exposed data-loading time per rank: wait over batches, in ms, by rank; and its max over ranks
    per_batch = _panel_using(doc, M.LOADER_WAIT, M.LOADER_BATCHES)
    assert any(
        p["fieldConfig"]["defaults"]["unit"] == "ms" and "by (job, rank)" in p["targets"][0]["expr"] for p in per_batch
    )
    assert any(t["expr"].startswith("max by (job) (1000 *") for p in per_batch for t in p["targets"])
    # % of step: the wait's rate alone, as a fraction of wall time
    share = [p for p in _panel_using(doc, M.LOADER_WAIT) if p["fieldConfig"]["defaults"]["unit"] == "percentunit"]
    assert share
    # the wait's attribution, stacked by stage
    (stages,) = _panel_using(doc, M.LOADER_WAIT_STAGE, kind="timeseries")
    assert stages["fieldConfig"]["defaults"]["custom"]["stacking"]["mode"] == "normal"
    assert "by (stage)" in stages["targets"][0]["expr"]
    # samples/s and MB/s
    assert _panel_using(doc, M.LOADER_SAMPLES) and [
        p for p in _panel_using(doc, M.LOADER_BYTES) if p["fieldConfig"]["defaults"]["unit"] == "Bps"
    ]
    # download latency p50/p99 and heatmap
    (quantiles,) = _panel_using(doc, M.DOWNLOAD_DURATION, kind="timeseries")
    assert [t["expr"].split(",")[0] for t in quantiles["targets"]] == [
        "histogram_quantile(0.5",
        "histogram_quantile(0.99",
    ]
    (hm,) = _panel_using(doc, M.DOWNLOAD_DURATION, kind="heatmap")
    assert hm["targets"][0]["format"] == "heatmap" and hm["options"]["calculate"] is False
    # retries and errors, cache bytes and hit ratio, downloads in flight, prefetch depth, knob values
    assert _panel_using(doc, M.DOWNLOAD_RETRIES, M.DOWNLOAD_ERRORS)
    assert _panel_using(doc, M.CACHE_SIZE)
    assert [p for p in _panel_using(doc, M.CACHE_HITS, M.CACHE_MISSES) if "/ (" in p["targets"][0]["expr"]]
    assert _panel_using(doc, M.DOWNLOAD_IN_FLIGHT) and _panel_using(doc, M.PREFETCH_DEPTH)
    assert _panel_using(doc, M.KNOB_VALUE)
    # the tuner's decisions as annotations: the knob gauge's changes
    (ann,) = [a for a in annotations(doc) if prometheus_name(M.KNOB_VALUE) in a.get("expr", "")]
    assert ann["enable"] and ann["expr"].startswith("changes(") and ann["expr"].endswith("> 0")


def test_the_json_type_checks_against_grafana_schema(doc):
    from tests.support.grafana_schema import tsc_check_dashboards

    broken = copy.deepcopy(doc)
    broken["panels"][1]["gridPoss"] = broken["panels"][1].pop("gridPos")  # the control: tsc must object
    ok, bad = tsc_check_dashboards([for_tsc(doc), for_tsc(broken)]).values()
    assert ok == [], "\n".join(ok)
    assert len(bad) == 1 and "gridPoss" in bad[0], bad


def test_only_the_prometheus_annotation_keys_are_left_out_of_the_type_check(doc):
    prepared = for_tsc(doc)
    assert prepared["panels"] == doc["panels"] and prepared["templating"] == doc["templating"]
    for before, after in zip(annotations(doc), annotations(prepared)):
        assert set(before) - set(after) <= PROMETHEUS_ANNOTATION_KEYS
        assert all(isinstance(before[k], str) for k in set(before) - set(after))


def test_every_expression_passes_promtool(doc):
    from tests.support.prometheus_server import promtool_check_rules

    exprs = list(expressions(doc).values()) + [
        variable_promql(v["query"])[0] for v in variables(doc).values() if v["type"] == "query"
    ]
    control = "sum by (job (x)"
    errors = promtool_check_rules([*exprs, control])
    assert list(errors) == [control], errors


_SELECTOR = re.compile(r"\b(streamscope_[a-z0-9_]+)\{([^}]*)\}")


def _filters(selector_body: str) -> frozenset[str]:
    """The dashboard variables a selector filters by (``rank=~"$rank"`` -> ``rank``)."""
    return frozenset(v for v in _VAR.findall(selector_body) if v in VARIABLES)


def test_both_sides_of_every_ratio_are_filtered_by_the_same_variables(doc):
    """A ratio of two metrics divides like by like: a wait that has no dataset label divided by the batches of the
    chosen $dataset would be a rank's whole wait over some of its batches (issue 31, item 11)."""
    ratios = {w: e for w, e in expressions(doc).items() if "\n  / " in e}
    assert any(prometheus_name(M.LOADER_WAIT) in e for e in ratios.values())  # the ms-per-batch panels are ratios
    for where, expr in ratios.items():
        num, den = expr.split("\n  / ", 1)
        sides = {
            side: {(n, _filters(body)) for n, body in _SELECTOR.findall(text)}
            for side, text in (("num", num), ("den", den))
        }
        used = {f for side in sides.values() for _, f in side}
        assert len(used) == 1, f"{where}: the two sides filter by different variables: {sides}"
        # and whatever a side aggregates, it keeps the same labels as the other (sum by (...) on one label set)
        groups = set(re.findall(r"\b(?:sum|max|avg) by \(([^)]*)\)", num)) | set(
            re.findall(r"\b(?:sum|max|avg) by \(([^)]*)\)", den)
        )
        assert len(groups - {"job"}) <= 1, f"{where}: sides grouped by {groups}"
    # the control: the ratio as it was, the batches filtered by $dataset and the wait not, is caught
    wait, batches = prometheus_name(M.LOADER_WAIT), prometheus_name(M.LOADER_BATCHES)
    old = (
        f'sum by (job, rank) (rate({wait}{{job=~"$job", rank=~"$rank"}}[1m]))\n  / '
        f'sum by (job, rank) (rate({batches}{{job=~"$job", rank=~"$rank", dataset=~"$dataset"}}[1m]))'
    )
    num, den = old.split("\n  / ", 1)
    assert {_filters(b) for _, b in _SELECTOR.findall(num)} != {_filters(b) for _, b in _SELECTOR.findall(den)}


def test_the_knob_values_are_split_by_unit(doc):
    """Bytes and counts are on two panels, each knob on the one of its unit (from _core/config.py), each once: a
    cache budget of 2.5e10 on the same linear axis as a prefetch depth of 2 flattens the depth (issue 31, item 11)."""
    from streamscope._core import config

    live = {row["name"]: row["unit"] for row in config.table() if row["live"]}
    in_bytes = {k for k, unit in live.items() if unit == "bytes"}
    assert in_bytes and live.keys() - in_bytes  # both kinds exist, or there would be nothing to split
    knob_panels = {p["title"]: p for p in _panel_using(doc, M.KNOB_VALUE, kind="timeseries")}
    assert set(knob_panels) == {"Live knob values: bytes", "Live knob values: counts"}, set(knob_panels)
    b, c = knob_panels["Live knob values: bytes"], knob_panels["Live knob values: counts"]
    assert b["fieldConfig"]["defaults"]["unit"] == "bytes" and c["fieldConfig"]["defaults"]["unit"] == "short"

    def shown(panel, knob: str) -> bool:
        (t,) = panel["targets"]
        m = re.search(r'knob(=~|!~)"([^"]*)"', t["expr"])
        assert m, t["expr"]
        hit = re.fullmatch(m.group(2), knob) is not None  # Prometheus anchors regex matchers
        return hit if m.group(1) == "=~" else not hit

    for knob, unit in live.items():
        assert (shown(b, knob), shown(c, knob)) == ((True, False) if knob in in_bytes else (False, True)), (knob, unit)
    assert all(k in b["description"] for k in in_bytes) and all(k in c["description"] for k in live.keys() - in_bytes)
