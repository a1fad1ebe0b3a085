"""Docs generated from code stay in step with it."""

import pathlib

from streamscope.cli import knobs_markdown

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_knobs_doc_is_current():
    on_disk = (ROOT / "docs" / "knobs.md").read_text()
    assert on_disk == knobs_markdown(), (
        "docs/knobs.md is stale: run `python -m streamscope knobs --markdown > docs/knobs.md`"
    )


def test_every_knob_row_has_env_and_doc():
    rows = [line for line in knobs_markdown().splitlines() if line.startswith("| `")]
    assert len(rows) >= 10
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert cells[3] and cells[5], row
