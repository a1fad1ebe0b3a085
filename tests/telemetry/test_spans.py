"""The span encoder: which events become spans, their parents, links, attributes; no credential gets through."""

from __future__ import annotations

import numpy as np
import pytest

from streamscope import events as ev
from streamscope.events.bus import BULK, Bulk
from streamscope.events.exporters import EventBatch
from streamscope.storage.redact import register_secret
from streamscope.telemetry.spans import PER_ITEM_CATEGORIES, SpanEncoder, chunk_stem, selected
from tests.support.tracing import clean_tracer  # noqa: F401

MAIN, WORKER = 100, 200
ENV = {"dist_world_size": 2, "dist_global_rank": 1, "dist_num_nodes": 1, "worker_world_size": 1, "worker_rank": 0}
WENV = {**ENV, "worker_world_size": 2, "worker_rank": 1}
OFF = 1_000_000_000_000


def _batch(events, envs=None) -> EventBatch:
    return EventBatch(list(events), OFF, ENV, envs or {WORKER: WENV})


def test_per_item_work_never_becomes_a_span():
    enc = SpanEncoder(MAIN)
    events = [
        ("X", "sample", "sample", 10, WORKER, 1, {"dur": 1.0}),
        ("X", "batch", "batch", 10, MAIN, 1, {"dur": 1.0, "batch": 3}),
        ("X", "decode_batch", "read", 10, WORKER, 1, {"dur": 5.0, "batch": 1}),
        ("B", "lock", "lock", 10, WORKER, 1, {}),
        ("C", "cache_bytes", "cache", 10, WORKER, 1, {"value": 5}),
        (BULK, "sample", "sample", 10, WORKER, 1, Bulk(3, 40, {"item": [1, 2, 3]}, None, None, {})),
    ]
    assert enc.encode(_batch(events)) == []
    assert not any(selected(e) for e in events)
    assert {"sample", "batch", "lock"} == PER_ITEM_CATEGORIES


def test_nested_spans_take_their_threads_parent_across_batches():
    enc = SpanEncoder(MAIN)
    first = enc.encode(
        _batch(
            [
                ("B", "prefetch", "prefetch", 10, WORKER, 7, {"chunk": 3}),
                ("B", "download", "download", 20, WORKER, 7, {"chunk": 3, "url": "s3://b/ds/chunk-0-3.zstd.bin"}),
            ]
        )
    )
    assert [o.kind for o in first] == ["start", "start"]
    pre, dl = first
    assert pre.parent is None and dl.parent == pre.key and dl.stem == "chunk-0-3"
    assert dl.t0 == OFF + 20 and dl.attrs["streamscope.worker"] == 1 and dl.attrs["streamscope.rank"] == 1
    assert dl.attrs["url.full"] == "s3://b/ds/chunk-0-3.zstd.bin" and dl.attrs["streamscope.chunk"] == 3
    second = enc.encode(
        _batch(
            [
                ("I", "retry", "download", 25, WORKER, 7, {"attempt": 2}),
                ("E", "download", "download", 30, WORKER, 7, {"chunk": 3, "bytes": 99}),
                ("X", "mmap", "read", 40, WORKER, 7, {"file": "chunk-0-3.bin", "dur": 2.0}),
                ("E", "prefetch", "prefetch", 50, WORKER, 7, {"chunk": 3}),
            ]
        )
    )
    note, end_dl, mmap, end_pre = second
    assert (note.kind, note.parent, note.name) == ("note", dl.key, "retry")
    assert (end_dl.kind, end_dl.key, end_dl.t1, end_dl.attrs["streamscope.bytes"]) == ("end", dl.key, OFF + 30, 99)
    assert mmap.kind == "whole" and mmap.parent == pre.key and mmap.t1 - mmap.t0 == 2000 and mmap.stem == "chunk-0-3"
    assert end_pre.key == pre.key and not enc.stacks  # nothing left open


def test_an_end_without_its_begin_is_skipped_and_crash_instants_fail():
    enc = SpanEncoder(MAIN)
    ops = enc.encode(
        _batch(
            [
                ("E", "download", "download", 5, WORKER, 1, {}),
                ("I", "crash", "crash", 6, WORKER, 1, {"exception": "OSError", "error": "OSError: disk gone"}),
                ("I", "raw_concurrency", "tune", 7, MAIN, 1, {"old": 4, "new": 8}),
                ("I", "retry", "download", 8, WORKER, 1, {}),  # no span open on its thread: dropped
            ]
        )
    )
    assert [(o.name, o.kind, o.error) for o in ops] == [
        ("crash", "whole", "OSError: disk gone"),
        ("raw_concurrency", "whole", None),
    ]
    assert "streamscope.worker" not in ops[1].attrs  # the main process's own event


