"""Render the current results (``benchmarks/results/*.json``) into the tables of ``benchmarks/README.md``.

Each benchmark's section of the README holds a block between ``<!-- results:NAME -->`` and
``<!-- /results:NAME -->``; this script replaces the block with the summary table of ``results/NAME.json`` and
a line saying what produced it (commit, dirty flag, date, machine, load, versions, command). The tables are
never edited by hand: run a benchmark, then this script, and commit both.

    python benchmarks/report.py            # rewrite the README's result blocks
    python benchmarks/report.py --check    # exit 1 if the README does not match the results
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["NOT_YET", "headline", "provenance", "render", "render_block", "table"]

HERE = os.path.dirname(os.path.abspath(__file__))
README = os.path.join(HERE, "README.md")
#: The project's README quotes each benchmark's ratios in one line (``<!-- headline:NAME -->``), rendered here too.
ROOT_README = os.path.join(os.path.dirname(HERE), "README.md")
RESULTS = os.path.join(HERE, "results")
#: Scripts that still write a result format of their own (their README sections are written by hand).
NOT_YET: set[str] = set()
BLOCK = re.compile(r"<!-- results:(?P<name>[\w.-]+) -->\n.*?<!-- /results:(?P=name) -->", re.DOTALL)
HEADLINE = re.compile(r"<!-- headline:(?P<name>[\w.-]+) -->.*?<!-- /headline:(?P=name) -->", re.DOTALL)


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        if abs(value) >= 1000:
            return f"{value:,.0f}"
        digits = 4 if abs(value) < 10 else 2
        return f"{value:.{digits}f}".rstrip("0").rstrip(".")
    return str(value).replace("|", "\\|").replace("\n", " ")


def table(rows: Sequence[Mapping[str, Any]]) -> str:
    """A markdown table of ``rows`` (columns: the keys in first-seen order; numbers right-aligned)."""
    if not rows:
        return "(no rows)"
    cols: list[str] = []
    for row in rows:
        cols += [k for k in row if k not in cols]
    numeric = {c: all(isinstance(r.get(c), (int, float)) or r.get(c) is None for r in rows) for c in cols}
    lines = ["| " + " | ".join(_cell(c) for c in cols) + " |"]
    lines.append("|" + "|".join("---:" if numeric[c] else "---" for c in cols) + "|")
    lines += ["| " + " | ".join(_cell(r.get(c)) for c in cols) + " |" for r in rows]
    return "\n".join(lines)


def provenance(meta: Mapping[str, Any]) -> str:
    """One line: which tree, when, on what machine and under what load, with which versions and command."""
    parts = []
    commit = meta.get("commit")
    if commit:
        dirty = meta.get("dirty")
        parts.append(f"commit `{commit[:9]}`" + (" (dirty)" if dirty else "" if dirty is False else " (dirty: unknown)"))
    if meta.get("written_at"):
        parts.append(str(meta["written_at"])[:10])
    machine = meta.get("machine") or {}
    cpus = machine.get("cpu_count")
    if cpus:
        desc = f"{cpus} CPUs"
        if machine.get("cpu_model"):
            desc += f" ({machine['cpu_model']})"
        if machine.get("ram_bytes"):
            desc += f", {machine['ram_bytes'] / 2**30:.0f} GiB RAM"
        parts.append(desc)
    loads = [machine.get("load_avg_start"), machine.get("load_avg_end")]
    loads = [f"{x[0]:.1f}" for x in loads if x]
    if loads:
        parts.append("load " + " → ".join(loads))
    versions = meta.get("versions") or {}
    known = [f"{k} {v}" for k, v in versions.items() if v]
    if known:
        parts.append(", ".join(known))
    line = "Measured at " + "; ".join(parts) + "."
    if meta.get("argv"):
        line += f" Command: `{' '.join(meta['argv'])}`."
    if meta.get("note"):
        line += f" Note: {meta['note']}."
    return line


def render_block(name: str, results_dir: str = RESULTS) -> str:
    """The README block of benchmark ``name``, markers included."""
    path = os.path.join(results_dir, f"{name}.json")
    if not os.path.exists(path):
        body = f"No current result (`results/{name}.json` does not exist yet)."
    else:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
        body = f"{provenance(doc.get('meta', {}))}\n\n{table(doc.get('summary', []))}"
    return f"<!-- results:{name} -->\n{body}\n<!-- /results:{name} -->"


def _label(row: Mapping[str, Any]) -> str:
    """A summary row's name: its ``case``, else its first column as ``key=value``."""
    if "case" in row:
        return str(row["case"])
    key = next(iter(row))
    return f"{key}={_cell(row[key])}"


def headline(name: str, results_dir: str = RESULTS) -> str:
    """The one-line quote of benchmark ``name`` (each case's ``ratio``, and the commit and day it was measured at),
    markers included: what the project's README says about speed, so it never quotes a result that is gone."""
    path = os.path.join(results_dir, f"{name}.json")
    if not os.path.exists(path):
        body = "no current result"
    else:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
        ratios = [f"{_label(row)} {_cell(row['ratio'])}x" for row in doc.get("summary", [])
                  if isinstance(row.get("ratio"), (int, float))]
        meta = doc.get("meta", {})
        when = ", ".join(x for x in (f"commit `{str(meta.get('commit', ''))[:9]}`", str(meta.get("written_at", ""))[:10]) if x)
        body = f"{' · '.join(ratios) or 'no ratio'} ({when})"
    return f"<!-- headline:{name} -->{body}<!-- /headline:{name} -->"


def render(text: str, results_dir: str = RESULTS) -> str:
    """``text`` with every result block and headline replaced by its current rendering."""
    text = BLOCK.sub(lambda m: render_block(m.group("name"), results_dir), text)
    return HEADLINE.sub(lambda m: headline(m.group("name"), results_dir), text)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if README.md is not up to date with the results")
    ap.add_argument("--readme", default=None, help="one file to render (default: benchmarks/README.md and README.md)")
    args = ap.parse_args(argv)
    status = 0
    for readme in [args.readme] if args.readme else [README, ROOT_README]:
        with open(readme, encoding="utf-8") as f:
            text = f.read()
        new = render(text)
        if readme == README:
            names = {m.group("name") for m in BLOCK.finditer(text)}
            files = {n[: -len(".json")] for n in os.listdir(RESULTS) if n.endswith(".json")} - NOT_YET
            if files - names:
                print(f"results without a README block: {sorted(files - names)}", file=sys.stderr)
                status = 1
        if new == text:
            continue
        if args.check:
            print(f"{readme} is out of date: run python benchmarks/report.py", file=sys.stderr)
            status = 1
        else:
            with open(readme, "w", encoding="utf-8") as f:
                f.write(new)
            print(f"updated {readme}")
    return status


if __name__ == "__main__":
    sys.exit(main())
