"""The training loop one arm of ``bench_autotune.py`` runs, in its own process (one per rank).

A loop with a fixed cost per step: each batch is taken from the loader (the time in ``next()`` is the loop's wait
for data), then the step sleeps ``step_s`` (standing for the GPU). With two ranks, each step also all-reduces a
small tensor over gloo (the gradient sync): it carries "I have a batch" and "go on", so the ranks stop together
at the end of an epoch or of the run, and a slow rank holds the other back as in real data-parallel training.

The loop runs whole epochs (a fresh ``iter(loader)`` each) until ``duration_s`` after the loader was built, and
reports per-second sample counts from that moment (the throughput trace), the throughput over the whole window
(``window_rate``: samples of the batches that reached the loop within ``duration_s`` of the loader's construction,
over ``duration_s``: start-up, first batch and any tuning count against every arm alike), the throughput after the
warm-up (from the first batch after ``warmup_s`` to the last one), the loop's wait per batch, the DataLoader's
``num_workers`` at each epoch's start, and for streamscope the registry's ``streamscope.loader.wait``, cache size
and live knob values (``streamscope.events.metrics_view()``; metrics are on when ``STREAMSCOPE_METRICS_LEVEL`` is
set for the arm), and the tuner's kept values (``loader.state_dict()["autotune"]``). ``step_changes``
(``[[t_s, step_s], ...]``) changes the step time mid-run: the training loop gets faster or slower.

Only public names of the engines are used: ``StreamingDataset`` / ``StreamingDataLoader`` of each, and for
streamscope ``streamscope.events.metrics_view`` with the metric registry ``streamscope.events.registry.M`` (the
documented read of the merged metrics: exporters, dashboards and the tuner read the same), the knob gauges
``streamscope.knob.value{knob}`` and ``state_dict()`` (docs/knobs.md, tune/README.md): nothing of the tuner's
internals, so the benchmark runs the same against any controller behind ``autotune=True``. The knobs of the grid
reach streamscope through ``max_pre_download`` and the documented environment variable
``STREAMSCOPE_DOWNLOAD_CONCURRENCY``, set by the parent before streamscope is imported. A raw-file arm
(``spec["raw"]``) reads ``StreamingRawDataset`` instead: LitData's through torch's ``DataLoader``, streamscope's
through its ``StreamingDataLoader``, the grid's knobs by ``max_prefetch`` and ``STREAMSCOPE_RAW_CONCURRENCY``.
"""

from __future__ import annotations

import inspect
import json
import math
import os
import sys
import time
from typing import Any

#: CPU seconds the decode-heavy transform spends per sample (set from the arm's spec before the loader forks).
DECODE_CPU_S = 0.0


def decode_heavy(sample: Any) -> Any:
    """Stands for decoding an image: a fixed amount of CPU per sample (thread CPU time, so it costs the same
    CPU whatever the machine's load), then the sample unchanged (a decoder's output is uint8 pixels too)."""
    end = time.thread_time() + DECODE_CPU_S
    while time.thread_time() < end:
        pass
    return sample


class Unavailable(Exception):
    """The arm cannot run with this build (the tuned arm before the tuner exists)."""


def as_list(items: list[Any]) -> list[Any]:
    """The collate function of the raw-file arms: a batch is the list of the files' bytes."""
    return list(items)


def _batch_len(batch: Any, raw: bool = False) -> int:
    if raw:
        return len(batch)
    if isinstance(batch, dict):
        return len(next(iter(batch.values())))
    if isinstance(batch, (list, tuple)):
        return len(batch[0])
    return len(batch)


def _patch_litdata_allow_http() -> str:
    """LitData builds its obstore client without ``allow_http``, so it cannot reach the local plain-http S3 server;
    add it (LitData processes only; nothing else of LitData changes)."""
    import litdata.streaming.downloader as ld_downloader

    before = dict(ld_downloader._OBSTORE_CLIENT_OPTIONS)
    ld_downloader._OBSTORE_CLIENT_OPTIONS = {**before, "allow_http": True}  # type: ignore[assignment]
    return f"litdata.streaming.downloader._OBSTORE_CLIENT_OPTIONS += allow_http=True (was {before})"


