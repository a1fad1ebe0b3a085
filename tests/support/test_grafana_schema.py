"""tsc with @grafana/schema 11.6.0 passes valid dashboard JSON and names what is wrong in invalid JSON."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from tests.support import grafana_schema
from tests.support.grafana_schema import ALLOWED_VARIABLE_KEYS, prepare_dashboard, tsc_check_dashboards

MINIMAL: dict[str, Any] = {
    "title": "minimal",
    "uid": "minimal",
    "schemaVersion": 41,
    "refresh": "5s",
    "time": {"from": "now-15m", "to": "now"},
    "templating": {
        "list": [
            {
                "type": "query",
                "name": "job",
                "query": "label_values(up, job)",
                "multi": True,
                "includeAll": True,
                "datasource": {"type": "prometheus", "uid": "${datasource}"},
            }
        ]
    },
    "panels": [
        {
            "type": "timeseries",
            "title": "samples/s",
            "gridPos": {"h": 8, "w": 12, "x": 0, "y": 0},
            "datasource": {"type": "prometheus", "uid": "${datasource}"},
            "fieldConfig": {"defaults": {"unit": "ops"}, "overrides": []},
            "targets": [{"refId": "A", "expr": 'sum(rate(x_total{job=~"$job"}[$__rate_interval]))'}],
        }
    ],
}


def _variant(**edits: Any) -> dict[str, Any]:
    d = copy.deepcopy(MINIMAL)
    panel = d["panels"][0]
    if "panel_key" in edits:
        old, new = edits["panel_key"]
        panel[new] = panel.pop(old)
    if "top" in edits:
        d.update(edits["top"])
    if "variable" in edits:
        d["templating"]["list"][0].update(edits["variable"])
    return d


def _foundation_sdk_dashboard() -> dict[str, Any] | None:
    try:
        from grafana_foundation_sdk.builders import dashboard, prometheus, timeseries
        from grafana_foundation_sdk.cog.encoder import JSONEncoder
        from grafana_foundation_sdk.models.dashboard import DataSourceRef
    except ImportError:  # the SDK needs Python >= 3.11 (the test extra installs it there only)
        return None
    ds = DataSourceRef(type_val="prometheus", uid="${datasource}")
    built = (
        dashboard.Dashboard("sdk")
        .uid("sdk")
        .refresh("5s")
        .with_variable(dashboard.DatasourceVariable("datasource").type("prometheus"))
        .with_variable(dashboard.QueryVariable("job").datasource(ds).query("label_values(up, job)").multi(True))
        .with_panel(
            timeseries.Panel()
            .title("samples/s")
            .unit("ops")
            .datasource(ds)
            .with_target(prometheus.Dataquery().expr('sum(rate(x_total{job=~"$job"}[$__rate_interval]))').ref_id("A"))
        )
        .build()
    )
    return json.loads(json.dumps(built, cls=JSONEncoder))


CASES: dict[str, Any] = {
    "minimal": MINIMAL,
    "misspelled_panel_key": _variant(panel_key=("gridPos", "gridPoss")),
    "refresh_as_number": _variant(top={"refresh": 5}),
    "targets_as_string": _variant(top={"panels": [dict(MINIMAL["panels"][0], targets="x")]}),
    "auto_keys_on_a_variable": _variant(variable={"auto": False, "auto_min": "10s", "auto_count": 30}),
    "auto_keys_and_a_typo": _variant(variable={"auto": False, "auto_min": "10s", "multy": True}),
    "auto_keys_outside_variables": _variant(top={"auto": False}),
}


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[str]]:
    """Every case through one tsc run (each run costs 1.5-3 s), from files as the dashboards will be."""
    d = tmp_path_factory.mktemp("dashboards")
    paths = []
    cases = dict(CASES)
    sdk = _foundation_sdk_dashboard()
    if sdk is not None:
        cases["foundation_sdk"] = sdk
    for name, doc in cases.items():
        (d / f"{name}.json").write_text(json.dumps(doc, indent=1))
        paths.append(d / f"{name}.json")
    return {Path(k).stem: v for k, v in tsc_check_dashboards(paths).items()}


def test_minimal_valid_dashboard_passes(results: dict[str, list[str]]) -> None:
    assert results["minimal"] == []


def test_misspelled_key_is_flagged_with_its_line(results: dict[str, list[str]]) -> None:
    (err,) = results["misspelled_panel_key"]
    assert "'\"gridPoss\"' does not exist in type 'Panel<" in err
    assert err.startswith("line ") and err.endswith('"gridPoss": {')


def test_wrong_types_are_flagged(results: dict[str, list[str]]) -> None:
    (err,) = results["refresh_as_number"]
    assert "Type 'number' is not assignable to type 'string'" in err and '"refresh": 5' in err
    (err,) = results["targets_as_string"]
    assert "not assignable" in err and '"targets": "x"' in err


def test_foundation_sdk_auto_keys_are_allowed_on_variables_only(results: dict[str, list[str]]) -> None:
    assert results["auto_keys_on_a_variable"] == []
    (err,) = results["auto_keys_outside_variables"]
    assert "'\"auto\"' does not exist in type 'Dashboard'" in err


def test_allow_list_does_not_hide_another_typo_in_the_same_variable(results: dict[str, list[str]]) -> None:
    # tsc reports one excess key per object literal: the auto keys are dropped, not filtered from its output
    (err,) = results["auto_keys_and_a_typo"]
    assert "'\"multy\"' does not exist in type 'VariableModel'" in err


def test_foundation_sdk_output_passes(results: dict[str, list[str]]) -> None:
    if "foundation_sdk" not in results:
        pytest.skip("grafana-foundation-sdk needs Python >= 3.11")
    assert results["foundation_sdk"] == []


def test_prepare_dashboard_drops_only_the_allow_listed_variable_keys() -> None:
    doc = CASES["auto_keys_and_a_typo"]
    out = prepare_dashboard(doc)
    assert set(doc["templating"]["list"][0]) - set(out["templating"]["list"][0]) == {"auto", "auto_min"}
    assert "multy" in out["templating"]["list"][0] and "auto" in doc["templating"]["list"][0]  # input untouched
    assert ALLOWED_VARIABLE_KEYS == {"auto", "auto_count", "auto_min"}


def test_a_file_that_is_not_a_dashboard_is_a_clear_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ValueError, match="bad.json is not JSON"):
        tsc_check_dashboards([bad])
    bad.write_text("[1, 2]")
    with pytest.raises(ValueError, match="bad.json holds a JSON list, not a dashboard object"):
        tsc_check_dashboards([bad])


@pytest.mark.parametrize(("ci", "outcome"), [("", pytest.skip.Exception), ("true", pytest.fail.Exception)])
def test_without_the_types_and_without_npm_it_skips_or_fails_under_ci(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ci: str, outcome: type[BaseException]
) -> None:
    monkeypatch.setenv("STREAMSCOPE_GRAFANA_SCHEMA_DIR", str(tmp_path / "empty"))
    monkeypatch.setenv("CI", ci)
    monkeypatch.setattr(grafana_schema.shutil, "which", lambda _name: None)
    with pytest.raises(outcome, match="npm is not installed"):
        grafana_schema.ensure_tsc()
