"""The body of one optimize()/map() worker process.

A worker owns a contiguous slice of the inputs. For optimize it runs ``fn`` on each input, feeds every non-None
sample to a :class:`ChunkWriter` writing into the job's private staging directory, publishes each closed chunk
to the output store and, with ``use_checkpoint``, records after every closed chunk (atomically) how far it got.
For map it runs ``fn(input, tmp_dir)`` and publishes the files ``fn`` wrote. It reports ``done`` or ``error``
on the result queue and its progress (inputs finished) in a shared counter.

Checkpoint record (``.checkpoints/checkpoint-{rank}.json`` in the output store)::

    {"rank": r, "chunks": [...entries of closed chunks...], "config": {...} | null,
     "inputs_done": p, "skip_samples": s, "next_chunk_index": k, "finished": bool, "writer_state": {...}}

``inputs_done``/``skip_samples`` point at the first sample NOT in a closed chunk: it is sample ``s`` (0-based,
counting non-None samples) of the worker's input ``p``. Resuming re-runs ``fn`` on input ``p``, drops its first
``s`` samples and continues, so the chunks come out exactly as in an uninterrupted run (fn must be deterministic).
``writer_state`` (:meth:`ChunkWriter.state`) carries what the chunk writer learnt from the samples before: the
first sample's leaf formats and, in LitData 0.2.76's layout, the fused schema and the bytes per Arrow row.
"""

from __future__ import annotations

import inspect
import json
import os
import pickle
import queue as queue_mod
import shutil
import signal
import sys
import traceback
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from streamscope import events as ev
from streamscope._core import config as cfg
from streamscope._core.errors import MapReturnError, short_repr
from streamscope.events import context as ev_context
from streamscope.events import kinds
from streamscope.processing._store import open_output, publish
from streamscope.processing._writer import ChunkWriter
from streamscope.processing.sentinel import ALL_DONE, is_all_done

__all__ = [
    "CHECKPOINT_DIR",
    "Resume",
    "WorkerJob",
    "checkpoint_key",
    "execute",
    "run_worker",
    "set_environ",
    "work_items",
]


CHECKPOINT_DIR = ".checkpoints"


def checkpoint_key(rank: int) -> str:
    """Key of a worker's checkpoint record in the output store."""
    return f"{CHECKPOINT_DIR}/checkpoint-{rank}.json"


@dataclass
class Resume:
    """Where a worker restarts (see module doc)."""

    inputs_done: int = 0
    skip_samples: int = 0
    chunks: list[dict[str, Any]] = field(default_factory=list)
    config: dict[str, Any] | None = None
    next_chunk_index: int = 0
    finished: bool = False
    writer_state: dict[str, Any] | None = None

    @classmethod
    def from_record(cls, rec: dict[str, Any]) -> Resume:
        return cls(
            inputs_done=int(rec["inputs_done"]),
            skip_samples=int(rec["skip_samples"]),
            chunks=list(rec["chunks"]),
            config=rec.get("config"),
            next_chunk_index=int(rec["next_chunk_index"]),
            finished=bool(rec.get("finished", False)),
            writer_state=rec.get("writer_state"),
        )


@dataclass
class WorkerJob:
    """Everything one worker needs (picklable for the spawn start method)."""

    kind: str  # "optimize" | "map"
    worker: int
    num_workers: int
    fn: Callable[..., Any]
    inputs: Sequence[Any]
    offset: int  # global index of inputs[0]
    output_dir: str
    storage_options: dict[str, Any]
    staging_dir: str
    writer_kwargs: dict[str, Any] = field(default_factory=dict)
    use_checkpoint: bool = False
    resume: Resume = field(default_factory=Resume)
    reader: Any = None
    parent_pid: int = field(default_factory=os.getpid)  # the main process; a worker orphaned by its death exits
    # queue mode: work items come from this multiprocessing queue (shared by all workers) until ALL_DONE;
    # ``inputs`` is then unused. ``source_indexed``: the queue carries ``(global index, item)`` pairs (the
    # keep_data_ordered=False queue optimize() fills), else bare user items (optimize(queue=...)).
    source: Any = None
    source_indexed: bool = False
    # multi-node: ``worker`` is the global worker rank ``node_rank * num_workers + local`` (LitData's numbering)
    num_nodes: int = 1
    node_rank: int = 0
    # False where the worker is not a child of the main process (a Ray task): no orphan check, no death signal
    in_child: bool = True

    @property
    def slot(self) -> int:
        """This worker's number on its node (its slot in the progress counters)."""
        return self.worker - self.node_rank * self.num_workers


