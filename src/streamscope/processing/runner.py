"""The main process of an optimize()/map() job: start workers, watch them, feed the progress bar.

Workers are real processes. The main loop polls the result queue, every worker's exit code and the shared
progress counters. A worker that reports an error stops the job: the others are terminated and
:class:`WorkerFailedError` names the failing input, chaining the original exception (its remote traceback is in
the message). A worker that ends without reporting (SIGKILL, segfault, ``os._exit``) raises
:class:`WorkerDiedError`. The job never hangs waiting for a dead worker.
"""

from __future__ import annotations

import multiprocessing as mp
import pickle
import queue as queue_mod
import sys
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from streamscope._core import config
from streamscope._core.errors import MapReturnError, OptimizeInputError, WorkerDiedError, WorkerFailedError
from streamscope.processing.sentinel import ALL_DONE
from streamscope.processing.worker import WorkerJob, run_worker

if TYPE_CHECKING:
    from multiprocessing.context import DefaultContext, ForkContext, ForkServerContext, SpawnContext

__all__ = ["JobRun", "Results", "default_start_method", "progress_bar", "raise_worker_error", "run_jobs"]


def default_start_method() -> str:
    """fork on Linux unless CUDA is already initialised in this process (then spawn), else the platform's."""
    if sys.platform.startswith("linux"):
        torch = sys.modules.get("torch")
        try:
            if torch is not None and torch.cuda.is_initialized():
                return "spawn"
        except Exception:
            return "spawn"
        return "fork"
    return mp.get_start_method(allow_none=False)


#: ``{worker: (chunks, config)}``: what every executor returns once all workers reported ``done``.
Results = dict[int, tuple[list[dict[str, Any]], "dict[str, Any] | None"]]


@dataclass
class JobRun:
    """One node's share of an optimize()/map() job, as every executor's ``run`` takes it.

    ``shared_items``: instead of each job's own ``inputs``, every worker takes ``(index, item)`` pairs from one
    queue filled after the workers started (``keep_data_ordered=False``); ``shared_offset`` is the global index
    of ``shared_items[0]`` (a node of a multi-node job shares its part of the inputs). ``total_inputs`` None:
    unknown (queue input), the progress bar counts without a total. ``start_method`` applies to local processes
    only.
    """

    jobs: list[WorkerJob]
    total_inputs: int | None
    desc: str  # the progress bar's label: "optimize" or "map"
    verbose: bool = True
    start_method: str | None = None
    shared_items: list[Any] | None = None
    shared_offset: int = 0


def run_jobs(run: JobRun) -> Results:
    """Run one process per job; return ``{worker: (chunks, config)}`` once all have reported ``done``."""
    jobs, shared_items, shared_offset = run.jobs, run.shared_items, run.shared_offset
    # typeshed types get_context(str) as BaseContext, which has no Process; every context it returns has one
    ctx = cast(
        "DefaultContext | SpawnContext | ForkContext | ForkServerContext",
        mp.get_context(run.start_method or default_start_method()),
    )
    results = ctx.Queue()
    shared = None
    if shared_items is not None:
        shared = ctx.Queue()
        for job in jobs:
            job.source = shared
            job.source_indexed = True
    progress = ctx.Array("q", len(jobs), lock=False)
    by_worker = {job.worker: job for job in jobs}
    procs: dict[int, Any] = {}
    out: Results = {}
    bar = None
    poll = float(config.get("optimize_poll_interval"))
    grace = float(config.get("optimize_exit_grace"))
    exited_at: dict[int, float] = {}
    try:
        for job in jobs:
            p = ctx.Process(target=run_worker, args=(job, results, progress), name=f"streamscope-optimize-{job.worker}")
            p.daemon = True
            try:
                p.start()
            except (pickle.PicklingError, AttributeError, TypeError) as exc:
                raise OptimizeInputError(
                    f"cannot send the job to a {ctx.get_start_method()!r} worker: {exc}. With spawn/forkserver, fn, "
                    f"inputs and reader must be picklable (fn defined at module level, not a lambda or closure)"
                ) from exc
            procs[job.worker] = p
        if shared is not None:
            for i, item in enumerate(shared_items or ()):
                shared.put((shared_offset + i, item))
            shared.put(ALL_DONE)
        # after forking: its monitor thread is not inherited
        bar = progress_bar(run.total_inputs, run.desc, run.verbose)
        shown = 0
        while len(out) < len(jobs):
            try:
                msg = results.get(timeout=poll)
            except queue_mod.Empty:
                msg = None
            if msg is not None:
                if msg[0] == "done":
                    out[msg[1]] = (msg[2], msg[3])
                else:
                    procs[msg[1]].join(timeout=grace)  # it exits by itself right after reporting (events flushed)
                    raise_worker_error(msg)
            done_inputs = sum(progress)
            if bar is not None and done_inputs > shown:
                bar.update(done_inputs - shown)
                shown = done_inputs
            now = time.monotonic()
            for w, p in procs.items():
                if w in out or p.exitcode is None:
                    continue
                # exited without a message yet: its last message may still be in the pipe; allow a grace period
                first = exited_at.setdefault(w, now)
                if now - first > grace or (p.exitcode != 0 and now - first > min(grace, 1.0)):
                    code = p.exitcode
                    how = f"was killed by signal {-code}" if code < 0 else f"exited with code {code}"
                    job = by_worker[w]
                    raise WorkerDiedError(
                        f"optimize worker {w} (pid {p.pid}) {how} without reporting; it was processing inputs "
                        f"[{job.offset}, {job.offset + len(job.inputs)}), {progress[job.slot]} of them finished"
                    )
        for p in procs.values():
            p.join(timeout=grace)
        return out
    finally:
        for p in procs.values():
            if p.is_alive():
                p.terminate()
        for p in procs.values():
            p.join(timeout=2.0)
            if p.is_alive():
                p.kill()
                p.join(timeout=2.0)
        results.close()
        results.join_thread()
        if shared is not None:
            shared.cancel_join_thread()  # the ALL_DONE sentinel the last worker put back stays unread
            shared.close()
        if bar is not None:
            bar.close()


def raise_worker_error(msg: tuple[Any, ...]) -> None:
    _, worker, index, item_repr, what, blob, tb = msg
    cause: BaseException | None = None
    if blob is not None:
        try:
            cause = pickle.loads(blob)
        except Exception:
            cause = None
    if isinstance(cause, MapReturnError):
        raise cause
    if index is None:
        head = "optimize()/map() worker failed outside of any input"
    else:
        head = f"{'map' if what == 'map' else 'optimize'}() failed on input {index}"
        if item_repr:
            head += f" ({item_repr})"
    text = (  # LitData's words lead ("We found the following error ...")
        f"We found the following error: {head} in worker {worker}: "
        f"{type(cause).__name__ + ': ' + str(cause) if cause else ''}\n\nWorker traceback:\n{tb}"
    )
    err = WorkerFailedError(text)
    err.input_index = index  # type: ignore[attr-defined]
    err.worker = worker  # type: ignore[attr-defined]
    raise err from cause


def progress_bar(total: int | None, desc: str, verbose: bool) -> Any:
    if not verbose:
        return None
    try:
        from tqdm.auto import tqdm
    except ImportError:  # pragma: no cover
        return None
    return tqdm(total=total, desc=desc, smoothing=0.1, dynamic_ncols=True)
