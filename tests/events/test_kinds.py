"""Event kinds: the constants match the vocabulary, each helper emits its kind exactly, and no call site outside
``events`` spells a category a helper exists for."""

from __future__ import annotations

import ast
import pathlib
import re
from collections.abc import Callable
from typing import Any

import pytest

from streamscope import events as ev
from streamscope.events import kinds
from streamscope.events.bus import NULL_SPAN, STATE
from streamscope.events.kind_doc import markdown_table, readme_with_table
from streamscope.events.vocab import CATEGORIES, FIELDS, LEVELS, categories_for_level
from tests.support.tracing import clean_tracer  # noqa: F401

pytestmark = pytest.mark.usefixtures("clean_tracer")

SRC = pathlib.Path(__file__).resolve().parents[2] / "src" / "streamscope"

#: Files allowed to spell a category at an emission site: none (every site emits through the helpers). Never add
#: a file to it.
ALLOWED_LITERALS: frozenset[str] = frozenset()


class _ListSink:
    """An in-memory sink: the batches the recorder hands it."""

    batches: list[Any] = []

    def export(self, batch: Any) -> None:
        _ListSink.batches.append(batch)

    def force_flush(self) -> None:
        pass

    def shutdown(self) -> None:
        pass


def _recorded(monkeypatch: pytest.MonkeyPatch, cats: set[str], emit: Callable[[], None]) -> list[tuple[Any, ...]]:
    """The events ``emit`` records with ``cats`` traced, as the in-memory sink receives them."""
    monkeypatch.setenv("STREAMSCOPE_TRACE_FLUSH_INTERVAL", "60")
    monkeypatch.setenv("STREAMSCOPE_TRACE_SINKS", "tests.events.test_kinds:_ListSink")
    _ListSink.batches = []
    ev.configure(trace=cats)
    emit()
    ev.flush()
    return [e for b in _ListSink.batches for e in ev.expand(b.events)]


def _span(helper: Callable[..., Any], *args: Any, **kw: Any) -> Callable[[], None]:
    def run() -> None:
        with helper(*args, **kw):
            pass

    return run


def _call(helper: Callable[..., Any], *args: Any, **kw: Any) -> Callable[[], None]:
    return lambda: helper(*args, **kw)


_EXC = ValueError("bad")

