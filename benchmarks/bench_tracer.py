"""Tracer cost: the recorder per event, and one read epoch with the tracer off / "chunk" / "sample".

Run by hand (2 cores shared: keep it short)::

    PYTHONPATH=src:. python benchmarks/bench_tracer.py [--samples 20000] [--quick]

Parts, each side by side with LitData 0.2.68 in the same run:

1. Recorder micro-costs (in-process, CPU time of the calling thread): a ``span`` of an inactive category, the same span active (appended to
   the buffer; the flusher's later encoding and write measured separately per event), and LitData's
   ``trace_span`` writing through ``logging``; plus log bytes per event for both formats.
2. Read path, 20,000 ``{3x64x64 uint8, int, str}`` samples written once with ``litdata.optimize``; one
   epoch per configuration in a fresh subprocess, ``num_workers`` 0 and 2, tracer off / chunk / sample:
   * LitData ``StreamingDataset`` + ``StreamingDataLoader`` with ``litdata.debugger.enable_tracer``;
   * streamscope ``StreamingDataset`` + ``StreamingDataLoader`` with ``streamscope.enable_tracer`` when
     ``streamscope.StreamingDataset`` is available (after the stream subsystem merged);
   * otherwise, and always as a control, a synthetic streamscope pipeline: a torch ``IterableDataset`` that
     decodes the same samples from in-memory chunks and emits the spans StreamingDataset emits (``read``
     per chunk, ``sample`` per item) under ``streamscope.enable_tracer``.
   Each subprocess times 3 epochs (``BENCH_EPOCHS``) and keeps the fastest, in wall time and in CPU time of
   the process and its reaped DataLoader workers (CPU time is the robust measure on a shared machine). An
   epoch's time includes writing its events out (``flush_tracer()`` for streamscope, the logging handlers'
   flush for LitData), so the tracer's encoding and I/O are counted, not only the recording.
   ``--rounds`` interleaved rounds of off/chunk/sample, best kept; every round's value is kept too
   (``rounds_*``) and ``off_*_spread`` (slowest / fastest tracer-off round) is the noise floor of the run.
   Ratios are tracer-level / tracer-off. The load average at start and end is recorded.

3. ``--ab-rounds N``: streamscope in one process per ``--ab-workers`` value (default 0 and 2) and per traced
   level (chunk, sample): off and level epochs alternating (CPU of the process and its workers, and wall:
   epoch + flush + the workers' exit), min and median per level, and the median over rounds of the level's
   epoch divided by the off epoch of the same round (``*_paired_median``: adjacent epochs share the
   machine's load of the moment). Every traced epoch ends with ``flush_tracer()`` (the strict measure).
   ``--ab-block K`` adds the same with K epochs per timed unit and one flush at its end: a training run's
   steady state, where the flusher writes about once a second.

4. ``--attribution-rounds N``: num_workers=0, chunk and sample level: the time spent inside the recorder's
   entry points and the final flush over the rest of the same epoch (see :func:`attribution`): robust to
   the machine's speed drifting between epochs, which the A/B ratios are not, but it does not see the loop's
   inline series appends (a clock read and a list append per boundary, no call to wrap): a lower bound.

5. ``--ab-telemetry-rounds N``: everything on against everything off (issue 23's cost target: at most 2 % more
   for one local epoch at ``num_workers`` 0 and 2), per ``--ab-workers`` value. Two processes live side by side
   for the whole run: ``off`` never switches anything on; ``on`` calls ``streamscope.enable_telemetry()`` once
   (metrics at ``chunk``, spans at ``chunk`` over OTLP/HTTP to a real receiver in this process,
   ``tests/support/otlp_receiver.py``, metrics exported every ``--ab-export-interval`` s, and the Prometheus
   endpoint on a free port, scraped by this process every ``--ab-scrape-interval`` s while ``on`` runs its
   epoch). ``--ab-telemetry-parts`` switches on part of it instead: ``otlp`` (no endpoint), ``prometheus`` (the
   endpoint, no OpenTelemetry), ``metrics`` (``enable_metrics("chunk")`` alone, no exporter), ``none`` (nothing:
   an A/A control, both processes off, whose ratio is the harness's own bias between two processes). The two run one
   epoch each per round, in alternating order (toggling inside one process is not possible here: an installed
   OpenTelemetry SDK switches metrics back on at its next collection). Each epoch is timed with the workers'
   exit; ``strict`` (``--ab-telemetry-modes``) adds ``Telemetry.force_flush()`` after it (its spans and metrics
   exported now, ``on`` only), as the tracer A/B's strict unit flushes; CPU of the process and its reaped
   workers. ``cpu_cycle`` also counts what a process spent between two of its epochs (its exporter and server
   threads while the other ran), so no background work escapes. Paired medians of per-round ratios with 95 %
   bootstrap intervals, as above.

Writes ``benchmarks/results/bench_tracer.json`` (``--out``: elsewhere, e.g. the single runs that
``pool_ab.py`` pools).

Internals used, because they are what is measured: part 1 times the recorder's entry points
(``streamscope.events`` ``span``/``bulk``/``ACTIVE``/``BUF``/``drain``), part 4 wraps them
(``streamscope.events.bus``) to attribute time to the tracer. Parts 2 and 3 use the public API only.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from typing import Any

from _ab import bootstrap_ci95
from _results import package_version, start
from torch.utils.data import IterableDataset

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SHAPE = (3, 64, 64)


# --- part 1: recorder micro-costs ---------------------------------------------------------------------


_clock = time.thread_time_ns  # CPU time of the calling thread: robust on a shared, overloaded machine


def _per_op(fn: Any, n: int) -> float:
    best = float("inf")
    for _ in range(3):
        t = _clock()
        fn(n)
        best = min(best, (_clock() - t) / n)
    return best


def micro(n: int, tmp: str) -> dict[str, Any]:
    from streamscope import events as ev
    from streamscope.api.tracing import enable_tracer, flush_tracer

    os.environ["STREAMSCOPE_TRACE_FLUSH_INTERVAL"] = "3600"
    os.environ["STREAMSCOPE_METRICS_INTERVAL"] = "3600"
    os.environ["STREAMSCOPE_TRACE_BUFFER_EVENTS"] = str(4 * n + 10)
    span = ev.span
    active = ev.ACTIVE

    def spans(k: int) -> None:
        for i in range(k):
            with span("sample", "sample", chunk=3, index=i):
                pass

    def guard(k: int) -> None:
        for _ in range(k):
            if "sample" in active:
                pass

    def empty(k: int) -> None:
        for _ in range(k):
            pass

    out: dict[str, Any] = {"events": n}
    loop = _per_op(empty, n)
    out["disabled_guard_ns"] = round(_per_op(guard, n) - loop, 1)
    out["disabled_span_ns"] = round(_per_op(spans, n) - loop, 1)

    log = os.path.join(tmp, "micro_streamscope.log")
    out_levels: dict[str, Any] = {}
    for label, compact in (("sample_compact_X", "sample"), ("sample_B_E", "")):
        os.environ["STREAMSCOPE_TRACE_COMPACT"] = compact
        if os.path.exists(log):
            os.remove(log)
        enable_tracer("sample", log_file=log, flush_interval=3600)
        ev.drain()
        t = _clock()
        spans(n)
        rec = _clock() - t
        recorded = len(ev.BUF)
        t = _clock()
        flush_tracer()
        flush = _clock() - t
        with open(log, "rb") as f:
            lines = sum(1 for _ in f)
        out_levels[label] = {
            "events_per_span": round(recorded / n, 2),
            "record_ns_per_span": round(rec / n - loop, 1),
            "flusher_ns_per_span": round(flush / n, 1),
            "log_bytes_per_event": round(os.path.getsize(log) / max(1, lines), 1),
            "log_bytes_per_span": round(os.path.getsize(log) / n, 1),
        }
        enable_tracer("off", log_file=log)
    os.environ.pop("STREAMSCOPE_TRACE_COMPACT", None)

    # bulk sample events as the vectorised batch path records them: one entry per batch of 64
    import numpy as np

    if os.path.exists(log):
        os.remove(log)
    enable_tracer("sample", log_file=log, flush_interval=3600)
    ev.drain()
    batches = max(1, n // 64)
    cols = [(np.full(64, k % 50, dtype=np.int64), np.arange(64, dtype=np.int64) + 64 * k) for k in range(batches)]
    bulk = ev.bulk
    t = _clock()
    for k, (ci, ii) in enumerate(cols):
        bulk("sample", "sample", ev.now(), chunk=ci, item=ii, batch=k)
    rec = _clock() - t
    t = _clock()
    flush_tracer()
    flush = _clock() - t
    events = batches * 64
    with open(log, "rb") as f:
        lines = sum(1 for _ in f)
    out_levels["sample_bulk_64"] = {
        "events": events,
        "lines": lines,
        "record_ns_per_event": round(rec / events, 1),
        "flusher_ns_per_event": round(flush / events, 1),
        "log_bytes_per_event": round(os.path.getsize(log) / max(1, lines), 1),
    }
    enable_tracer("off", log_file=log)
    out["streamscope"] = out_levels

    try:
        from litdata import debugger as ld_debugger
    except ImportError:
        return out
    ld_log = os.path.join(tmp, "micro_litdata.log")
    ld_debugger.enable_tracer("sample", log_file=ld_log, flush_interval=3600)
    trace_span = ld_debugger.trace_span

    def ld_spans(k: int) -> None:
        for i in range(k):
            with trace_span("sample", "sample", chunk=3, index=i):
                pass

    m = max(1, n // 4)
    t = _clock()
    ld_spans(m)
    ld_ns = (_clock() - t) / m
    for h in ld_debugger.LitDataLogger().get_logger().handlers:
        h.flush()
    out["litdata"] = {
        "events_per_span": 2,
        "trace_span_ns_per_span (formatting + logging, in the caller)": round(ld_ns, 1),
        "log_bytes_per_event": round(os.path.getsize(ld_log) / (2 * m), 1),
        "log_bytes_per_span": round(os.path.getsize(ld_log) / m, 1),
    }
    return out


# --- part 2: read path --------------------------------------------------------------------------------


def _sample(i: int) -> dict[str, Any]:
    import numpy as np

    rng = np.random.default_rng(i)
    return {"image": rng.integers(0, 255, SHAPE, dtype=np.uint8), "label": i, "name": f"sample-{i:06d}"}


def make_dataset(root: str, samples: int) -> str:
    out = os.path.join(root, f"ds_{samples}")
    if os.path.exists(os.path.join(out, "index.json")):
        return out
    import litdata

    litdata.optimize(fn=_sample, inputs=list(range(samples)), output_dir=out, chunk_bytes="16MB", num_workers=1)
    return out


CHILD = r"""
import json, multiprocessing, os, sys, time
lib, level, workers, data_dir, log, samples = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5], int(sys.argv[6])
flush = lambda: None
if lib == "litdata":
    import litdata as L
    from litdata import debugger
    if level != "off":
        logger = debugger.enable_tracer(level, log_file=log)
        flush = lambda: [h.flush() for h in logger.handlers]
    make = lambda: L.StreamingDataLoader(L.StreamingDataset(data_dir), batch_size=64, num_workers=workers)
