"""Reading the committed dashboard JSON in tests: its panels, PromQL expressions and variables (no Grafana SDK,
so the checks of the JSON itself run on any Python)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

DASHBOARDS = Path(__file__).resolve().parents[2] / "dashboards"
STREAMSCOPE_JSON = DASHBOARDS / "streamscope.json"

#: Keys of a Prometheus annotation that Grafana's Prometheus data source reads but @grafana/schema 11.6's
#: ``AnnotationQuery`` does not declare (its ``target`` is a bare ``DataQuery``): tsc would call them excess.
PROMETHEUS_ANNOTATION_KEYS = frozenset({"expr", "step", "titleFormat", "tagKeys", "textFormat", "useValueForTime"})


def load(path: Path = STREAMSCOPE_JSON) -> dict[str, Any]:
    return json.loads(path.read_text())


def panels(doc: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every panel, rows and the panels of collapsed rows included."""

    def walk(ps: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        for p in ps:
            yield p
            yield from walk(p.get("panels") or [])

    yield from walk(doc.get("panels") or [])


def targets(doc: dict[str, Any]) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    """(panel, target) for every query of every panel."""
    for p in panels(doc):
        for t in p.get("targets") or []:
            yield p, t


def annotations(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return list((doc.get("annotations") or {}).get("list") or [])


def expressions(doc: dict[str, Any]) -> dict[str, str]:
    """Every PromQL expression of the dashboard, by where it is ("panel title / refId", "annotation name")."""
    out = {f"{p.get('title')} / {t.get('refId')}": t["expr"] for p, t in targets(doc) if "expr" in t}
    out.update({f"annotation {a.get('name')}": a["expr"] for a in annotations(doc) if "expr" in a})
    return out


def variables(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {v["name"]: v for v in (doc.get("templating") or {}).get("list") or []}


_LABEL_VALUES = re.compile(r"^label_values\((?:(?P<selector>.+),\s*)?(?P<label>\w+)\)$")


def variable_promql(query: str) -> tuple[str, str]:
    """A ``label_values(selector, label)`` variable query as PromQL giving one series per value, and the label."""
    m = _LABEL_VALUES.match(query.strip())
    if m is None or not m["selector"]:
        raise ValueError(f"not a label_values(selector, label) query: {query!r}")
    return f"count by ({m['label']}) ({m['selector']})", m["label"]


def for_tsc(doc: dict[str, Any]) -> dict[str, Any]:
    """``doc`` without the Prometheus keys of its Prometheus annotations (:data:`PROMETHEUS_ANNOTATION_KEYS`)."""
    out = json.loads(json.dumps(doc))
    for a in annotations(out):
        if (a.get("datasource") or {}).get("type") == "prometheus":
            for key in PROMETHEUS_ANNOTATION_KEYS:
                a.pop(key, None)
    return out
