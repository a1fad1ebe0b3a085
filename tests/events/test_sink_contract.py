"""The sink contract: every sink and exporter of the event bus gets the same recorded events and passes the same
checks, as the storage backends do (tests/storage/test_contract.py).

The events (tests/events/_sink_events.py) are a fixed list with spans of every category, an instant, a counter, a
bulk entry and a crash, and the values that break naive encoders: ``;`` and newlines, unicode, credentials in URLs
and in an error message, a span whose end is recorded after another thread's events. Each output is read back
through its real transport, the way a user's tool reads it:

* ``litracer``: :class:`~streamscope.trace.exporters.LitracerFileSink`'s file, re-parsed by trace_tools' reader
  and checked by ``streamscope-trace validate``;
* ``chrome`` and ``perfetto``: that file converted by ``streamscope-trace convert`` (the only way the project
  writes them), read with :mod:`json` (strict) and with Perfetto's protobuf classes;
* ``otlp``: ``enable_telemetry()`` and the event bus's span exporter in a process of its own, to the test suite's
  OTLP/HTTP receiver (tests/support/otlp_receiver.py), which decodes with ``opentelemetry-proto``;
* ``prometheus``: the metrics derived from those events, scraped from the endpoint by a real Prometheus and read
  with ``prometheus_client``'s parser.

Common checks: every event there once (no loss, no duplicate), names and categories kept, timestamps exact in the
output's unit (so monotone where the recording was) and per-thread ordered where the format promises it, the
tricky text kept readable, no credential anywhere. Exporters (the Litracer file sink, the OTLP span exporter and
the spool that carries a worker's spans to it) also go through OpenTelemetry's exporter contract: ``export``
returns an ``ExportResult``, ``force_flush`` and ``shutdown`` are idempotent and never raise, ``export`` after
``shutdown`` fails cleanly and delivers nothing.

What an output does not carry by design is said where it is checked: OTLP spans are chosen (no ``sample``,
``batch``, ``lock`` or counter events, instants other than ``crash``/``tune`` become events of the span open on
their thread: docs/telemetry.md); Litracer, Chrome and Perfetto turn ``;`` and line breaks into ``,`` and spaces
(the line format); Chrome and Perfetto counters belong to the process, not a thread.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import pytest

from streamscope import events as ev
from streamscope.events import Exporter, ExportResult, vocab
from streamscope.events.bus import BUF, STATE, expand
from streamscope.telemetry.spans import INSTANT_SPANS, PER_ITEM_CATEGORIES, selected
from streamscope.telemetry.spool import SpoolReader, SpoolSink
from streamscope.trace.exporters import LitracerFileSink
from tests.events._sink_events import (
    MAIN_TID,
    SECRETS,
    WORKER_TID,
    Expected,
    batch,
    contract_events,
    expected,
)
from tests.support.otlp_receiver import OTLPReceiver
from tests.support.tracing import clean_tracer, forked_result  # noqa: F401
from tests.trace_tools.helpers import load_chrome, load_perfetto
from trace_tools.parse import ParseStats, read_events

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OTLP_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_sink_contract_otlp.py")
#: The text of the read span's ``label`` field, as every line-format output must show it: ``;`` -> ``,``, each
#: line break -> a space; unicode kept.
UNICODE = "ünïcødé 数据 🚀"
LINE_FORMAT_LABEL = "a,b, c second line  third  " + UNICODE
RAW_LABEL = "a;b; c\nsecond line\r\nthird\u2028 " + UNICODE


def _trace_cli() -> list[str]:
    """``streamscope-trace`` as installed next to this interpreter (``python -m trace_tools`` is the same)."""
    exe = os.path.join(os.path.dirname(sys.executable), "streamscope-trace")
    return [exe] if os.path.exists(exe) else [sys.executable, "-m", "trace_tools"]


@dataclass(frozen=True)
class Record:
    """One event as an output holds it: times in Unix-epoch ns, ``tid`` None where the format has none."""

    kind: str  # span, instant, counter
    name: str
    cat: str
    start_ns: int
    end_ns: int
    tid: int | None
    args: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)


@dataclass
class Output:
    """What a user's tool reads from one sink: its events, and all of its text (for the credential check)."""

    name: str
    records: list[Record]
    text: str
    #: ``(tid, start_ns)`` in the order the file holds them, where the format promises per-thread order
    file_order: list[tuple[int, int]] = field(default_factory=list)


def _us_to_ns(value: Any) -> int:
    """A µs timestamp as written (3 decimals in Litracer, a JSON number in Chrome) to exact ns."""
    return int(Decimal(str(value)) * 1000)