elif lib in ("streamscope", "streamscope_per_sample"):
    import streamscope as S
    if level != "off":
        S.enable_tracer(level, log_file=log)
        flush = lambda: S.flush_tracer(wait_workers=60)  # workers write their last events as they exit
    def ident(x):
        return x
    # streamscope_per_sample: an identity transform keeps StreamingDataset on its per-sample decode path
    # in every configuration (at "sample" level it leaves its vectorised batch path anyway), isolating the
    # tracer's own cost from that switch.
    tf = ident if lib == "streamscope_per_sample" else None
    make = lambda: S.StreamingDataLoader(S.StreamingDataset(data_dir, transform=tf), batch_size=64, num_workers=workers)
else:
    sys.path.insert(0, os.environ["BENCH_DIR"])
    import streamscope as S
    from bench_tracer import SynthDataset
    import torch
    if level != "off":
        S.enable_tracer(level, log_file=log)
        flush = S.flush_tracer
    make = lambda: torch.utils.data.DataLoader(SynthDataset(samples), batch_size=64, num_workers=workers)
import resource
def cpu():
    c = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + c.ru_utime + c.ru_stime
best = best_cpu = float("inf")
n = 0
for _ in range(int(os.environ.get("BENCH_EPOCHS", "3"))):
    t, c = time.perf_counter(), cpu()
    n = 0
    for b in make():
        n += len(b["label"])
    flush()  # the tracer's own writing of this epoch's events is part of its cost
    deadline = time.monotonic() + 60
    while multiprocessing.active_children() and time.monotonic() < deadline:
        time.sleep(0.01)  # workers shut down in the background are reaped: their CPU time counts
    best = min(best, time.perf_counter() - t)
    best_cpu = min(best_cpu, cpu() - c)  # workers are reaped at the end of the epoch: their CPU counts