def work_items(job: WorkerJob, start: int = 0) -> Iterator[tuple[int, int, Any]]:
    """``(position in this worker, global input index, item)`` for each item this worker processes."""
    if job.source is None:
        for pos in range(start, len(job.inputs)):
            _exit_if_orphaned(job)
            yield pos, job.offset + pos, job.inputs[pos]
        return
    poll = float(cfg.get("optimize_poll_interval"))
    pos = 0
    while True:
        _exit_if_orphaned(job)
        try:
            msg = job.source.get(timeout=poll)
        except queue_mod.Empty:
            continue
        if is_all_done(msg):
            job.source.put(ALL_DONE)  # one sentinel stops every worker: pass it on
            return
        if job.source_indexed:
            index, item = msg
        else:
            index, item = pos, msg
        yield pos, index, item
        pos += 1


def set_environ(job: WorkerJob) -> None:
    """LitData's variables (user fns read them to know which worker and node they run in), and the trace fields
    of this process: its node as the rank, its worker number as the worker (as a DataLoader worker is traced)."""
    os.environ["DATA_OPTIMIZER_GLOBAL_RANK"] = str(job.worker)
    os.environ["DATA_OPTIMIZER_NUM_WORKERS"] = str(job.num_workers)
    os.environ["DATA_OPTIMIZER_NUM_NODES"] = str(job.num_nodes)
    os.environ["DATA_OPTIMIZER_NODE_RANK"] = str(job.node_rank)
    ev_context.pin(
        {
            "dist_world_size": job.num_nodes,
            "dist_global_rank": job.node_rank,
            "dist_num_nodes": job.num_nodes,
            "worker_world_size": job.num_workers,
            "worker_rank": job.slot,
        }
    )


def execute(job: WorkerJob, progress: Any) -> tuple[Any, ...]:
    """Run the job in this process; return its report: ``("done", worker, chunks, config)`` or ``("error",
    worker, input index | None, input repr, what, pickled exception | None, traceback text)``.

    ``progress[job.slot]`` is set to the number of inputs finished as they finish. SystemExit and
    KeyboardInterrupt propagate (the worker is being stopped); anything else becomes an error report.
    """
    try:
        if job.kind == "map":
            _run_map(job, progress)
            return ("done", job.worker, [], None)
        chunks, config = _run_optimize(job, progress)
        return ("done", job.worker, chunks, config)
    except _InputFailed as failed:
        exc = failed.__cause__
        assert exc is not None
        kinds.crash(exc, worker=job.worker, input=failed.index, max_error=300)
        tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        return ("error", job.worker, failed.index, failed.item_repr, failed.what, _picklable(exc), tb)
    except (SystemExit, KeyboardInterrupt):
        raise
    except BaseException as exc:  # noqa: BLE001 - anything else is reported, never swallowed
        tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        return ("error", job.worker, None, "", "worker", _picklable(exc), tb)


def run_worker(job: WorkerJob, results: Any, progress: Any) -> None:
    """Process entry point: run the job, report ``done`` or ``error`` on ``results``."""
    set_environ(job)
    ev.configure_from_env()  # a spawned worker's bootstrap: trace as the parent does (once per process)
    # The main process stops workers with SIGTERM; exit through SystemExit so that finalizers run (trace
    # events buffered in this process are flushed, open spans closed) instead of dying mid-buffer.
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    _term_with_parent()
    try:
        msg = execute(job, progress)
    except SystemExit:
        results.cancel_join_thread()  # stopped by the main process: it no longer reads the queue
        raise
    results.put(msg)


