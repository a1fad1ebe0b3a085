"""Downloads overlap reading: the first batch is served as soon as its own chunk is local (observed in the trace,
not by wall-clock), and chunk downloads run concurrently ahead of the reader under a live concurrency knob."""

from __future__ import annotations

import pytest

from streamscope import StreamingDataLoader, StreamingDataset
from streamscope import events as ev
from streamscope._core import config
from tests.integration.conftest import N, write_dataset
from tests.support.tracing import clean_tracer  # noqa: F401

pytestmark = pytest.mark.usefixtures("clean_tracer")
CHUNKS = 12


def _spans(events: list, name: str) -> list[tuple[int, int, dict]]:
    """(begin_ns, end_ns, fields) of every ``name`` span (B/E matched per pid and thread, or complete X)."""
    open_: dict[tuple[int, int], list] = {}
    out = []
    for ph, n, _cat, ts, pid, tid, fields in ev.expand(events):
        if n != name:
            continue
        if ph == "X":
            out.append((ts, ts + int(fields["dur"] * 1000), fields))
        elif ph == "B":
            open_.setdefault((pid, tid), []).append((ts, fields))
        elif ph == "E" and open_.get((pid, tid)):
            t0, f0 = open_[(pid, tid)].pop()
            out.append((t0, ts, {**f0, **fields}))
    return sorted(out, key=lambda s: s[0])


def _run(fault_proxy, s3_server, tmp_path, **ds_kw) -> list:
    write_dataset(s3_server, "overlap")
    fault_proxy.fixed_delay_s = 0.05  # a slow link: every request takes 50 ms more
    ev.ACTIVE.update({"download", "batch", "stall", "prefetch"})
    ds = StreamingDataset(
        fault_proxy.s3.url("overlap"),
        cache_dir=str(tmp_path / "cache"),
        storage_options=fault_proxy.s3.storage_options(),
        **ds_kw,
    )
    got = 0
    for batch in StreamingDataLoader(ds, batch_size=8, num_workers=0):
        got += len(batch["index"])
    assert got == N
    return ev.drain()


def test_first_batch_before_all_chunks_are_downloaded(fault_proxy, s3_server, tmp_path) -> None:
    events = _run(fault_proxy, s3_server, tmp_path)
    chunk_downloads = [s for s in _spans(events, "download") if "chunk" in s[2]]
    assert len({s[2]["chunk"] for s in chunk_downloads}) == CHUNKS
    first_batch = _spans(events, "batch")[0]
    done_before = [s for s in chunk_downloads if s[1] <= first_batch[0]]
    started_after = [s for s in chunk_downloads if s[0] >= first_batch[0]]
    # the loop got batch 0 when only the first chunk(s) were local (prefetch depth 2 bounds how many)
    assert 1 <= len(done_before) <= 3, [s[2]["chunk"] for s in done_before]
    assert len(started_after) >= CHUNKS - 3


def test_chunk_downloads_run_concurrently_under_a_live_knob(fault_proxy, s3_server, tmp_path) -> None:
    config.set_value("download_concurrency", 4)
    try:
        events = _run(fault_proxy, s3_server, tmp_path, max_pre_download=4)
    finally:
        config.reset("download_concurrency")
    spans = [s for s in _spans(events, "download") if "chunk" in s[2]]
    overlapping = sum(1 for a, b in zip(spans, spans[1:]) if b[0] < a[1])
    assert overlapping >= 3, "chunk downloads ran one after another"
    assert "download_concurrency" in config.KNOBS, "no live download-concurrency knob for the tuner"