def _make_litdata(spec: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    import litdata

    info: dict[str, Any] = {"engine_version": litdata.__version__, "engine_file": litdata.__file__}
    if spec["input"].startswith("s3://"):
        info["patch"] = _patch_litdata_allow_http()
    if spec.get("raw"):  # LitData's raw files are read through torch's DataLoader (its documented use)
        from litdata.raw import StreamingRawDataset
        from litdata.raw.indexer import FileIndexer, FileMetadata
        from torch.utils.data import DataLoader

        listing = [FileMetadata(path=p, size=int(n)) for p, n in spec["raw_listing"]]

        class Listed(FileIndexer):
            """LitData lists S3 with s3fs, which is not installed: the files come from the harness's listing
            (the files are then read by LitData's own code)."""

            def build_or_load_index(self, *args: Any, **kwargs: Any) -> list[Any]:
                return list(listing)

        info["patch_index"] = "LitData's FileIndexer.build_or_load_index returns the harness's listing (no s3fs)"
        raw = StreamingRawDataset(
            spec["input"],
            cache_dir=spec["cache_dir"],
            storage_options=dict(spec.get("storage_options") or {}),
            indexer=Listed(),
        )
        loader = DataLoader(raw, batch_size=spec["batch_size"], num_workers=spec["workers"], collate_fn=as_list)
        return loader, info
    kw: dict[str, Any] = {"cache_dir": spec["cache_dir"], "max_cache_size": spec["max_cache_size"]}
    if spec.get("storage_options"):
        kw["storage_options"] = dict(spec["storage_options"])
    if spec.get("transform") == "decode":
        kw["transform"] = decode_heavy
    if spec.get("prefetch") is not None:
        kw["max_pre_download"] = int(spec["prefetch"])
    ds = litdata.StreamingDataset(spec["input"], **kw)
    return litdata.StreamingDataLoader(ds, batch_size=spec["batch_size"], num_workers=spec["workers"]), info


def tuner_switch(loader_cls: Any) -> str | None:
    """How to switch the tuner on with this build: ``"argument"`` when ``StreamingDataLoader`` takes
    ``autotune``, else None."""
    try:
        params = inspect.signature(loader_cls.__init__).parameters
    except (TypeError, ValueError):
        return None
    return "argument" if "autotune" in params else None


def _make_streamscope(spec: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    import streamscope

    info: dict[str, Any] = {"engine_version": streamscope.__version__, "engine_file": streamscope.__file__}
    kw: dict[str, Any] = {"cache_dir": spec["cache_dir"], "max_cache_size": spec["max_cache_size"]}
    if spec.get("storage_options"):
        kw["storage_options"] = dict(spec["storage_options"])
    if spec.get("transform") == "decode":
        kw["transform"] = decode_heavy
    if spec.get("prefetch") is not None:
        kw["max_pre_download"] = int(spec["prefetch"])
    loader_kw: dict[str, Any] = {"batch_size": spec["batch_size"], "num_workers": spec["workers"]}
    if spec.get("autotune"):
        how = tuner_switch(streamscope.StreamingDataLoader)
        if how is None:
            raise Unavailable("StreamingDataLoader takes no autotune argument in this build (no tuner yet)")
        loader_kw["autotune"] = True
        info["tuner_switch"] = how
    if spec.get("raw"):
        # raw files: no chunk cache; the grid's look-ahead is max_prefetch (its GET limit comes by the documented
        # STREAMSCOPE_RAW_CONCURRENCY, set by the parent)
        raw_kw = {k: v for k, v in kw.items() if k in ("cache_dir", "storage_options")}
        if spec.get("prefetch") is not None:
            raw_kw["max_prefetch"] = int(spec["prefetch"])
        ds = streamscope.StreamingRawDataset(spec["input"], **raw_kw)
        return streamscope.StreamingDataLoader(ds, collate_fn=as_list, **loader_kw), info
    ds = streamscope.StreamingDataset(spec["input"], **kw)
    try:
        loader = streamscope.StreamingDataLoader(ds, **loader_kw)
    except TypeError as exc:
        if spec.get("autotune") and "autotune" in str(exc):
            raise Unavailable(f"autotune=True refused: {exc}") from None
        raise
    return loader, info


def _metrics(spec: dict[str, Any]) -> dict[str, float] | None:
    """The registry's view of the run so far (streamscope with metrics on), else None."""
    # on for the tuned arm (autotune=True switches metrics on) or when the arm's environment asks
    if spec["engine"] != "streamscope" or not (spec.get("autotune") or os.environ.get("STREAMSCOPE_METRICS_LEVEL")):
        return None
    from streamscope.events import metrics_view
    from streamscope.events.registry import M

    v = metrics_view()
    out = {
        "loader_wait_s": v.value(M.LOADER_WAIT),
        "loader_batches": v.value(M.LOADER_BATCHES),
        "cache_size_bytes": v.value(M.CACHE_SIZE),
    }
    for knob in KNOBS:
        out[f"knob.{knob}"] = v.value(M.KNOB_VALUE, knob=knob)
    return out


#: The live knobs whose gauges an arm reports (docs/knobs.md).
KNOBS = ("prefetch_depth", "download_concurrency", "raw_prefetch", "raw_concurrency", "max_cache_size")


class _Sync:
    """The gradient-sync stand-in of a two-rank run: one all-reduce (MIN) per step of [have a batch, go on]."""

    def __init__(self, dist: dict[str, Any] | None) -> None:
        self.on = dist is not None
        if not self.on:
            return
        import torch
        import torch.distributed as tdist

        self.torch, self.tdist = torch, tdist
        tdist.init_process_group(
            "gloo",
            init_method=f"tcp://127.0.0.1:{dist['port']}",
            rank=int(dist["rank"]),
            world_size=int(dist["world"]),
        )

    def barrier(self) -> None:
        if self.on:
            self.tdist.barrier()

    def agree(self, have: bool, go: bool) -> tuple[bool, bool]:
        if not self.on:
            return have, go
        t = self.torch.tensor([int(have), int(go)], dtype=self.torch.int32)
        self.tdist.all_reduce(t, op=self.tdist.ReduceOp.MIN)
        return bool(t[0]), bool(t[1])

    def close(self) -> None:
        if self.on:
            self.tdist.destroy_process_group()


def _step_at(t: float, step_s: float, changes: list[list[float]]) -> float:
    """The step time at ``t`` seconds into the run: ``step_s``, then each ``[t_s, step_s]`` change once reached."""
    for at, st in changes:
        if t >= at:
            step_s = st
    return step_s


def _tuner_values(loader: Any) -> dict[str, Any] | None:
    """The tuner's kept values, read as a user would (``loader.state_dict()["autotune"]["values"]``)."""
    try:
        state = loader.state_dict()
    except Exception as exc:  # a loader without state_dict support for this dataset: say so, do not fail the arm
        return {"error": f"state_dict(): {type(exc).__name__}: {exc}"[:300]}
    auto = state.get("autotune") if isinstance(state, dict) else None
    return auto.get("values") if isinstance(auto, dict) else None


def run_arm(spec: dict[str, Any]) -> dict[str, Any]:
    """Run one arm (or one rank of it) as ``spec`` says; the result as a JSON-able dict."""
    global DECODE_CPU_S
    DECODE_CPU_S = float(spec.get("decode_cpu_s") or 0.0)
    import torch  # noqa: F401  (a training script has it loaded; the parent process imported it already)

    sync = _Sync(spec.get("dist"))
    make = _make_litdata if spec["engine"] == "litdata" else _make_streamscope
    step_s, duration, warmup = float(spec["step_s"]), float(spec["duration_s"]), float(spec.get("warmup_s") or 0.0)
    changes = [[float(t), float(v)] for t, v in spec.get("step_changes") or []]
    knob_every = float(spec.get("knob_sample_s") or 0.0)
    sync.barrier()  # the ranks start their clocks together
    t0 = time.perf_counter()
    try:
        loader, info = make(spec)
    except Unavailable as exc:
        sync.close()
        return {"status": "not available", "reason": str(exc)}
    built = time.perf_counter() - t0
    stop_at = t0 + duration
    bins: list[int] = []  # samples per second since t0
    waits: list[float] = []  # the loop's wait per second since t0
    first_batch = None
    batches = samples = 0
    in_window = 0  # samples of the batches that reached the loop before stop_at
    win_batches = win_samples = 0
    win_wait = total_wait = 0.0
    win_start: float | None = None
    last_t = 0.0
    epochs = 0
    epoch_log: list[dict[str, Any]] = []  # per epoch: its start and the loader's num_workers then
    knob_log: list[dict[str, Any]] = []
    next_knobs = knob_every
    go = True
    while go:
        epoch_log.append(
            {"t_s": round(time.perf_counter() - t0, 2), "num_workers": getattr(loader, "num_workers", None)}
        )
        it = iter(loader)
        epochs += 1
        while True:
            w0 = time.perf_counter()
            try:
                batch = next(it)
            except StopIteration:
                batch = None
            w1 = time.perf_counter()
            have, go = sync.agree(batch is not None, w1 < stop_at)
            if not have:
                break
            n = _batch_len(batch, bool(spec.get("raw")))
            t = w1 - t0
            sec = int(t)
            while len(bins) <= sec:
                bins.append(0)
                waits.append(0.0)
            bins[sec] += n
            waits[sec] += w1 - w0
            batches += 1
            samples += n
            if t < duration:
                in_window += n
            total_wait += w1 - w0
            if first_batch is None:
                first_batch = t
            if win_start is None:
                if t >= warmup:  # the window opens at the first batch after the warm-up (not counted itself)
                    win_start = last_t = t
            else:
                win_batches += 1
                win_samples += n
                win_wait += w1 - w0
                last_t = t
            del batch
            if knob_every and t >= next_knobs:
                next_knobs = t + knob_every
                m = _metrics(spec)
                if m is not None:
                    knob_log.append({"t_s": round(t, 1), **{k[5:]: v for k, v in m.items() if k.startswith("knob.")}})
            time.sleep(_step_at(t, step_s, changes))
            if not go:
                break
        del it
    end = time.perf_counter() - t0
    if spec.get("autotune"):
        info["tuner_values"] = _tuner_values(loader)
    metrics_end = None
    if _metrics(spec) is not None:
        # the main process publishes its own metrics every metrics_interval (1 s): let the last tick pass
        time.sleep(1.2)
        metrics_end = _metrics(spec)
    sync.close()
    window = last_t - win_start if win_start is not None else 0.0
    return {
        "status": "ok",
        **info,
        "pid": os.getpid(),
        "rank": (spec.get("dist") or {}).get("rank", 0),
        "build_s": built,
        "first_batch_s": first_batch,
        "run_s": end,
        "epochs": epochs,
        "epoch_log": epoch_log,
        "batches": batches,
        "samples": samples,
        "samples_in_window": in_window,
        "window_rate": in_window / duration if duration > 0 else 0.0,
        "warm_start_s": win_start,
        "warm_s": window,
        "warm_samples": win_samples,
        "warm_batches": win_batches,
        "warm_rate": win_samples / window if win_samples and window > 0 else 0.0,
        "wait_per_batch_s": win_wait / win_batches if win_batches else math.nan,
        "wait_total_s": total_wait,
        "per_second_samples": bins,
        "per_second_wait_s": [round(w, 4) for w in waits],
        "knobs_over_time": knob_log,
        "metrics_end": metrics_end,
    }


def child_main(spec: dict[str, Any], out_path: str) -> int:
    """Entry point of an arm's process: run, write the result to ``out_path`` (atomically); the exit code."""
    try:
        res = run_arm(spec)
        code = 0
    except BaseException as exc:  # the harness reports it as the arm's outcome
        import traceback

        traceback.print_exc()
        res = {"status": "error", "error": f"{type(exc).__name__}: {exc}"[:2000]}
        code = 1
    tmp = out_path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(res, f)
    os.replace(tmp, out_path)
    sys.stdout.flush()
    sys.stderr.flush()
    return code