# --- readers ------------------------------------------------------------------------------------------------------


def _read_litracer(path: str) -> Output:
    stats = ParseStats()
    raw = list(read_events(path, stats))
    assert stats.unreadable == stats.no_ph == stats.bad_field == stats.truncated_last == 0, stats
    records: list[Record] = []
    open_: dict[tuple[int, int, str], list[Any]] = {}
    for e in raw:
        t = _us_to_ns(f"{e.ts:.3f}")
        if e.ph == "B":
            open_.setdefault((e.pid, e.tid, e.name), []).append((t, e))
        elif e.ph == "E":
            t0, b = open_[(e.pid, e.tid, e.name)].pop()
            records.append(Record("span", e.name, e.cat, t0, t, e.tid, {**b.args, **e.args}))
        elif e.ph == "X":
            records.append(Record("span", e.name, e.cat, t, t + _us_to_ns(f"{e.dur:.3f}"), e.tid, e.args))
        elif e.ph == "I":
            records.append(Record("instant", e.name, e.cat, t, t, e.tid, e.args))
        elif e.ph == "C":
            records.append(Record("counter", e.name, e.cat, t, t, e.tid, e.args))
        else:
            raise AssertionError(f"unexpected ph {e.ph!r} on line {e.line}")
    assert not any(open_.values()), open_
    with open(path, encoding="utf-8") as f:
        text = f.read()
    return Output("litracer", records, text, [(e.tid, _us_to_ns(f"{e.ts:.3f}")) for e in raw])


def _read_chrome(path: str) -> Output:
    doc = load_chrome(path)  # strict: NaN/Infinity refused
    events = doc["traceEvents"]
    lane_tid: dict[tuple[int, int], int] = {}
    for e in events:
        if e["ph"] == "M" and e["name"] == "thread_name":
            m = re.match(r"tid (\d+)", e["args"]["name"])
            assert m, e
            lane_tid[(e["pid"], e["tid"])] = int(m.group(1))
    records: list[Record] = []
    begun: dict[tuple[int, int, str], list[dict[str, Any]]] = {}
    for e in events:
        ph = e["ph"]
        if ph == "M":
            continue
        t = _us_to_ns(e["ts"])
        tid = lane_tid.get((e["pid"], e.get("tid", -1)))
        if ph == "X":
            records.append(Record("span", e["name"], e["cat"], t, t + _us_to_ns(e["dur"]), tid, e.get("args", {})))
        elif ph == "B":  # B/E pairs are Chrome's other way to write a span: each B must find its E
            begun.setdefault((e["pid"], e["tid"], e["name"]), []).append(e)
        elif ph == "E":
            b = begun[(e["pid"], e["tid"], e["name"])].pop()
            records.append(
                Record(
                    "span", b["name"], b["cat"], _us_to_ns(b["ts"]), t, tid, {**b.get("args", {}), **e.get("args", {})}
                )
            )
        elif ph in ("i", "I"):
            records.append(Record("instant", e["name"], e["cat"], t, t, tid, e.get("args", {})))
        elif ph == "C":
            records.append(Record("counter", e["name"], e["cat"], t, t, None, e.get("args", {})))
        else:
            raise AssertionError(f"unexpected Chrome event {e}")
    assert not any(begun.values()), f"B events without an E: {begun}"
    with open(path, encoding="utf-8") as f:
        text = f.read()
    return Output("chrome", records, text)


def _read_perfetto(path: str) -> Output:
    from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

    v = load_perfetto(path)
    assert not v.unbalanced, v.unbalanced

    def tid_of(track: int) -> int:
        return v.threads[v.tracks[track][0]][1]

    cats = {s["cat"][0] if s["cat"] else "" for s in v.slices}
    assert "" not in cats, "a slice without its category"
    records = [
        Record("span", s["name"], s["cat"][0], s["ts"], s["ts"] + s["dur"], tid_of(s["track"]), s["args"])
        for s in v.slices
    ]
    records += [
        Record("instant", i["name"], i["cat"][0], i["ts"], i["ts"], tid_of(i["track"]), i["args"]) for i in v.instants
    ]
    trace = pb.Trace()
    with open(path, "rb") as f:
        trace.ParseFromString(f.read())
    counter_cats = {
        p.track_descriptor.uuid: list(p.track_descriptor.counter.categories)
        for p in trace.packet
        if p.HasField("track_descriptor") and p.track_descriptor.HasField("counter")
    }
    for p in trace.packet:  # counters with their times (the helper keeps only their values)
        if p.HasField("track_event") and p.track_event.type == pb.TrackEvent.TYPE_COUNTER:
            e = p.track_event
            value = e.double_counter_value if e.HasField("double_counter_value") else e.counter_value
            name = v.counters[e.track_uuid][1]
            cats = list(e.categories) or counter_cats.get(e.track_uuid) or [""]  # the event's, else its track's
            records.append(Record("counter", name, cats[0], p.timestamp, p.timestamp, None, {"value": value}))
    return Output("perfetto", records, str(trace))