time.sleep(0.1)
size = os.path.getsize(log) if os.path.exists(log) else 0
lines = 0
if size:
    with open(log, "rb") as f:
        lines = sum(1 for line in f if b"ph:" in line)
print(json.dumps({"seconds": best, "cpu_seconds": best_cpu, "samples": n, "log_bytes": size, "events": lines}))
"""


class SynthDataset(IterableDataset):
    """Synthetic streamscope read path: decode samples from in-memory chunks, emitting StreamingDataset's spans."""

    def __init__(self, samples: int, chunk: int = 1300) -> None:
        self.samples, self.chunk = samples, chunk

    def __iter__(self) -> Any:
        import numpy as np
        import torch

        from streamscope import events as ev

        info = torch.utils.data.get_worker_info()
        wid, nw = (info.id, info.num_workers) if info else (0, 1)
        item = int(np.prod(SHAPE))
        blob = np.random.default_rng(0).integers(0, 255, item * self.chunk, dtype=np.uint8).tobytes()
        active = ev.ACTIVE
        nchunks = (self.samples + self.chunk - 1) // self.chunk
        for c in range(wid, nchunks, nw):
            lo, hi = c * self.chunk, min(self.samples, (c + 1) * self.chunk)
            with ev.span("read", "read", chunk=c, size=hi - lo):
                pass
            for i in range(lo, hi):
                if "sample" in active:
                    with ev.span("sample", "sample", chunk=c, index=i):
                        arr = np.frombuffer(blob, np.uint8, item, (i - lo) * item).reshape(SHAPE)
                        out = {"image": torch.from_numpy(arr.copy()), "label": i, "name": f"sample-{i:06d}"}
                else:
                    arr = np.frombuffer(blob, np.uint8, item, (i - lo) * item).reshape(SHAPE)
                    out = {"image": torch.from_numpy(arr.copy()), "label": i, "name": f"sample-{i:06d}"}
                yield out


def _json_child(code: str, args: list[str], timeout: float, **extra_env: str) -> dict[str, Any]:
    """Run ``code`` in a fresh Python with tracer variables scrubbed; its last stdout line is the JSON result."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("STREAMSCOPE_", "LITDATA_"))}
    env.update(extra_env)
    r = subprocess.run([sys.executable, "-c", code, *args], env=env, capture_output=True, text=True, timeout=timeout)
    if r.returncode != 0:
        return {"error": r.stderr.strip().splitlines()[-1] if r.stderr.strip() else f"exit {r.returncode}"}
    return json.loads(r.stdout.strip().splitlines()[-1])


def run_child(lib: str, level: str, workers: int, data_dir: str, tmp: str, samples: int) -> dict[str, Any]:
    log = os.path.join(tmp, f"{lib}_{level}_{workers}.log")
    if os.path.exists(log):
        os.remove(log)
    return _json_child(CHILD, [lib, level, str(workers), data_dir, log, str(samples)], 900, BENCH_DIR=HERE)


AB_CHILD = r"""
import json, multiprocessing, os, random, resource, statistics, sys, tempfile, time
import streamscope as S
data_dir, rounds, workers, level, block = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], int(sys.argv[5])
log = tempfile.mktemp(suffix=".log")
def cpu():  # this process and its reaped DataLoader workers
    c = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + c.ru_utime + c.ru_stime