#: (kind, how to emit it, its name, its fields as recorded)
CASES: list[tuple[kinds.Kind, Callable[[], None], str, dict[str, Any]]] = [
    (kinds.EPOCH, _span(kinds.epoch, epoch=1, rank=0, batches=4, workers=2), "epoch", {"epoch": 1, "rank": 0, "batches": 4, "workers": 2}),
    (kinds.EPOCH, _span(kinds.epoch, name="combined", epoch=2, rank=1, worker=0), "combined", {"epoch": 2, "rank": 1, "worker": 0}),
    (kinds.EPOCH, _span(kinds.epoch, epoch=1, rank=0, t0=1), "epoch", {"epoch": 1, "rank": 0}),
    (kinds.PLAN, _span(kinds.plan, epoch=1, rank=0, world_size=2, chunks=9), "plan", {"epoch": 1, "rank": 0, "world_size": 2, "chunks": 9}),
    (kinds.OPTIMIZE, _span(kinds.optimize, "map", inputs=3, workers=2, url="s3://b/o", node=0), "map", {"inputs": 3, "workers": 2, "url": "s3://b/o", "node": 0}),
    (kinds.READ_ITEM, _span(kinds.read_item, chunk=1, index=7), "read_item", {"chunk": 1, "index": 7}),
    (kinds.OPTIMIZE_FN, _span(kinds.optimize_fn, input=3), "optimize_fn", {"input": 3}),
    (kinds.SERIALIZE, _span(kinds.serialize, input=3, sample=4), "serialize", {"input": 3, "sample": 4}),
    (kinds.READ, _span(kinds.read, items=5, inline=True), "read", {"items": 5, "inline": True}),
    (kinds.READ, _span(kinds.read, path="/c/a", bytes=9, cached=True), "read", {"path": "/c/a", "bytes": 9, "cached": True}),
    (kinds.MMAP, _span(kinds.mmap, file="chunk-0-1.bin"), "mmap", {"file": "chunk-0-1.bin"}),
    (kinds.DECRYPT, _span(kinds.decrypt, chunk=2, file="c.bin"), "decrypt", {"chunk": 2, "file": "c.bin"}),
    (kinds.DECRYPT, _span(kinds.decrypt, file="c.bin"), "decrypt", {"file": "c.bin"}),
    (kinds.READ_FOOTER, _span(kinds.read_footer, file="a.parquet", bytes=8), "read_footer", {"file": "a.parquet", "bytes": 8}),
    (kinds.READ_ROW_GROUP, _span(kinds.read_row_group, chunk=1, row_group=2), "read_row_group", {"chunk": 1, "row_group": 2}),
    (kinds.KEY_LOOKUP, _span(kinds.key_lookup, key="k"), "key_lookup", {"key": "k"}),
    (kinds.BUILD_KEYS_INDEX, _span(kinds.build_keys_index, chunks=2, items=9), "build_keys_index", {"chunks": 2, "items": 9}),
    (kinds.DATASET_UPDATE, _span(kinds.dataset_update, chunks=2, items=3), "dataset_update", {"chunks": 2, "items": 3}),
    (kinds.INDEX_MERGE, _span(kinds.index_merge, workers=2), "index_merge", {"workers": 2}),
    (kinds.OPTIMIZE_INPUT, _span(kinds.optimize_input, input=1), "optimize_input", {"input": 1}),
    (kinds.RESHARD, _span(kinds.reshard, file="f", start=0, end=9), "reshard", {"file": "f", "start": 0, "end": 9}),
    (kinds.DECOMPRESS, _span(kinds.decompress, file="c.zstd.bin"), "decompress", {"file": "c.zstd.bin"}),
    (kinds.DOWNLOAD, _span(kinds.download, chunk=3, url="s3://b/c.bin"), "download", {"chunk": 3, "url": "s3://b/c.bin"}),
    (kinds.DOWNLOAD, _span(kinds.download, path="/d/a", bytes=4, attempt=1, local=True), "download", {"path": "/d/a", "bytes": 4, "attempt": 1, "local": True}),
    (kinds.STORAGE_OP, _span(kinds.storage_op, "get_range", op="get_range", url="s3://b/k", attempt=1, start=0, end=4), "get_range", {"op": "get_range", "url": "s3://b/k", "attempt": 1, "start": 0, "end": 4}),
    (kinds.RETRY, _call(kinds.retry, op="get", url="u", attempt=1, status="retry", http_status=None, exception="E", delay_s=0.5), "retry", {"op": "get", "url": "u", "attempt": 1, "status": "retry", "http_status": None, "exception": "E", "delay_s": 0.5}),
    (kinds.GIVE_UP, _call(kinds.give_up, op="get", url="u", attempt=3, status="error", http_status=503, exception="E", elapsed_s=2.0), "give_up", {"op": "get", "url": "u", "attempt": 3, "status": "error", "http_status": 503, "exception": "E", "elapsed_s": 2.0}),
    (kinds.HEDGE, _call(kinds.hedge, path="/d/a", bytes=4, state="fired"), "hedge", {"path": "/d/a", "bytes": 4, "state": "fired"}),
    (kinds.BACKEND_FALLBACK, _call(kinds.backend_fallback, url="s3://b", backend="boto3", reason="r"), "backend_fallback", {"url": "s3://b", "backend": "boto3", "reason": "r"}),
    (kinds.BACKEND, _call(kinds.backend, backend="obstore", reason="r"), "backend", {"backend": "obstore", "reason": "r"}),
    (kinds.COPY, _span(kinds.copy, key="k", url="s3://b"), "copy", {"key": "k", "url": "s3://b"}),
    (kinds.DELETE, _span(kinds.delete, path="c.bin", bytes=9), "delete", {"path": "c.bin", "bytes": 9}),
    (kinds.OVERWRITE, _span(kinds.overwrite, url="s3://b/o"), "overwrite", {"url": "s3://b/o"}),
    (kinds.PREFETCH, _span(kinds.prefetch, chunk=1, position=0), "prefetch", {"chunk": 1, "position": 0}),
    (kinds.PREFETCH_HITS, _call(kinds.prefetch_hits, hits=1, misses=2, items=3), "prefetch", {"hits": 1, "misses": 2, "items": 3}),
    (kinds.PREFETCH_SCHEDULED, _call(kinds.prefetch_scheduled, items=4, first=8), "prefetch_scheduled", {"items": 4, "first": 8}),
    (kinds.DOWNLOADS_IN_FLIGHT, _call(kinds.downloads_in_flight, 3), "downloads_in_flight", {"value": 3}),
    (kinds.LOCK, _span(kinds.lock, "increment", op="increment", count=2), "increment", {"op": "increment", "count": 2}),
    (kinds.CRASH, _call(kinds.crash, _EXC, chunk=1, url="s3://b/c"), "crash", {"chunk": 1, "url": "s3://b/c", "exception": "ValueError", "error": "ValueError: bad"}),
    (kinds.CRASH, _call(kinds.crash, _EXC, worker=1, input=2, max_error=8), "crash", {"worker": 1, "input": 2, "exception": "ValueError", "error": "ValueErr"}),
    (kinds.CRASH, _call(kinds.crash, _EXC, "tuner", component="tuner"), "tuner", {"component": "tuner", "exception": "ValueError", "error": "ValueError: bad"}),
    (kinds.KNOB, _call(kinds.knob, "prefetch_depth", old=1, new=2, source="tuner", reason="r"), "prefetch_depth", {"knob": "prefetch_depth", "old": 1, "new": 2, "source": "tuner", "reason": "r"}),
    (kinds.KNOB, _call(kinds.knob, "raw_concurrency", old=1, new=2, source="governor", reason="", samples=5), "raw_concurrency", {"knob": "raw_concurrency", "old": 1, "new": 2, "source": "governor", "samples": 5}),
    (kinds.KNOBS_SEEN, _call(kinds.knobs_seen, prefetch_depth=2, download_concurrency=4, prefetch_head_first=True), "knobs_seen", {"prefetch_depth": 2, "download_concurrency": 4, "prefetch_head_first": True}),
    (kinds.TUNER, _call(kinds.tuner, "decision", {"arm": "B"}), "decision", {"arm": "B"}),
    (kinds.CHUNKS_PER_BATCH, _call(kinds.chunks_per_batch, 1.5, epoch=1, rank=0), "plan_chunks_per_batch", {"epoch": 1, "rank": 0, "value": 1.5}),
    (kinds.CACHE_BYTES, _call(kinds.cache_bytes, 99), "cache_bytes", {"value": 99}),
    (kinds.INDEX, _span(kinds.index, source="s3://b/raw"), "index", {"source": "s3://b/raw"}),
    (kinds.INDEX_FOUND, _call(kinds.index_found, where="local", files=3), "index", {"where": "local", "files": 3}),
    (kinds.CACHE_WRITE, _span(kinds.cache_write, path="/c/a", bytes=3), "cache_write", {"path": "/c/a", "bytes": 3}),
    (kinds.SWEEP, _call(kinds.sweep, path="/c", files=2), "sweep", {"path": "/c", "files": 2}),
    (kinds.UPLOAD, _span(kinds.upload, file="c.bin", bytes=9, rank=1), "upload", {"file": "c.bin", "bytes": 9, "rank": 1}),
    (kinds.CHUNK_WRITE, _span(kinds.chunk_write, rank=0, final=True), "chunk_write", {"rank": 0, "final": True}),
    (kinds.CHUNK_WRITTEN, _call(kinds.chunk_written, file="c.bin", bytes=9, items=3), "chunk_write", {"file": "c.bin", "bytes": 9, "items": 3}),
]  # fmt: skip