def _read_otlp(spans: list[Any]) -> Output:
    records: list[Record] = []
    for s in spans:
        a = s.attributes
        cat = a.get("streamscope.category", "")
        kind = "instant" if cat in INSTANT_SPANS and s.start_ns == s.end_ns else "span"
        records.append(Record(kind, s.name, cat, s.start_ns, s.end_ns, a.get("thread.id"), dict(a)))
        for e in s.events:  # a retry: an event of the span open on its thread
            ea = e.attributes
            records.append(
                Record(
                    "instant",
                    e.name,
                    ea.get("streamscope.category", ""),
                    e.time_ns,
                    e.time_ns,
                    ea.get("thread.id"),
                    dict(ea),
                )
            )
    return Output("otlp", records, repr(spans))


# --- the outputs, each written once per module --------------------------------------------------------------------


@pytest.fixture(scope="module")
def litracer_log(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = str(tmp_path_factory.mktemp("sink") / "run.log")
    sink = LitracerFileSink(path)
    assert sink.export(batch(os.getpid())) is ExportResult.SUCCESS
    sink.shutdown()
    return path


def _convert(log: str, out: str) -> str:
    r = subprocess.run([*_trace_cli(), "convert", log, "-o", out], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    return out


@pytest.fixture(scope="module")
def otlp_run() -> Iterator[tuple[dict[str, Any], list[Any]]]:
    """The OTLP scenario's report and the spans the receiver decoded (a process of its own, see the script)."""
    with OTLPReceiver() as rx:
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("OTEL_", "STREAMSCOPE_", "LITDATA_TRACE", "LITDATA_LOG"))
        }
        env.update(
            SCENARIO_PATH=os.pathsep.join([os.path.join(ROOT, "src"), ROOT]),
            OTEL_EXPORTER_OTLP_ENDPOINT=rx.url,
            OTEL_BSP_SCHEDULE_DELAY="100",
            OTEL_METRIC_EXPORT_INTERVAL="600000",
        )
        r = subprocess.run([sys.executable, OTLP_SCRIPT], env=env, capture_output=True, text=True, timeout=180)
        assert r.returncode == 0, r.stderr[-4000:]
        report = json.loads(r.stdout.strip().splitlines()[-1])
        assert report["delivered"] is True, report  # the SDK's force_flush: every span reached the receiver
        yield report, rx.spans()


@pytest.fixture(params=["litracer", "chrome", "perfetto", "otlp"])
def output(request: pytest.FixtureRequest, tmp_path: Any) -> tuple[Output, int]:
    """An output read back, and the pid whose events it holds."""
    if request.param == "otlp":
        report, spans = request.getfixturevalue("otlp_run")
        return _read_otlp(spans), report["pid"]
    log = request.getfixturevalue("litracer_log")
    if request.param == "litracer":
        return _read_litracer(log), os.getpid()
    if request.param == "chrome":
        return _read_chrome(_convert(log, str(tmp_path / "run.json"))), os.getpid()
    return _read_perfetto(_convert(log, str(tmp_path / "run.pftrace"))), os.getpid()


def _wanted(out: Output, pid: int) -> list[Expected]:
    """The events ``out`` must hold: all of them, except what OTLP leaves out by design (docs/telemetry.md)."""
    want = expected(pid)
    if out.name == "otlp":
        want = [
            x for x in want if x.cat not in PER_ITEM_CATEGORIES and x.kind != "counter"
        ]  # the metrics count those; every remaining one is a span, or (a retry) an event of its span
    return want


def _key(x: Expected | Record, out: str) -> tuple[Any, ...]:
    counter = x.kind == "counter"
    tid = None if counter and out != "litracer" else x.tid  # Chrome and Perfetto draw counters per process
    return (x.kind, x.name, x.cat, x.start_ns, x.end_ns, tid)


# --- common checks ------------------------------------------------------------------------------------------------


def test_every_event_arrives_once_with_its_name_category_thread_and_exact_times(output):
    """No loss, no duplicate; names, categories and threads kept; times exact in the output's unit (a µs/ns mix-up
    or a lost offset shows as a mismatch), so the recording's order holds."""
    out, pid = output
    want = Counter(_key(x, out.name) for x in _wanted(out, pid))
    got = Counter(_key(r, out.name) for r in out.records)
    missing, extra = want - got, got - want
    assert not missing and not extra, f"{out.name}: missing {sorted(missing)}; unexpected {sorted(extra)}"
    assert all(r.end_ns >= r.start_ns for r in out.records)


