from __future__ import annotations

import os
import re
import resource
import signal
import subprocess
import sys
import textwrap

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamscope._core.errors import TraceConfigError
from streamscope.events import EventBatch
from streamscope.trace.exporters import LitracerFileSink
from streamscope.trace.files import open_log
from streamscope.trace.litracer import MAX_VALUE_CHARS, encode, sanitize_key, sanitize_value
from tests.support.litracer_parser import LitracerParser, ParseError, check_line, check_log

ENV = {"dist_world_size": 1, "dist_global_rank": 0, "dist_num_nodes": 1, "worker_world_size": 2, "worker_rank": 1}


def _batch(*events):
    return EventBatch(list(events), 1_000_000_000_000, dict(ENV))


def test_golden_line():
    text = encode(_batch(("B", "download", "download", 123_456_789, 42, 7, {"chunk": 3, "url": "s3://b/k:1"})))
    assert text == (
        "ts: 1000123456.789; pid: 42; tid: 7; name: download; cat: download; cname: rail_load; "
        "chunk: 3; url: s3://b/k:1; dur: 0; s: t; dist_world_size: 1; dist_global_rank: 0; dist_num_nodes: 1; "
        "worker_world_size: 2; worker_rank: 1; ph: B;\n"
    )
    ev = check_line(text[:-1])
    assert ev["ts"] == pytest.approx(1000123456.789)
    assert ev["args"] == {"chunk": "3", "url": "s3://b/k:1", **{k: str(v) for k, v in ENV.items()}}


def test_struct_collisions_renamed_and_env_override_kept():
    text = encode(_batch(("I", "x", "crash", 0, 1, 2, {"name": "evil", "TS": 5, "a:b": 1, "worker_rank": 9, "dur": 3})))
    ev = check_line(text[:-1])
    assert ev["name"] == "x" and ev["ts"] == pytest.approx(1e9)
    assert ev["args"]["arg_name"] == "evil" and ev["args"]["arg_ts"] == "5" and ev["args"]["a_b"] == "1"
    assert ev["args"]["worker_rank"] == "9" and ev["args"]["arg_dur"] == "3"


def test_x_event_carries_dur():
    ev = check_line(encode(_batch(("X", "step", "batch", 0, 1, 2, {"dur": 12.5})))[:-1])
    assert ev["dur"] == 12.5 and "arg_dur" not in ev["args"]


def test_struct_reuse_cannot_leak_between_lines():
    text = encode(
        _batch(
            ("X", "a", "read", 10, 1, 2, {"dur": 5}),
            ("B", "b", "sample", 20, 1, 3, {}),
        )
    )
    evs = LitracerParser().parse_text(text)
    assert "dur" not in evs[1] and evs[1]["tid"] == 3 and evs[1]["cat"] == "sample"


_text = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=40)


@settings(max_examples=300, deadline=None)
@given(
    name=_text,
    fields=st.dictionaries(
        _text, st.one_of(_text, st.integers(), st.floats(allow_nan=True), st.booleans()), max_size=6
    ),
)
def test_random_strings_never_break_a_line(name, fields):
    text = encode(_batch(("B", name, "read", 5, 1, 2, fields), ("E", name, "read", 6, 1, 2, fields)))
    evs = check_log(text)
    assert len(evs) == 2
    assert [e["ph"] for e in evs] == ["B", "E"]
    assert evs[0]["name"] == sanitize_value(name)
    # each value survives as its sanitized form (unless its key collided with another one)
    owners = [sanitize_key(k).lower() for k in fields]
    for k, v in fields.items():
        plain = re.fullmatch(r"[a-z_][a-z0-9_]*", k) is not None and owners.count(sanitize_key(k).lower()) == 1
        if plain and k not in ("name", "ph", "ts", "dur", "pid", "tid", "cat", "cname", "s", "args") and k not in ENV:
            assert evs[0]["args"][k] == sanitize_value(v)


def test_long_values_are_cut():
    ev = check_line(encode(_batch(("I", "x", "crash", 0, 1, 2, {"error": "y" * 100_000})))[:-1])
    assert len(ev["args"]["error"]) == MAX_VALUE_CHARS


def test_check_line_rejects_incomplete_lines():
    with pytest.raises(ParseError):
        check_line("ts: 1; pid: 1; ph: B;")
    with pytest.raises(ParseError):
        check_line("_apply_delete(3) called")


def test_unwritable_log_path_is_a_clear_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(TraceConfigError, match="file/trace.log"):
        open_log(str(blocker / "trace.log"))


def test_full_disk_counts_drops_and_raises(tmp_path):
    sink = LitracerFileSink(str(tmp_path / "ok.log"))
    sink.shutdown()
    sink.fd = os.open("/dev/full", os.O_WRONLY)
    with pytest.raises(OSError):
        sink.export(_batch(("I", "x", "crash", 0, 1, 2, {})))
    assert sink.dropped_events == 1
    sink.shutdown()


_FSIZE_CHILD = textwrap.dedent(
    """
    import resource, signal, sys
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (2500, 2500))
    from streamscope import events as ev
    from streamscope.api.tracing import enable_tracer, flush_tracer
    enable_tracer("chunk", log_file=sys.argv[1], flush_interval=60)
    for i in range(40):
        with ev.span("download", "download", chunk=i, url="s3://bucket/key"):
            pass
    flush_tracer()
    for i in range(5):
        ev.instant("crash", "crash", exception="E", error="E: after the disk filled")
    flush_tracer()
    print("data path alive")
    """
)


@pytest.mark.skipif(not hasattr(resource, "RLIMIT_FSIZE") or not hasattr(signal, "SIGXFSZ"), reason="posix")
def test_disk_full_while_tracing_leaves_no_malformed_line(tmp_path):
    log = tmp_path / "t.log"
    env = dict(os.environ)
    for k in list(env):
        if k.startswith(("STREAMSCOPE_", "LITDATA_")):
            del env[k]
    r = subprocess.run(
        [sys.executable, "-c", _FSIZE_CHILD, str(log)], env=env, capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 0, r.stderr
    assert "data path alive" in r.stdout
    assert "failed" in r.stderr  # reported once on stderr
    data = log.read_text()
    assert 0 < len(data) <= 2500
    parser = LitracerParser()
    complete = 0
    for line in data.split("\n"):
        if parser.parse_line(line) is not None:
            check_line(line)  # any line Litracer would read is complete
            complete += 1
    assert 0 < complete < 80


def test_compact_x_event_takes_dur_from_its_last_field():
    text = encode(
        _batch(
            ("X", "sample", "sample", 0, 1, 2, {"index": 4, "dur": 12.25}),
            ("I", "retry", "download", 0, 1, 2, {"index": 4, "dur": 12.25}),
        )
    )
    x, i = check_log(text)
    assert x["dur"] == 12.25 and x["args"]["index"] == "4" and "arg_dur" not in x["args"]
    assert "dur" not in i and i["args"]["arg_dur"] == "12.25"


class _Unprintable:
    def __str__(self):
        raise RuntimeError("no")


def test_unprintable_value_does_not_cost_the_batch():
    ev = check_line(encode(_batch(("I", "x", "crash", 0, 1, 2, {"obj": _Unprintable(), "n": 1})))[:-1])
    assert ev["args"]["obj"] == "<unprintable _Unprintable>" and ev["args"]["n"] == "1"