def epoch():
    for _ in S.StreamingDataLoader(S.StreamingDataset(data_dir), batch_size=64, num_workers=workers):
        pass
def settle():  # the epoch's workers have exited (their last events written) and are reaped
    while multiprocessing.active_children():
        time.sleep(0.002)
levels = ["off", level]
res = {lv: [] for lv in levels}
S.enable_tracer(level, log_file=log); epoch(); S.flush_tracer(wait_workers=60); settle()
S.enable_tracer("off", log_file=log); epoch(); settle()
for r in range(rounds):
    for lv in levels[r % 2:] + levels[:r % 2]:  # alternating order: neither level always runs first
        S.enable_tracer(lv, log_file=log, flush_interval=5)
        c, w = cpu(), time.perf_counter()
        for _ in range(block):  # the tracer's flusher ticks on its own meanwhile (every second)
            epoch()
        f = time.perf_counter()
        if lv != "off":
            S.flush_tracer(wait_workers=60)  # the tracer's own writing, workers' too, is part of its cost
        settle()
        end = time.perf_counter()
        res[lv].append(((cpu() - c) / block, (end - w) / block, (end - f) / block))
        S.enable_tracer("off", log_file=log)
        if os.path.exists(log) and os.path.getsize(log) > 200e6:
            os.remove(log)
out = {"rounds": rounds, "workers": workers, "epochs_per_flush": block, "loadavg": [round(x, 2) for x in os.getloadavg()]}
for lv in levels:
    cpu_s = [x[0] for x in res[lv]]; wall = [x[1] for x in res[lv]]
    out[lv] = {"cpu_min": round(min(cpu_s), 4), "cpu_median": round(statistics.median(cpu_s), 4),
               "wall_min": round(min(wall), 4), "wall_median": round(statistics.median(wall), 4)}
for k in ("cpu_min", "cpu_median", "wall_min", "wall_median"):
    out[f"{level}_over_off_{k}"] = round(out[level][k] / out["off"][k], 3)
rng = random.Random(0)
def ci95(ratios):  # bootstrap interval of the median of the paired ratios
    meds = sorted(statistics.median(rng.choices(ratios, k=len(ratios))) for _ in range(2000))
    return [round(meds[50], 4), round(meds[1949], 4)]
for i, k in ((0, "cpu"), (1, "wall")):  # per round, the level's time over the off time of the same round
    ratios = [a[i] / b[i] for a, b in zip(res[level], res["off"])]
    out[f"{level}_over_off_{k}_paired_median"] = round(statistics.median(ratios), 4)
    out[f"{level}_over_off_{k}_paired_median_ci95"] = ci95(ratios)
# the wall time from the end of the last epoch to the end of the flush (and, with workers, their exit), over the
# off time of the same round: the flush's share; the rest of the ratio is spent inside the epochs
out[f"{level}_flush_over_off_wall_paired_median"] = round(
    statistics.median([a[2] / b[1] for a, b in zip(res[level], res["off"])]), 4)
