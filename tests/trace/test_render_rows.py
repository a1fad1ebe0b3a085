"""The vectorised line renderer: every number reads back exactly, every line of a group has one width."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from streamscope.trace import render_rows as render_rows_module
from streamscope.trace.render_rows import render_rows

_MAGNITUDES = st.sampled_from([1, 10, 999, 10**4, 10**5, 10**8, 10**12, 10**15, 2**62])


@st.composite
def _columns(draw: st.DrawFn) -> tuple[int, list[tuple[list[int], bool]]]:
    n = draw(st.integers(1, 40))
    cols = []
    for _ in range(draw(st.integers(1, 4))):
        top = draw(_MAGNITUDES)
        values = draw(st.lists(st.integers(0, top), min_size=n, max_size=n))
        if draw(st.booleans()):  # a timestamp-like column: large values sharing their leading digits
            base = draw(st.integers(10**18, 2 * 10**18))
            values = [base + v % 10**9 for v in values]
        cols.append((values, draw(st.booleans())))
    return n, cols


def _expected(v: int, dec3: bool) -> str:
    return f"{v // 1000}.{v % 1000:03d}" if dec3 else str(v)


@settings(max_examples=200, deadline=None)
@given(_columns(), st.sampled_from([1, 3, 1024]))
def test_numbers_read_back_exactly_and_lines_have_one_width(case, rows):
    n, cols = case
    old = render_rows_module._ROWS
    render_rows_module._ROWS = rows  # blocks of rows: the block boundaries must not show
    try:
        segs: list = []
        for i, (values, dec3) in enumerate(cols):
            segs += [f"k{i}: ", (np.array(values, dtype=np.int64), dec3), "; "]
        m = render_rows(n, [*segs, "end\n"])
    finally:
        render_rows_module._ROWS = old
    assert m.shape[0] == n  # one width: a uint8 matrix
    for r, line in enumerate(bytes(m.tobytes()).decode().splitlines()):
        fields = [p.split(": ", 1)[1] for p in line.split("; ")[:-1]]
        # right-aligned: the padding is leading spaces only, never a zero before a number's first digit
        assert [f.lstrip(" ") for f in fields] == [_expected(values[r], dec3) for values, dec3 in cols]


def test_a_negative_value_is_refused():
    try:
        render_rows(2, ["x: ", (np.array([1, -1], dtype=np.int64), False), "\n"])
    except ValueError:
        return
    raise AssertionError("a negative value was rendered")
