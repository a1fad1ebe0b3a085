"""convert to Perfetto: a counter's category is kept, on its track, as Chrome's ``C`` events keep it on each sample.

A counter track is one per process and name (trace_tools.model), so a sample recorded under another category than
the track's first says its own on the event; the usual case (one category per counter) repeats nothing per sample.
"""

from __future__ import annotations

from typing import Any

from tests.trace_tools.helpers import line, load_chrome, write_log
from trace_tools.cli import main


def _trace(path: str) -> Any:
    from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

    trace = pb.Trace()
    with open(path, "rb") as f:
        trace.ParseFromString(f.read())
    return pb, trace


def test_counter_categories_on_tracks_and_on_a_sample_that_differs(tmp_path):
    log = write_log(
        str(tmp_path / "c.log"),
        [
            line("C", "bytes_in_flight", "download", 0, value=1),
            line("C", "queue_depth", "prefetch", 1, value=3),
            line("C", "bytes_in_flight", "download", 2, value=2),
            line("C", "bytes_in_flight", "cache", 3, value=5),  # same counter, another category
        ],
    )
    out = str(tmp_path / "c.pftrace")
    assert main(["convert", log, "-o", out]) == 0
    pb, trace = _trace(out)
    tracks = {
        p.track_descriptor.uuid: (p.track_descriptor.name, list(p.track_descriptor.counter.categories))
        for p in trace.packet
        if p.track_descriptor.HasField("counter")
    }
    assert sorted(tracks.values()) == [("bytes_in_flight", ["download"]), ("queue_depth", ["prefetch"])]
    samples = [
        (tracks[p.track_event.track_uuid][0], list(p.track_event.categories), p.track_event.counter_value)
        for p in trace.packet
        if p.track_event.type == pb.TrackEvent.TYPE_COUNTER
    ]
    assert samples == [
        ("bytes_in_flight", [], 1),
        ("queue_depth", [], 3),
        ("bytes_in_flight", [], 2),
        ("bytes_in_flight", ["cache"], 5),
    ]
    # the same categories as the Chrome output of the same log
    json_out = str(tmp_path / "c.json")
    assert main(["convert", log, "-o", json_out]) == 0
    chrome = [(e["name"], e["cat"]) for e in load_chrome(json_out)["traceEvents"] if e["ph"] == "C"]
    assert chrome == [
        ("bytes_in_flight", "download"),
        ("queue_depth", "prefetch"),
        ("bytes_in_flight", "download"),
        ("bytes_in_flight", "cache"),
    ]
