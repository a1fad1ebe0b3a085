"""The Arrow column collator is exactly ``default_collate`` of the rows, over footers LitData 0.2.76 builds."""

from __future__ import annotations

import struct
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from torch.utils.data import default_collate

from streamscope.engine.collate import ArrowCollator
from streamscope.format.arrowchunk import ArrowChunk
from tests.format.conftest import same

pytest.importorskip("pyarrow")

_TEXT = st.text(alphabet="abcé ", max_size=5)
_I64 = st.integers(-(2**63), 2**63 - 1)
_KINDS: dict[str, Any] = {
    "int": _I64,
    "float": st.floats(allow_nan=False, width=64),
    "bool": st.booleans(),
    "str": _TEXT,
    "bytes": st.binary(max_size=4),
    "opt_int": st.none() | st.integers(-5, 5),
    "opt_str": st.none() | _TEXT,
    "int_or_float": st.integers(-5, 5) | st.floats(-1, 1),
    "vec2": st.lists(st.integers(-9, 9), min_size=2, max_size=2),
    "ragged": st.lists(st.integers(-9, 9), max_size=3),
    "struct": st.fixed_dictionaries({"k": st.integers(-9, 9), "s": _TEXT}),
    "none": st.none(),
}


@st.composite
def _tables(draw: Any) -> tuple[list[dict[str, Any]], int]:
    kinds = draw(st.lists(st.sampled_from(sorted(_KINDS)), min_size=1, max_size=4))
    names = [f"{k}{j}" for j, k in enumerate(kinds)]
    n = draw(st.sampled_from([1, 2, 7, 40, 257, 300]))
    base = draw(st.fixed_dictionaries({name: _KINDS[k] for name, k in zip(names, kinds)}))
    rows = []
    for i in range(n):  # one drawn row, varied cheaply: hypothesis draws per column, numpy fills the rest
        row = dict(base)
        for name, k in zip(names, kinds):
            if k == "int":
                row[name] = int(np.int64(base[name]) ^ i) if i else base[name]
            elif k == "float":
                row[name] = base[name] + i
            elif k == "bool":
                row[name] = bool(i % 2) ^ base[name]
            elif k in ("opt_int", "opt_str") and i % 3 == 1:
                row[name] = None
            elif k == "ragged":
                row[name] = base[name][: i % 4]
        rows.append(row)
    split = draw(st.integers(0, n))
    return rows, split


def _chunk(ld076: Any, rows: list[dict[str, Any]], compression: str | None) -> ArrowChunk | None:
    n = len(rows)
    head = struct.pack(f"<I{n + 1}I", n, *([4 * (n + 2)] * (n + 1)))
    data = ld076.call("litdata.streaming.item_loader.append_arrow_row_footer", head, rows, ipc_compression=compression)
    if data[-8:] != b"LDARW01\0":
        return None  # pyarrow cannot hold these rows: LitData writes items instead
    return ArrowChunk(data, "<test chunk>", n)


@pytest.mark.slow
@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(table=_tables(), compression=st.sampled_from([None, "zstd"]), data=st.data())
def test_collate_is_default_collate_of_the_rows(ld076: Any, table: Any, compression: Any, data: Any) -> None:
    rows, split = table
    chunks = [
        (_chunk(ld076, part, compression), off) for part, off in ((rows[:split], 0), (rows[split:], split)) if part
    ]
    assume(all(c is not None for c, _ in chunks))
    for c, off in chunks:  # the reader's rows are LitData's rows
        assert [c.sample(i) for i in range(c.num_items)] == rows[off : off + c.num_items]
    b = data.draw(st.integers(1, 12))
    picks = data.draw(st.lists(st.integers(0, len(rows) - 1), min_size=b, max_size=b))
    groups = []
    for c, off in chunks:
        pos = np.array([p for p, r in enumerate(picks) if off <= r < off + c.num_items], dtype=np.int64)
        if len(pos):
            groups.append((c, pos, np.array([picks[p] - off for p in pos], dtype=np.int64)))
    batch_rows = [rows[r] for r in picks]
    try:
        want: Any = default_collate(batch_rows)
    except Exception as exc:  # noqa: BLE001 - the collator must fail the same way
        want = exc
    try:
        got = ArrowCollator().collate(groups, b)
    except Exception as exc:  # noqa: BLE001
        got = exc
    if got is None:  # rows of chunks whose schemas differ: the caller collates the rows themselves
        assert [g[0].names for g in groups] != [groups[0][0].names] * len(groups)
        return
    if isinstance(want, Exception):
        assert type(got) is type(want) and str(got) == str(want)
    else:
        assert same(got, want), (got, want)
    for c, _ in chunks:
        c.close()