offs = sorted(x[0] for x in res["off"])
out["off_cpu_quartile_spread"] = round(offs[3 * len(offs) // 4] / offs[len(offs) // 4], 3)
# every round's (cpu, wall, tail) per level, in run order: for other estimators and plots
out["rounds_raw"] = {lv: [[round(x, 6) for x in r] for r in res[lv]] for lv in levels}
print(json.dumps(out))
"""


def in_process_ab(data_dir: str, rounds: int, workers: int = 0, level: str = "chunk", block: int = 1) -> dict[str, Any]:
    """streamscope in ONE process: ``off`` and ``level`` alternating, ``block`` epochs per timed unit.

    One level per process, so neither sees the other's after-effects (a sample-level epoch leaves tens of
    MB of log behind it). CPU time of the process and its reaped DataLoader workers (every thread, so the
    flushers too) and wall time of ``block`` epochs plus one flush (and, with workers, until they have
    exited), per epoch; min and median per level, and the median over rounds of the level's time over the
    off time of the same round, with a 95 % bootstrap interval of that median (this machine's epochs run at
    two speeds, so a single round's ratio is noisy). ``block=1`` flushes after every epoch (the strict
    measure); a larger block is a training run's steady state, where the flusher writes about once a second.
    Also the flush's own share: the wall time from the end of the last epoch to the end of the flush, over
    the off time of the same round.
    """
    return _json_child(AB_CHILD, [data_dir, str(rounds), str(workers), level, str(block)], 3600)


ATTR_CHILD = r"""
import json, statistics, sys, tempfile, time
import streamscope as S
from streamscope import events as ev
from streamscope.events import bus, series
data_dir, rounds, level = sys.argv[1], int(sys.argv[2]), sys.argv[3]
log = tempfile.mktemp(suffix=".log")
pc = time.perf_counter_ns
acc = {"ns": 0, "calls": 0}
def wrap(owner, name):
    f = getattr(owner, name)
    def timed(*a, **k):
        t = pc()
        try:
            return f(*a, **k)
        finally:
            acc["ns"] += pc() - t
            acc["calls"] += 1
    setattr(owner, name, timed)
# every entry point of the recorder a read epoch reaches, and the final flush (encoding and writing); none of
# them calls another (Series.seal runs inside end, finish and the flush, so it is not wrapped itself)
for owner, name in ((series.Series, "begin"), (series.Series, "end"), (series.Series, "finish"),
                    (bus.CompleteSpan, "__enter__"), (bus.CompleteSpan, "__exit__"), (bus.Span, "__enter__"),
                    (bus.Span, "__exit__"), (ev, "bulk"), (ev, "each"), (S, "flush_tracer")):
    wrap(owner, name)
def noop():
    pass
probe = {"ns": 0}
def timed_noop():  # the wrapper's own cost, to subtract per call
    t = pc()
    try:
        return noop()
    finally:
        probe["ns"] += pc() - t
n = 200_000
t = pc()
for _ in range(n):
    timed_noop()
per_call = (pc() - t) / n - 0.0
t = pc()
for _ in range(n):
    noop()
per_call -= (pc() - t) / n  # what the wrapper adds beyond a plain call
def epoch():
    for _ in S.StreamingDataLoader(S.StreamingDataset(data_dir), batch_size=64, num_workers=0):
        pass
shares = []
S.enable_tracer(level, log_file=log, flush_interval=5)
epoch(); S.flush_tracer()
for _ in range(rounds):
    acc["ns"] = acc["calls"] = 0
    t = pc()
    epoch(); S.flush_tracer()
    total = pc() - t
    inside = acc["ns"] - acc["calls"] * per_call  # tracer time, wrapper overhead removed
    outside = total - acc["calls"] * per_call - inside
    shares.append(inside / outside)
print(json.dumps({"level": level, "rounds": rounds, "calls_per_epoch": acc["calls"],
                  "wrapper_ns_per_call": round(per_call, 1),
                  "tracer_over_rest_median": round(statistics.median(shares), 4),
                  "tracer_over_rest_min": round(min(shares), 4), "tracer_over_rest_max": round(max(shares), 4)}))
"""


def attribution(data_dir: str, rounds: int, level: str) -> dict[str, Any]:
    """Tracer time inside a num_workers=0 epoch over the rest of it, measured in the same epoch.

    Every recorder entry point the read path reaches (series, spans, bulk/each, and the final flush with its
    encoding and writing) is timed; the timing wrapper's own cost is measured and removed. Both numbers
    come from the same epoch, so a machine whose speed drifts between epochs (this one does, by up to 40 %)
    scales both alike. Not counted: any effect of the tracer on the cache behaviour of the rest of the loop.
    """
    return _json_child(ATTR_CHILD, [data_dir, str(rounds), level], 1800)


TEL_CHILD = r"""
import json, multiprocessing, os, resource, sys, time
arm, data_dir, workers, endpoint = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
export_s, strict, parts = float(sys.argv[5]), sys.argv[6] == "strict", sys.argv[7]
import streamscope as S
handle = None
# before any dataset or loader, as documented: the workers inherit what it switches on
if arm == "on" and parts == "metrics":
    from streamscope.api.tracing import enable_metrics
    enable_metrics("chunk")
elif arm == "on" and parts != "none":
    if parts == "prometheus":
        os.environ["OTEL_SDK_DISABLED"] = "true"  # no OpenTelemetry: the endpoint alone (it switches metrics on)
    handle = S.enable_telemetry(
        endpoint=endpoint, metric_export_interval=export_s, service_name="bench",
        prometheus_port=None if parts == "otlp" else 0,
    )
def cpu():  # this process (every thread) and its reaped DataLoader workers
    c = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + c.ru_utime + c.ru_stime
def epoch():
    for _ in S.StreamingDataLoader(S.StreamingDataset(data_dir), batch_size=64, num_workers=workers):
        pass
def finish():
    if handle is not None and strict:
        handle.force_flush(30)  # this epoch's spans and the metrics exported now (the strict measure)
    while multiprocessing.active_children():
        time.sleep(0.002)
epoch(); finish()
print(json.dumps({"ready": True, "port": handle.prometheus_port if handle else None}), flush=True)
for line in sys.stdin:
    if line.strip() != "go":
        break
    c, w = cpu(), time.perf_counter()
    epoch()
    f = time.perf_counter()
    finish()
    end = time.perf_counter()
    c2 = cpu()
    print(json.dumps({"cpu": c2 - c, "cpu_total": c2, "wall": end - w, "tail": end - f}), flush=True)
print(json.dumps({"stats": handle.stats if handle else {}}), flush=True)
"""


def _json_line(proc: subprocess.Popen[str]) -> dict[str, Any]:
    """The next JSON line a child prints (other lines skipped); raises when it exits first."""
    assert proc.stdout is not None
    while True:
        line = proc.stdout.readline()
        if not line:
            raise RuntimeError(f"child exited (code {proc.wait()})")
        line = line.strip()
        if line.startswith("{"):
            return json.loads(line)


def telemetry_ab(
    data_dir: str,
    rounds: int,
    workers: int,
    scrape_interval: float,
    log_dir: str,
    export_interval: float = 1.0,
    strict: bool = False,
    parts: str = "all",
) -> dict[str, Any]:
    """Everything on (metrics + OTLP spans and metrics to a real receiver + Prometheus scraped) against
    everything off, one process each, one epoch each per round in alternating order (see the module doc).
    ``strict``: ``on`` exports everything at the end of each of its epochs (``force_flush``), timed. ``parts``:
    what ``on`` switches on: ``all``; ``otlp`` (no Prometheus endpoint); ``prometheus`` (the endpoint, scraped,
    and no OpenTelemetry); ``metrics`` (``enable_metrics("chunk")`` alone: no exporter); ``none`` (nothing: the
    A/A control, two processes both off)."""
    sys.path.insert(0, ROOT)
    from tests.support.otlp_receiver import OTLPReceiver

    env = {k: v for k, v in os.environ.items() if not k.startswith(("STREAMSCOPE_", "LITDATA_", "OTEL_"))}
    env["LITDATA_DISABLE_VERSION_CHECK"] = "1"
    res: dict[str, list[dict[str, float]]] = {"off": [], "on": []}
    scrapes = {"ok": 0, "failed": 0, "bytes": 0}
    received = {"traces_requests": 0, "metrics_requests": 0, "spans": 0}
    with OTLPReceiver() as rx:
        procs: dict[str, subprocess.Popen[str]] = {}
        logs = {}
        try:
            for arm in ("off", "on"):
                logs[arm] = open(os.path.join(log_dir, f"telemetry_{arm}_w{workers}.err"), "w")  # noqa: SIM115
                procs[arm] = subprocess.Popen(
                    [sys.executable, "-c", TEL_CHILD, arm, data_dir, str(workers), rx.url, str(export_interval)]
                    + ["strict" if strict else "steady", parts],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=logs[arm],
                    text=True,
                    env=env,
                )
            ready = {arm: _json_line(p) for arm, p in procs.items()}
            url = f"http://127.0.0.1:{ready['on']['port']}/metrics"
            scraping, stop = threading.Event(), threading.Event()

            def scrape() -> None:
                while not stop.is_set() and ready["on"]["port"]:
                    if not scraping.wait(0.05):
                        continue
                    try:
                        with urllib.request.urlopen(url, timeout=5) as r:
                            scrapes["bytes"] += len(r.read())
                        scrapes["ok"] += 1
                    except Exception:
                        scrapes["failed"] += 1
                    stop.wait(scrape_interval)

            scraper = threading.Thread(target=scrape, daemon=True)
            scraper.start()
            loads = []
            for r in range(rounds):
                for arm in ("off", "on") if r % 2 == 0 else ("on", "off"):  # neither always runs first
                    p = procs[arm]
                    assert p.stdin is not None
                    if arm == "on":
                        scraping.set()
                    p.stdin.write("go\n")
                    p.stdin.flush()
                    got = _json_line(p)
                    scraping.clear()
                    res[arm].append(got)
                if r % 50 == 49:  # what arrived is counted, then dropped: the receiver's memory stays flat
                    loads.append(round(os.getloadavg()[0], 2))
                    received["traces_requests"] += len(rx.messages("traces"))
                    received["metrics_requests"] += len(rx.messages("metrics"))
                    received["spans"] += len(rx.spans())
                    rx.reset()
            stop.set()
            scraping.set()
            scraper.join(10)
            stats = {}
            for arm, p in procs.items():
                assert p.stdin is not None
                p.stdin.write("stop\n")
                p.stdin.flush()
                stats[arm] = _json_line(p).get("stats")
                p.wait(120)
            received["traces_requests"] += len(rx.messages("traces"))
            received["metrics_requests"] += len(rx.messages("metrics"))
            received["spans"] += len(rx.spans())
        finally:
            for p in procs.values():
                if p.poll() is None:
                    p.kill()
            for f in logs.values():
                f.close()
    out: dict[str, Any] = {
        "switched_on": parts,
        "rounds": rounds,
        "workers": workers,
        "scrape_interval_s": scrape_interval,
        "metric_export_interval_s": export_interval,
        "force_flush_every_epoch": strict,
        "loadavg_every_50_rounds": loads,
        "scrapes": scrapes,
        "received": received,
        "telemetry_stats": stats.get("on"),
    }
    for arm in ("off", "on"):
        xs = res[arm]
        cyc = [b["cpu_total"] - a["cpu_total"] for a, b in zip(xs, xs[1:])]
        out[arm] = {
            "cpu_median": round(statistics.median(x["cpu"] for x in xs), 4),
            "wall_median": round(statistics.median(x["wall"] for x in xs), 4),
            "cpu_cycle_median": round(statistics.median(cyc), 4) if cyc else None,
        }
    for k in ("cpu", "wall"):
        ratios = [a[k] / b[k] for a, b in zip(res["on"], res["off"])]
        out[f"on_over_off_{k}_paired_median"] = round(statistics.median(ratios), 4)
        out[f"on_over_off_{k}_paired_median_ci95"] = bootstrap_ci95(ratios)
        q = sorted(ratios)
        out[f"on_over_off_{k}_quartiles"] = [round(q[len(q) // 4], 4), round(q[3 * len(q) // 4], 4)]
    on_c, off_c = res["on"], res["off"]
    cyc_ratios = [
        (on_c[i]["cpu_total"] - on_c[i - 1]["cpu_total"]) / (off_c[i]["cpu_total"] - off_c[i - 1]["cpu_total"])
        for i in range(1, len(on_c))
    ]
    if cyc_ratios:
        out["on_over_off_cpu_cycle_paired_median"] = round(statistics.median(cyc_ratios), 4)
        out["on_over_off_cpu_cycle_paired_median_ci95"] = bootstrap_ci95(cyc_ratios)
    out["on_flush_over_off_wall_paired_median"] = round(
        statistics.median(a["tail"] / b["wall"] for a, b in zip(on_c, off_c)), 4
    )
    offs = sorted(x["cpu"] for x in off_c)
    out["off_cpu_quartile_spread"] = round(offs[3 * len(offs) // 4] / offs[len(offs) // 4], 3)
    out["rounds_raw"] = {
        arm: [[round(x["cpu"], 6), round(x["wall"], 6), round(x["tail"], 6)] for x in res[arm]] for arm in res
    }
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=int, default=20_000)
    ap.add_argument("--micro-events", type=int, default=200_000)
    ap.add_argument("--workers", default="0,2")
    ap.add_argument("--skip-litdata-read", action="store_true")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--libs", default="litdata,streamscope,streamscope_per_sample")
    ap.add_argument("--skip-micro", action="store_true")
    ap.add_argument("--ab-rounds", type=int, default=0, help="also run the in-process A/B with this many rounds")
    ap.add_argument("--ab-workers", default="0,2", help="num_workers values of the in-process A/B")
    ap.add_argument("--ab-block", type=int, default=0, help="also run the A/B with this many epochs per flush")
    ap.add_argument(
        "--ab-blocks", default="", help="epochs per flush of the A/B runs, a comma list (overrides --ab-block)"
    )
    ap.add_argument("--attribution-rounds", type=int, default=0, help="also time the tracer inside w0 epochs")
    ap.add_argument("--ab-levels", default="chunk,sample", help="traced levels of the in-process A/B")
    ap.add_argument("--out", default=None, help="write the result here instead of results/bench_tracer.json")
    ap.add_argument(
        "--ab-telemetry-rounds", type=int, default=0, help="also run everything on / off (telemetry) this many rounds"
    )
    ap.add_argument("--ab-scrape-interval", type=float, default=1.0, help="seconds between Prometheus scrapes")
    ap.add_argument("--ab-export-interval", type=float, default=1.0, help="seconds between OTLP metric exports")
    ap.add_argument(
        "--ab-telemetry-parts",
        default="all",
        help="what the telemetry A/B's on arm switches on: all, otlp, prometheus, metrics, none (A/A control; a comma list)",
    )
    ap.add_argument(
        "--ab-telemetry-modes",
        default="steady",
        help="steady (exports on their own schedule) and/or strict (force_flush after every epoch), comma list",
    )
    args = ap.parse_args()
    bench = start("bench_tracer", args)

    import streamscope

    result: dict[str, Any] = {"samples": args.samples}
    with tempfile.TemporaryDirectory(prefix="bench-tracer-") as tmp:
        if not args.skip_micro:
            result["micro"] = micro(args.micro_events, tmp)
            print(json.dumps(result["micro"], indent=1), flush=True)

        data_root = os.path.join(tempfile.gettempdir(), "streamscope-bench-data")
        data_dir = make_dataset(data_root, args.samples)
        libs = [x for x in args.libs.split(",") if x and not (x == "litdata" and args.skip_litdata_read)]
        try:
            streamscope.StreamingDataset  # noqa: B018
        except AttributeError:
            libs = [x for x in libs if not x.startswith("streamscope")]
            result["streamscope_read_path"] = "streamscope.StreamingDataset not available in this tree"
        read: dict[str, Any] = {}
        for lib in libs:
            for workers in [int(w) for w in args.workers.split(",")]:
                row: dict[str, Any] = {}
                for _ in range(args.rounds):  # interleaved rounds spread the noise of a shared machine
                    for level in ("off", "chunk", "sample"):
                        got = run_child(lib, level, workers, data_dir, tmp, args.samples)
                        old = row.get(level)
                        if old is None or "error" in old:
                            row[level] = got
                            if "error" not in got:
                                got["rounds_seconds"] = [round(got["seconds"], 4)]
                                got["rounds_cpu_seconds"] = [round(got["cpu_seconds"], 4)]
                        elif "error" not in got:
                            for k in ("seconds", "cpu_seconds"):
                                old[k] = min(old[k], got[k])
                                old[f"rounds_{k}"].append(round(got[k], 4))
                for key, label in (("seconds", "wall"), ("cpu_seconds", "cpu")):
                    base = row["off"].get(key)
                    for level in ("chunk", "sample"):
                        s = row[level].get(key)
                        if base and s:
                            row[f"{level}_over_off_{label}"] = round(s / base, 3)
                offs = row["off"].get("rounds_cpu_seconds") or []
                if len(offs) > 1:  # the noise floor: how far apart the tracer-off runs themselves are
                    row["off_cpu_spread"] = round(max(offs) / min(offs), 3)
                    row["off_wall_spread"] = round(
                        max(row["off"]["rounds_seconds"]) / min(row["off"]["rounds_seconds"]), 3
                    )
                for level in ("chunk", "sample"):
                    ev_n = row[level].get("events")
                    if ev_n:
                        row[level]["log_bytes_per_event"] = round(row[level]["log_bytes"] / ev_n, 1)
                read[f"{lib}/workers={workers}"] = row
                print(f"{lib} workers={workers}: {json.dumps(row)}", flush=True)
        result["read"] = read
        if args.attribution_rounds:
            for level in ("chunk", "sample"):
                got = attribution(data_dir, args.attribution_rounds, level)
                result[f"attribution_w0_{level}"] = got
                print(f"attribution w0 {level}: {json.dumps(got)}", flush=True)
        if args.ab_rounds:
            blocks = [1] + ([args.ab_block] if args.ab_block > 1 else [])
            if args.ab_blocks:
                blocks = [int(b) for b in args.ab_blocks.split(",") if b]
            for workers in [int(w) for w in args.ab_workers.split(",") if w]:
                for level in [x for x in args.ab_levels.split(",") if x]:
                    for block in blocks:
                        got = in_process_ab(data_dir, args.ab_rounds, workers, level, block)
                        key = f"in_process_ab_w{workers}_{level}" + (f"_block{block}" if block > 1 else "")
                        result[key] = got
                        print(f"in-process A/B w{workers} {level} block={block}: {json.dumps(got)}", flush=True)
        if args.ab_telemetry_rounds:
            for parts in [x for x in args.ab_telemetry_parts.split(",") if x]:
                for mode in [m for m in args.ab_telemetry_modes.split(",") if m]:
                    for workers in [int(w) for w in args.ab_workers.split(",") if w]:
                        got = telemetry_ab(
                            data_dir,
                            args.ab_telemetry_rounds,
                            workers,
                            args.ab_scrape_interval,
                            tmp,
                            args.ab_export_interval,
                            mode == "strict",
                            parts,
                        )
                        key = f"telemetry_ab_w{workers}" + ("_strict" if mode == "strict" else "")
                        key += "" if parts == "all" else f"_{parts}"
                        key += f"_export{args.ab_export_interval:g}s_scrape{args.ab_scrape_interval:g}s"
                        result[key] = got
                        brief = {k: v for k, v in got.items() if k != "rounds_raw"}
                        print(f"telemetry A/B {key}: {json.dumps(brief)}", flush=True)
    # the telemetry A/B's children run the OpenTelemetry SDK, its OTLP exporter and prometheus_client of this venv
    exporters = ("opentelemetry-sdk", "opentelemetry-exporter-otlp-proto-http", "prometheus-client")
    versions = {d: package_version(d) for d in exporters} if args.ab_telemetry_rounds else None
    bench.write(result, summary=summarize(result), out=args.out, versions=versions)


def summarize(result: dict[str, Any]) -> list[dict[str, Any]]:
    """The README's rows: each measure's chunk/off and sample/off ratios (CPU; A/B rows: paired medians), and the
    telemetry A/B's on/off."""
    rows: list[dict[str, Any]] = []
    for name, row in result.get("read", {}).items():
        rows.append(
            {
                "measure": f"read, one process per level: {name}",
                "chunk / off": row.get("chunk_over_off_cpu"),
                "sample / off": row.get("sample_over_off_cpu"),
                "noise (off spread)": row.get("off_cpu_spread"),
            }
        )
    for key, got in result.items():
        if not key.startswith("in_process_ab_"):
            continue
        level = next(lv for lv in ("chunk", "sample") if f"{lv}_over_off_cpu_paired_median" in got)
        ci = got.get(f"{level}_over_off_cpu_paired_median_ci95")
        value = got[f"{level}_over_off_cpu_paired_median"]
        rows.append(
            {
                "measure": f"A/B {key[len('in_process_ab_'):]}, {got['rounds']} rounds, CPU paired median",
                "chunk / off": value if level == "chunk" else None,
                "sample / off": value if level == "sample" else None,
                "noise (off spread)": f"95 % {ci[0]}-{ci[1]}" if ci else got.get("off_cpu_quartile_spread"),
            }
        )
    for key, got in result.items():
        if not key.startswith("telemetry_ab_"):
            continue
        ci = got["on_over_off_cpu_paired_median_ci95"]
        what = {
            "all": "everything on",
            "metrics": "metrics alone",
            "otlp": "metrics + OTLP",
            "prometheus": "",
            "none": "A/A control: both off",
        }
        part = what.get(got.get("switched_on", "all")) or "metrics + Prometheus"
        if got.get("switched_on", "all") in ("all", "otlp"):
            part += f", OTLP metrics every {got['metric_export_interval_s']:g} s"
        if got.get("switched_on", "all") in ("all", "prometheus"):
            part += f", scraped every {got['scrape_interval_s']:g} s"
        if got.get("force_flush_every_epoch"):
            part += ", force_flush per epoch"
        if got.get("label"):  # a section merged from another run (which tree, when)
            part += f", {got['label']}"
        rows.append(
            {
                "measure": f"telemetry on/off w{got['workers']} ({part}), {got['rounds']} rounds, CPU paired median",
                "on / off": got["on_over_off_cpu_paired_median"],
                "noise (off spread)": f"95 % {ci[0]}-{ci[1]}",
            }
        )
    for key, got in result.items():
        if key.startswith("attribution_w0_"):
            level = key.rsplit("_", 1)[1]
            rows.append(
                {
                    "measure": f"attribution w0_{level}, {got['rounds']} rounds: 1 + tracer time over the rest",
                    "chunk / off": round(1 + got["tracer_over_rest_median"], 4) if level == "chunk" else None,
                    "sample / off": round(1 + got["tracer_over_rest_median"], 4) if level == "sample" else None,
                    "noise (off spread)": None,
                }
            )
    return rows


if __name__ == "__main__":
    main()