_PH = {"span": ("B", "X"), "instant": ("I",), "counter": ("C",)}


def test_every_kind_is_in_the_vocabulary():
    assert set(kinds.KINDS) == {n for n in kinds.__all__ if n.isupper() and n != "KINDS"}
    assert {k.cat for k in kinds.KINDS.values()} == set(CATEGORIES)  # every category has its kinds
    for name, kind in kinds.KINDS.items():
        assert kind.cat in CATEGORIES, name
        assert kind.cat in LEVELS["debug"], name
        assert kind.ph in ("span", "instant", "counter", "series", "bulk", "timeline"), name
        assert len({f.name for f in kind.fields}) == len(kind.fields), f"{name}: a field twice"
        for f in kind.fields:
            if f.name in FIELDS:  # one spelling, one type: an (int) of the vocabulary is an int here
                typed = re.search(r"\((int|number)\b", FIELDS[f.name])
                if typed and typed.group(1) == "int":
                    assert f.type.startswith("int"), f"{name}.{f.name}: {f.type}, the vocabulary says int"


def test_a_kind_s_metrics_key_is_what_the_aggregator_files_it_under(monkeypatch):
    from streamscope.recording.metrics import Aggregator

    events = _recorded(monkeypatch, {"download", "delete"}, CASES[[c[0] for c in CASES].index(kinds.RETRY)][1])
    agg = Aggregator()
    agg.add(events)
    assert kinds.RETRY.key == "download/retry" and agg.instants == {kinds.RETRY.key: 1}