def test_stalls_shorter_than_the_minimum_are_left_to_the_metrics():
    enc = SpanEncoder(MAIN, stall_min_ns=1_000_000)
    starts = np.array([0, 5_000_000, 5_500_000], dtype=np.int64)
    ends = np.array([4_000_000, 5_400_000, 9_000_000], dtype=np.int64)
    bulk = Bulk(3, 9_000_000, {"batch": np.array([0, 1, 2])}, starts, ends, {"epoch": 1})
    ops = enc.encode(
        _batch(
            [
                (BULK, "stall", "stall", 0, MAIN, 1, bulk),
                ("X", "stall", "stall", 9_000_000, MAIN, 1, {"dur": 10.0, "batch": 3}),  # 10 µs
            ]
        )
    )
    assert [(o.attrs["streamscope.batch"], o.t1 - o.t0) for o in ops] == [(0, 4_000_000), (2, 3_500_000)]
    assert all(o.attrs["streamscope.epoch"] == 1 for o in ops)


def test_a_batch_is_encoded_in_time_order_across_processes():
    enc = SpanEncoder(MAIN)
    ops = enc.encode(
        _batch(
            [
                ("X", "mmap", "read", 50, WORKER + 1, 1, {"file": "chunk-0-3.bin", "dur": 1.0}),
                ("B", "download", "download", 10, WORKER, 1, {"url": "s3://b/chunk-0-3.bin"}),
                ("E", "download", "download", 40, WORKER, 1, {}),
            ],
            {WORKER: WENV, WORKER + 1: WENV},
        )
    )
    assert [o.name for o in ops] == ["download", "download", "mmap"]


@pytest.mark.parametrize(
    ("fields", "stem"),
    [
        ({"url": "s3://bucket/data/chunk-0-3.zstd.bin"}, "chunk-0-3"),
        ({"file": "chunk-0-3.bin.download.1234"}, "chunk-0-3"),
        ({"path": "/cache/x/chunk-1-12.bin"}, "chunk-1-12"),
        ({"url": "https://h/chunk-2-0.bin?X-Amz-Signature=abc"}, "chunk-2-0"),
        ({"chunk": 3}, None),
    ],
)
def test_chunk_stems(fields, stem):
    assert chunk_stem(fields) == stem


def test_credentials_never_reach_attributes():
    register_secret("verysecretkey123")
    enc = SpanEncoder(MAIN)
    (op,) = enc.encode(
        _batch(
            [
                (
                    "X",
                    "download",
                    "download",
                    1,
                    WORKER,
                    1,
                    {
                        "url": "s3://AKIAUSER:hunter2pass@bucket/chunk-0-0.bin?X-Amz-Signature=deadbeef",
                        "error": "auth failed with key verysecretkey123",
                        "exception": "PermissionError",
                        "dur": 1.0,
                    },
                )
            ]
        )
    )
    text = repr(op)
    for secret in ("hunter2pass", "deadbeef", "verysecretkey123"):
        assert secret not in text
    assert (
        op.error is not None and "verysecretkey123" not in op.error and op.attrs["exception.type"] == "PermissionError"
    )


@pytest.mark.usefixtures("clean_tracer")
def test_the_event_bus_events_of_a_traced_chunk_become_ops():
    ev.configure(trace={"download", "read", "sample"})
    with ev.span("download", "download", chunk=0, url="s3://b/chunk-0-0.bin") as f:
        f["bytes"] = 10
    with ev.span("mmap", "read", file="chunk-0-0.bin"):
        pass
    ev.bulk("sample", "sample", ev.now(), chunk=[0, 0], item=[0, 1])
    events = ev.drain()
    ops = SpanEncoder(MAIN).encode(EventBatch(events, OFF, ENV))
    names = [(o.kind, o.name) for o in ops]
    assert ("start", "download") in names and ("end", "download") in names
    assert any(n == "mmap" for _k, n in names) and not any(n == "sample" for _k, n in names)


def test_ends_that_come_before_their_begins_still_close_their_spans():
    # a worker's last events (its spool) can reach the main process before its parcel with the rest
    enc = SpanEncoder(MAIN)
    spool = enc.encode(
        _batch(
            [
                ("E", "download", "download", 30, WORKER, 7, {"chunk": 3, "bytes": 9}),
                ("E", "prefetch", "prefetch", 40, WORKER, 7, {"chunk": 3, "aborted": 1}),
            ]
        )
    )
    assert spool == []
    parcel = enc.encode(
        _batch(
            [
                ("B", "prefetch", "prefetch", 10, WORKER, 7, {"chunk": 3}),
                ("B", "download", "download", 20, WORKER, 7, {"chunk": 3}),
            ]
        )
    )
    assert [(o.kind, o.name) for o in parcel] == [
        ("start", "prefetch"),
        ("start", "download"),
        ("end", "download"),
        ("end", "prefetch"),
    ]
    pre, dl, end_dl, end_pre = parcel
    assert dl.parent == pre.key and end_dl.key == dl.key and end_pre.key == pre.key
    assert (
        end_dl.t1 == OFF + 30 and end_dl.attrs["streamscope.bytes"] == 9 and end_pre.attrs["streamscope.aborted"] == 1
    )
    assert not enc.stacks and not enc.orphans
