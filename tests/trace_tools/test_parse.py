"""The line parser follows Litracer's rules; the reader counts every line it does not turn into an event."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.trace_tools.helpers import LITDATA_LOG, STREAMSCOPE_LOG
from trace_tools.errors import TraceToolError
from trace_tools.parse import MAX_LINE, ParseStats, parse_line, read_events, split_line


def test_litdata_line():
    ev = parse_line(
        "ts:1715000000123456.789;PID:4242; TID:139871234567; name: download;ph: B;cat: download;cname: rail_load;"
        "chunk: 7;dist_world_size: 1;dist_global_rank: 0;dist_num_nodes: 1;worker_world_size: 4;worker_rank: 2;"
    )
    assert ev is not None
    assert (ev.ph, ev.name, ev.cat, ev.pid, ev.tid) == ("B", "download", "download", 4242, 139871234567)
    assert ev.ts == pytest.approx(1715000000123456.789)
    assert ev.args == {
        "chunk": "7",
        "dist_world_size": "1",
        "dist_global_rank": "0",
        "dist_num_nodes": "1",
        "worker_world_size": "4",
        "worker_rank": "2",
    }


def test_rules_first_colon_trim_lowercase_and_pieces_without_colon():
    d = split_line("  URL : s3://bucket/a:b ; Note:a b;junk piece; : empty key;ph: X")
    assert d == {"url": "s3://bucket/a:b", "note": "a b", "ph": "X"}
    assert parse_line("name: x; cat: read;") is None  # no ph: not an event
    ev = parse_line("ph: X; name: d; ts: 1000.5; dur: 250.25; pid: 12.7; tid: 7; cat: io;")
    assert ev is not None and (ev.ts, ev.dur, ev.pid) == (1000.5, 250.25, 12)
    with pytest.raises(ValueError, match="ts 'soon'"):
        parse_line("ph: B; ts: soon; name: x")
    with pytest.raises(ValueError, match="no ts"):
        parse_line("ph: B; name: x")


values = st.text(alphabet=st.characters(blacklist_characters=";\n\r", blacklist_categories=("Cs",)), max_size=30)


@settings(max_examples=100, deadline=None)
@given(st.dictionaries(st.from_regex(r"[a-z][a-z0-9_]{0,10}", fullmatch=True), values, max_size=6))
def test_args_round_trip(args):
    args = {k: v for k, v in args.items() if k not in {"ph", "name", "ts", "dur", "pid", "tid", "cat", "cname", "s"}}
    text = "ts: 5.0; pid: 1; tid: 2; name: n; cat: read; " + "".join(f"{k}: {v}; " for k, v in args.items()) + "ph: E;"
    ev = parse_line(text)
    assert ev is not None and ev.args == {k: v.strip() for k, v in args.items()}


def _read(path: str) -> tuple[list, ParseStats]:
    stats = ParseStats()
    return list(read_events(path, stats)), stats


def test_golden_logs_counts():
    evs, st_ = _read(LITDATA_LOG)
    assert (st_.lines, st_.events, st_.no_ph, st_.unreadable) == (30, 27, 3, 0)
    assert "_apply_delete(0, skip_lock=False) called" in st_.examples["no_ph"][0]
    evs, st_ = _read(STREAMSCOPE_LOG)
    assert (st_.lines, st_.events, st_.no_ph) == (39, 39, 0)
    assert [e.line for e in evs] == list(range(1, 40))


def test_truncated_last_line_skipped_and_counted(tmp_path):
    p = tmp_path / "t.log"
    p.write_text("ts: 1; pid: 1; tid: 1; name: a; cat: read; ph: B;\nts: 2; pid: 1; tid: 1; name: a; cat: re")
    evs, s = _read(str(p))
    assert len(evs) == 1 and s.truncated_last == 1
    # a complete last line merely lacking the newline is kept
    p.write_text("ts: 1; pid: 1; tid: 1; name: a; cat: read; ph: B;\nts: 2; pid: 1; tid: 1; name: a; cat: read; ph: E;")
    evs, s = _read(str(p))
    assert len(evs) == 2 and s.truncated_last == 0


def test_binary_garbage_and_long_lines_are_unreadable(tmp_path):
    p = tmp_path / "g.log"
    good = b"ts: 1; pid: 1; tid: 1; name: a; cat: read; ph: I;\n"
    p.write_bytes(good + b"\xff\xfe\x00garbage\x80\n" + b"x" * (MAX_LINE + 10) + b"\n" + good)
    evs, s = _read(str(p))
    assert len(evs) == 2 and s.unreadable == 2 and s.lines == 4


def test_empty_missing_and_directory(tmp_path):
    (tmp_path / "e.log").write_bytes(b"")
    with pytest.raises(TraceToolError, match="empty"):
        _read(str(tmp_path / "e.log"))
    with pytest.raises(TraceToolError, match="no such file"):
        _read(str(tmp_path / "nope.log"))
    with pytest.raises(TraceToolError, match="is a directory"):
        _read(str(tmp_path))