def _exit_on_sigterm(signum: int, frame: Any) -> None:
    raise SystemExit(128 + signum)


def _picklable(exc: BaseException) -> bytes | None:
    """The pickled exception, if it survives a round trip (else the main process gets the text only)."""
    try:
        blob = pickle.dumps(exc)
        pickle.loads(blob)
    except Exception:
        return None
    return blob


def _term_with_parent() -> None:
    """Linux: get SIGTERM when the main process dies, even in the middle of a long ``fn`` call."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        pr_set_pdeathsig = 1
        libc.prctl(pr_set_pdeathsig, int(signal.SIGTERM), 0, 0, 0)
    except Exception:  # best effort; _exit_if_orphaned still checks between inputs
        return


def _exit_if_orphaned(job: WorkerJob) -> None:
    # The main process died (SIGKILL, OOM killer): nobody will merge our chunks. Stop now, so a rerun with
    # use_checkpoint=True does not race with us.
    if job.in_child and os.getppid() != job.parent_pid:
        os._exit(3)


class _InputFailed(Exception):
    def __init__(self, index: int, item: Any, what: str) -> None:
        super().__init__(index)
        self.index = index
        self.item_repr = short_repr(item)
        self.what = what


def _samples(result: Any) -> Any:
    if inspect.isgenerator(result):
        return result
    return (result,)


def _run_optimize(job: WorkerJob, progress: Any) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    store = open_output(job.output_dir, job.storage_options)
    rs = job.resume
    rank = job.worker
    chunks = list(rs.chunks)
    if rs.finished:
        progress[job.slot] = len(job.inputs)
        return chunks, rs.config
    writer = ChunkWriter(
        job.staging_dir, rank=rank, chunk_index=rs.next_chunk_index, state=rs.writer_state, **job.writer_kwargs
    )
    next_chunk = rs.next_chunk_index
    sample_index = sum(int(c["chunk_size"]) for c in chunks)  # rank-local index of the next sample
    # (input position, 0-based sample number within that input) of every sample not yet in a closed chunk
    origins: deque[tuple[int, int]] = deque()
    trace_sample = ev.ACTIVE  # held reference; membership tests below are the only cost when tracing is off

    def config_now() -> dict[str, Any] | None:
        # a resumed writer that has not seen a sample yet has no config: the checkpoint's is the same one
        return writer.config if writer.config is not None else rs.config

    def on_closed(entries: list[dict[str, Any]], pos: int, emitted: int) -> None:
        nonlocal next_chunk
        for entry in entries:
            name = entry["filename"]
            with kinds.upload(file=name, bytes=int(entry["chunk_bytes"]), rank=rank):
                publish(store, os.path.join(job.staging_dir, name), name)
            chunks.append(entry)
            next_chunk += 1
            for _ in range(int(entry["chunk_size"])):
                origins.popleft()
        if job.use_checkpoint:
            p, s = origins[0] if origins else (pos, emitted)
            _save_checkpoint(store, rank, chunks, config_now(), p, s, next_chunk, False, writer.state())

    progress[job.slot] = rs.inputs_done
    end = rs.inputs_done
    for pos, index, item in work_items(job, rs.inputs_done):
        raw = item
        end = pos + 1
        skip = rs.skip_samples if pos == rs.inputs_done else 0
        emitted = 0
        try:
            if job.reader is not None:
                with kinds.optimize_input(input=index):
                    item = job.reader.read(item)
            if "sample" in trace_sample:
                with kinds.optimize_fn(input=index):
                    result = job.fn(item)
            else:
                result = job.fn(item)
            for sample in _samples(result):
                if sample is None:
                    continue
                emitted += 1
                if emitted <= skip:
                    continue
                origins.append((pos, emitted - 1))
                if "sample" in trace_sample:
                    with kinds.serialize(input=index, sample=sample_index):
                        closed = writer.add_item(sample_index, sample)
                else:
                    closed = writer.add_item(sample_index, sample)
                sample_index += 1
                if closed:
                    for entry in closed:
                        kinds.chunk_written(
                            file=entry["filename"],
                            bytes=int(entry["chunk_bytes"]),
                            items=int(entry["chunk_size"]),
                        )
                    on_closed(closed, pos, emitted)
        except Exception as exc:
            raise _InputFailed(index, raw, "optimize") from exc
        progress[job.slot] = pos + 1
    with kinds.chunk_write(rank=rank, final=True):
        last = writer.done()
    on_closed(last, end, 0)
    if job.use_checkpoint:
        _save_checkpoint(store, rank, chunks, config_now(), end, 0, next_chunk, True, writer.state())
    return chunks, config_now()


def _save_checkpoint(
    store: Any,
    rank: int,
    chunks: list[dict[str, Any]],
    config: dict[str, Any] | None,
    inputs_done: int,
    skip_samples: int,
    next_chunk_index: int,
    finished: bool,
    writer_state: dict[str, Any] | None = None,
) -> None:
    rec = {
        "rank": rank,
        "chunks": chunks,
        "config": config,
        "inputs_done": inputs_done,
        "skip_samples": skip_samples,
        "next_chunk_index": next_chunk_index,
        "finished": finished,
        "writer_state": writer_state,
    }
    store.put(checkpoint_key(rank), json.dumps(rec, sort_keys=True).encode())


def _map_extra_params(fn: Callable[..., Any]) -> frozenset[str]:
    """Which of LitData's optional map() arguments (``device``, ``is_last``) ``fn`` names."""
    try:
        params = inspect.signature(fn).parameters  # a function, a partial, or an object's __call__
    except (TypeError, ValueError):  # a builtin without a signature: it takes neither
        return frozenset()
    return frozenset(params) & {"device", "is_last"}