def test_per_thread_order_and_the_validator(output, litracer_log):
    """The Litracer file holds each thread's lines in time order (its format's promise: LitData's tools read it
    so), and ``streamscope-trace validate`` finds nothing wrong; the other outputs order by their timestamps."""
    out, _pid = output
    if out.name != "litracer":
        starts = sorted(r.start_ns for r in out.records)
        assert starts[0] >= expected(0)[0].start_ns and starts == sorted(starts)
        return
    by_tid: dict[int, list[int]] = {}
    for tid, t in out.file_order:
        by_tid.setdefault(tid, []).append(t)
    assert set(by_tid) == {MAIN_TID, WORKER_TID}
    for tid, ts in by_tid.items():
        assert ts == sorted(ts), f"thread {tid}'s lines go back in time: {ts}"
    r = subprocess.run([*_trace_cli(), "validate", litracer_log], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "OK: no problems found" in r.stdout, r.stdout + r.stderr


def test_tricky_values_stay_readable(output):
    """``;``, line breaks and unicode in a value neither break the output nor get lost: the line format (and what is
    converted from it) writes ``,`` and spaces for them, OTLP keeps them as they are; unicode survives everywhere."""
    out, _pid = output
    (read,) = [r for r in out.records if r.name == "read"]
    label = read.args.get("streamscope.label" if out.name == "otlp" else "label")
    assert label == (RAW_LABEL if out.name == "otlp" else LINE_FORMAT_LABEL), label
    if out.name != "otlp":
        samples = [r for r in out.records if r.name == "sample"]
        assert sorted(int(r.args["item"]) for r in samples) == [0, 1, 2, 3]
        assert {r.args["dataset"] for r in samples} == {"ünï,data"}


def test_no_credential_reaches_the_output(output):
    """URL userinfo, signed-URL parameters and a secret quoted in an error message are masked in every output."""
    out, _pid = output
    leaked = [s for s in SECRETS if s in out.text]
    assert not leaked, f"{out.name} holds {leaked}"
    (dl,) = [r for r in out.records if r.name == "download"]
    url = dl.args.get("url.full" if out.name == "otlp" else "url")
    assert url is not None and "bucket/ds/chunk-0-3.bin" in url and "***" in url, url  # masked, not dropped


def test_perfetto_counters_keep_their_category(litracer_log, tmp_path):
    """A Perfetto counter's category is its track's (``CounterDescriptor.categories``), as Chrome's C event has one;
    the sample itself repeats none (the category is read from the track, not from each sample)."""
    path = _convert(litracer_log, str(tmp_path / "run.pftrace"))
    out = _read_perfetto(path)
    (counter,) = [r for r in out.records if r.kind == "counter"]
    assert (counter.name, counter.cat) == ("cache_bytes", "cache")
    from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

    trace = pb.Trace()
    with open(path, "rb") as f:
        trace.ParseFromString(f.read())
    (td,) = [p.track_descriptor for p in trace.packet if p.track_descriptor.HasField("counter")]
    assert (td.name, list(td.counter.categories)) == ("cache_bytes", ["cache"])
    samples = [p.track_event for p in trace.packet if p.track_event.type == pb.TrackEvent.TYPE_COUNTER]
    assert [(e.track_uuid, list(e.categories)) for e in samples] == [(td.uuid, [])]


# --- OpenTelemetry's exporter contract ----------------------------------------------------------------------------


def _contract_calls(sink: Any, pid: int) -> dict[str, Any]:
    """OpenTelemetry's exporter contract, call by call: what each returned (or the OSError it raised)."""

    def call(fn: Any, *args: Any) -> Any:
        try:
            out = fn(*args)
        except OSError as exc:  # the file sink's way to fail; the processor counts it (events/exporters.py)
            return f"OSError: {exc}"
        return out.name if isinstance(out, ExportResult) else out

    return {
        "is_exporter": isinstance(sink, Exporter),
        "export": call(sink.export, batch(pid)),
        "flush": [call(sink.force_flush, 1000), call(sink.force_flush)],
        "shutdown": [call(sink.shutdown), call(sink.shutdown)],
        "export_after_shutdown": call(sink.export, batch(pid)),
        "flush_after_shutdown": call(sink.force_flush, 1000),
    }


def _check_calls(calls: dict[str, Any]) -> None:
    assert calls["is_exporter"] is True
    assert calls["export"] == "SUCCESS"
    assert calls["flush"] == [True, True] and calls["shutdown"] == [None, None]  # idempotent, never raise
    after = calls["export_after_shutdown"]
    assert after == "FAILURE" or str(after).startswith("OSError"), after  # fails cleanly
    assert calls["flush_after_shutdown"] is True  # nothing to flush, no error


def test_litracer_file_exporter_contract(tmp_path):
    path = str(tmp_path / "c.log")
    calls = _contract_calls(LitracerFileSink(path), os.getpid())
    _check_calls(calls)
    lines = Counter(e.name for e in read_events(path, ParseStats()))
    assert lines == Counter(e[1] for e in expand(contract_events(os.getpid())))  # one export's lines, once


def test_spool_exporter_contract(tmp_path):
    """The exporter of a process that is not its rank's main one (a DataLoader worker): a forked child goes through
    the calls; the main process's reader (what hands them to OTLP) gets the selected events of one export once."""
    d = str(tmp_path / "run")
    os.makedirs(d)

    def child() -> tuple[dict[str, Any], int]:
        return _contract_calls(SpoolSink(d), os.getpid()), os.getpid()

    calls, pid = forked_result(child)
    _check_calls(calls)
    got = [(e[:6], e[6]) for b in SpoolReader().collect(d) for e in b.events]
    want = [(e[:6], e[6]) for e in contract_events(pid) if selected(e)]
    assert want and got == want


def test_otlp_exporter_contract(otlp_run):
    """The event bus's OTLP span exporter, in its process (the script): the same calls, and the receiver holds each
    span of the one export that counted (a second batch after shutdown would have doubled them)."""
    report, spans = otlp_run
    assert report["exporter"] == "OTelSpanSink"
    _check_calls(report)
    names = Counter(s.name for s in spans)
    assert names and max(names.values()) == 1, names


# --- Prometheus: the metrics derived from the same events, scraped ------------------------------------------------


@pytest.mark.slow
@pytest.mark.usefixtures("clean_tracer")
def test_prometheus_scrape_of_the_metrics_derived_from_the_events():
    """The same events recorded by this process's bus (metrics only); Prometheus scrapes the endpoint. Each event
    counted once, in its category's metric, durations in seconds; the scraped text holds no credential; stopping
    the endpoint twice is quiet and a scrape after it fails cleanly (the endpoint's shutdown contract)."""
    pytest.importorskip("prometheus_client")
    from prometheus_client.parser import text_string_to_metric_families

    from streamscope.events.registry import M, prometheus_name
    from streamscope.telemetry import prometheus as prom
    from tests.support.prometheus_server import PrometheusServer

    ev.configure(frozenset(), vocab.LEVELS["debug"])
    BUF.extend(contract_events(STATE.pid))  # as recorded: the flusher aggregates them (events/metrics.py)
    ev.flush()
    port = prom.start_endpoint(0)
    assert port
    url = f"http://127.0.0.1:{port}/metrics"
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            text = r.read().decode()
        assert not [s for s in SECRETS if s in text]
        scraped = {
            (s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(text)
            for s in fam.samples
        }
        assert scraped
        with PrometheusServer([f"127.0.0.1:{port}"]) as server:
            name = prometheus_name
            server.wait_for_series(f"{name(M.DOWNLOAD_DURATION)}_count", timeout=30)

            def value(expr: str) -> float:
                res = server.query(expr)
                assert len(res) == 1, (expr, res)
                return res[0].value

            # one download of 4970 µs, in seconds; its 4096 bytes; its retry; one delete is one eviction
            assert value(f"{name(M.DOWNLOAD_DURATION)}_count") == 1
            assert value(f"{name(M.DOWNLOAD_DURATION)}_sum") == pytest.approx(4970e-6, abs=1e-9)
            assert value(name(M.DOWNLOAD_BYTES)) == 4096
            assert value(name(M.DOWNLOAD_RETRIES)) == 1
            assert value(name(M.CACHE_EVICTIONS)) == 1
            # the loop's one stall of 20 ms, in seconds; the counter sample of the cache's bytes as its gauge
            assert value(name(M.LOADER_WAIT)) == pytest.approx(0.020, abs=1e-9)
            assert value(f"{name(M.LOADER_WAIT_DURATION)}_count") == 1
            assert value(name(M.CACHE_SIZE)) == 4096
            assert value(name(M.EVENTS_DROPPED)) == 0
            for s in server.query('{__name__=~"streamscope_.+"}'):
                assert not [x for x in SECRETS if any(x in v for v in s.labels.values())], s.labels
    finally:
        prom.stop_endpoint()
        prom.stop_endpoint()  # idempotent
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(url, timeout=5)
