"""The README's code, run as a user runs it: copied into a script of its own and executed in a fresh process."""

from __future__ import annotations

import json
import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _first_python_block_after(heading: str) -> str:
    text = (ROOT / "README.md").read_text()
    section = text[text.index(heading) :]
    match = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert match, f"no python block after {heading!r}"
    return match.group(1)


def test_the_switching_from_litdata_snippet_runs_unchanged(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(_first_python_block_after("## Switching from LitData"))
    proc = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    index = json.loads((tmp_path / "data" / "optimized" / "index.json").read_text())
    assert sum(c["chunk_size"] for c in index["chunks"]) == 2_000
