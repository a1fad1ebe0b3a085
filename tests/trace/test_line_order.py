"""The Litracer sink writes each batch's lines in ts order, keeping in-order runs (bulk entries) whole."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from streamscope.trace.line_order import ordered_pieces


def _joined(runs):
    return b"".join(ordered_pieces(runs))


@st.composite
def _runs(draw: st.DrawFn) -> list[tuple[list[int], bytes, int]]:
    runs = []
    for r in range(draw(st.integers(0, 8))):
        ts = draw(st.lists(st.integers(0, 50), min_size=0, max_size=12))
        if draw(st.booleans()):
            ts.sort()  # a bulk entry or series: in order within itself
        runs.append((ts, b"".join(f"run {r} line {k} ts {t}\n".encode() for k, t in enumerate(ts)), 0))
    return runs


@settings(max_examples=300, deadline=None)
@given(_runs())
def test_lines_come_out_in_ts_order_each_once(runs):
    out = _joined(runs)
    lines = out.split(b"\n")
    assert lines.pop() == b""
    expected = [line for _ts, data, _w in runs for line in data.split(b"\n")[:-1]]
    assert sorted(lines) == sorted(expected)  # every line exactly once
    ts = [int(line.rsplit(b" ", 1)[1]) for line in lines]
    assert ts == sorted(ts)
    # lines of one run with equal ts keep their order (the order they were recorded in)
    for r in range(len(runs)):
        mine = [line for line in lines if line.startswith(f"run {r} ".encode())]
        keys = [(int(line.rsplit(b" ", 1)[1]), int(line.split(b" ")[3])) for line in mine]
        assert keys == sorted(keys)


def test_a_run_is_kept_whole_when_nothing_falls_inside_it():
    series = ([10, 30, 50], b"s10\ns30\ns50\n", 4)  # fixed-width lines
    block = ([31, 32, 33], b"b31\nb32\nb33\n", 0)  # e.g. the samples of one batch, between two series events
    assert _joined([block, series]) == b"s10\ns30\nb31\nb32\nb33\ns50\n"
