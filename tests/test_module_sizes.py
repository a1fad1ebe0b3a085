"""No module of src/streamscope over 600 lines, and LitData's faces thin (issue 33, deliverable 7).

A module past 600 lines holds more than one thing to a newcomer; the tuner's controller grew to 668 before this test
existed (its candidates moved to ``tune/propose.py``). The faces LitData users import (``streaming/reader.py``,
``writer.py``, ``cache.py``) only adapt the engine: under 150 lines each.
"""

from __future__ import annotations

import pathlib

SRC = pathlib.Path(__file__).resolve().parents[1] / "src" / "streamscope"
MOST = 600
FACES = {"streaming/reader.py": 150, "streaming/writer.py": 150, "streaming/cache.py": 150}


def _lines(p: pathlib.Path) -> int:
    return len(p.read_text(encoding="utf-8").splitlines())


def test_no_module_is_over_600_lines():
    sizes = {str(p.relative_to(SRC)): _lines(p) for p in sorted(SRC.rglob("*.py"))}
    assert len(sizes) > 100  # the walk found the package
    over = {name: n for name, n in sizes.items() if n > MOST}
    assert not over, f"modules over {MOST} lines: {over}"


def test_the_litdata_faces_stay_thin():
    for name, most in FACES.items():
        n = _lines(SRC / name)
        assert n < most, f"{name}: {n} lines (under {most} wanted)"