def test_hot_path_kinds_have_constants_and_no_helper():
    hot = {k.name for k in kinds.KINDS.values() if k.ph in ("series", "bulk", "timeline")}
    assert hot == {"sample", "decode_batch", "batch", "stall"}
    assert not any(hasattr(kinds, name) for name in hot)  # Series, Timeline and bulk stay as they are


def test_every_helper_kind_is_exercised_below():
    helpers = {k for k in kinds.KINDS.values() if k.ph in _PH}
    assert helpers == {case[0] for case in CASES}


@pytest.mark.parametrize(
    ("kind", "emit", "name", "fields"), CASES, ids=[f"{c[0].cat}-{c[2]}-{i}" for i, c in enumerate(CASES)]
)
def test_helper_emits_its_kind_exactly(monkeypatch, kind, emit, name, fields):
    events = _recorded(monkeypatch, {kind.cat}, emit)
    assert events, "nothing recorded"
    first = events[0]
    assert first[0] in _PH[kind.ph]
    assert (first[1], first[2]) == (name, kind.cat)
    assert name in kind.all_names or "*" in kind.names
    got = {k: v for k, v in first[6].items() if k != "dur"}
    assert got == fields and list(got) == list(fields)  # the fields, in the kind's order
    declared = [f.name for f in kind.fields]
    if not kind.open:
        assert set(got) <= set(declared) | {"value"}, set(got) - set(declared)
        assert [k for k in declared if k in got] == [k for k in got if k in declared]  # in the kind's order
    assert {f.name for f in kind.fields if f.required and not f.end} <= set(got)
    if kind.ph == "span":
        assert [e[0] for e in events] in (["B", "E"], ["X"])


@pytest.mark.parametrize("level", list(LEVELS))
def test_helpers_follow_the_levels(monkeypatch, level):
    cats = categories_for_level(level)

    def emit_all() -> None:
        for case in CASES:
            case[1]()

    seen = {(e[1], e[2]) for e in _recorded(monkeypatch, set(cats), emit_all)}
    for kind, _, name, _ in CASES:
        assert ((name, kind.cat) in seen) == (kind.cat in cats), (level, kind.cat, name)