def _map_device(job: WorkerJob) -> str | None:
    """``cuda:N`` for this worker (round robin over the GPUs, as LitData), None without CUDA."""
    try:
        import torch  # noqa: PLC0415
    except ImportError:  # pragma: no cover - torch is a dependency
        return None
    if not torch.cuda.is_available():
        return None
    return f"cuda:{job.worker % torch.cuda.device_count()}"


def _run_map(job: WorkerJob, progress: Any) -> None:
    store = open_output(job.output_dir, job.storage_options)
    tmp = os.path.join(job.staging_dir, f"map-{job.worker}")
    extra = _map_extra_params(job.fn)
    kwargs: dict[str, Any] = {"device": _map_device(job)} if "device" in extra else {}
    last = len(job.inputs) - 1 if job.source is None else -1  # from a shared queue, no input is known last
    for pos, index, item in work_items(job):
        if "is_last" in extra:
            kwargs["is_last"] = pos == last
        raw = item
        os.makedirs(tmp, exist_ok=True)
        try:
            if job.reader is not None:
                with kinds.optimize_input(input=index):
                    item = job.reader.read(item)
            with kinds.optimize_fn(input=index):
                ret = job.fn(item, tmp, **kwargs)
            if ret is not None:
                raise MapReturnError(
                    f"map() fn returned {short_repr(ret, 80)} for input {index}; it must write files into "
                    f"its output_dir argument and return None"
                )
            for dirpath, _dirs, files in os.walk(tmp):
                for name in sorted(files):
                    src = os.path.join(dirpath, name)
                    key = os.path.relpath(src, tmp).replace(os.sep, "/")
                    with kinds.upload(file=key, bytes=os.path.getsize(src)):
                        publish(store, src, key)
        except Exception as exc:
            raise _InputFailed(index, raw, "map") from exc
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        progress[job.slot] = pos + 1
