"""convert holds only what is open at one time: peak traced memory does not grow with the log."""

from __future__ import annotations

import os
import sys
import tracemalloc

import pytest

from trace_tools.convert import convert

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks"))
from bench_trace_tools import generate  # noqa: E402


def _peak(log: str, out: str) -> int:
    tracemalloc.start()
    try:
        convert(log, out)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.slow
@pytest.mark.parametrize("ext", ["json.gz", "pftrace"])
def test_peak_memory_does_not_grow_with_log(tmp_path, ext):
    small, big = str(tmp_path / "s.log"), str(tmp_path / "b.log")
    generate(small, 1_000)
    generate(big, 10_000)
    _peak(small, str(tmp_path / f"warm.{ext}"))  # imports and caches out of the way
    p_small = _peak(small, str(tmp_path / f"s.{ext}"))
    p_big = _peak(big, str(tmp_path / f"b.{ext}"))
    assert os.path.getsize(tmp_path / f"b.{ext}") > 5 * os.path.getsize(tmp_path / f"s.{ext}")
    # ten times the lines, (almost) the same peak: well under the size of the log itself
    assert p_big < p_small + 256 * 1024, (p_small, p_big)
    assert p_big < os.path.getsize(big) / 4