def test_an_inactive_category_gives_the_null_span_and_records_nothing():
    assert kinds.download(chunk=1, url="u") is NULL_SPAN
    assert kinds.read(items=1) is NULL_SPAN
    assert kinds.epoch(epoch=1, rank=0, t0=0) is NULL_SPAN
    kinds.crash(_EXC, chunk=1)
    kinds.cache_bytes(1)
    kinds.retry(op="get", url="u", attempt=1, status="retry", http_status=None, exception="E", delay_s=0.1)
    assert ev.drain() == [] and STATE.dropped == 0


def test_a_span_helper_yields_the_fields_the_end_carries(monkeypatch):
    def emit() -> None:
        with kinds.download(chunk=3, url="s3://b/c") as f:
            f["bytes"] = 12

    b, e = _recorded(monkeypatch, {"download"}, emit)
    assert b[6] == {"chunk": 3, "url": "s3://b/c"} and e[6] == {"chunk": 3, "url": "s3://b/c", "bytes": 12}


def test_the_readme_table_is_current():
    text = (SRC / "events" / "README.md").read_text(encoding="utf-8")
    assert readme_with_table(text) == text, (
        "src/streamscope/events/README.md's kinds table is stale: run `python -m streamscope.events.kind_doc`"
    )
    assert markdown_table().count("\n| `") == len(kinds.KINDS)


# --- no call site spells a category a helper exists for ---------------------------------------------------------

_CALLS = {"span": 1, "instant": 1, "counter": 1, "emit": 2, "span_since": 2}  # the category's positional index


def literal_sites(root: pathlib.Path = SRC) -> list[tuple[str, int, str, str]]:
    """``(file, line, call, category)`` of every ``ev.span/instant/counter/emit/span_since`` call outside
    ``events/`` whose category is a string literal of a kind (``ev`` or ``events`` as the module's name)."""
    helper_cats = {k.cat for k in kinds.KINDS.values() if k.ph in _PH}
    out = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if rel.startswith("events/"):
            continue
        for node in ast.walk(ast.parse(path.read_text(), rel)):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            fn = node.func
            if not (isinstance(fn.value, ast.Name) and fn.value.id in ("ev", "events") and fn.attr in _CALLS):
                continue
            cat: ast.expr | None = None
            i = _CALLS[fn.attr]
            if len(node.args) > i:
                cat = node.args[i]
            else:
                cat = next((kw.value for kw in node.keywords if kw.arg == "cat"), None)
            if isinstance(cat, ast.Constant) and isinstance(cat.value, str) and cat.value in helper_cats:
                out.append((rel, node.lineno, fn.attr, cat.value))
    return sorted(out)


def test_no_call_site_spells_a_category_a_helper_exists_for():
    bad = [s for s in literal_sites() if s[0] not in ALLOWED_LITERALS]
    assert not bad, "emit through streamscope.events.kinds instead:\n" + "\n".join(
        f"  {f}:{line}: ev.{call}(..., {cat!r}, ...)" for f, line, call, cat in bad
    )


def test_the_check_finds_literal_categories(tmp_path):
    (tmp_path / "events").mkdir()
    (tmp_path / "events" / "inner.py").write_text('ev.span("download", "download")\n')  # events/ may
    (tmp_path / "site.py").write_text(
        "from streamscope import events as ev\n"
        'with ev.span("download", "download", chunk=1):\n    pass\n'
        'ev.emit("I", "knob", "tune", knob="x")\n'
        'ev.span_since(0, "epoch", cat="epoch")\n'
        'ev.instant("x", cat)\n'  # not a literal
        'ev.instant("x", "nonsense")\n'  # not a category of a kind
        'other.span("download", "download")\n'  # not the events API
    )
    assert literal_sites(tmp_path) == [
        ("site.py", 2, "span", "download"),
        ("site.py", 4, "emit", "tune"),
        ("site.py", 5, "span_since", "epoch"),
    ]
