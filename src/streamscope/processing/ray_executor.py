"""optimize()/map() workers as Ray tasks: ``executor="ray"`` or ``executor=RayExecutor(address, ...)``.

Each worker of the job (a :class:`~streamscope.processing.worker.WorkerJob`: a contiguous range of the inputs,
a global worker rank) becomes one Ray task. The task runs the same worker body as a worker process, writes the
same chunks (``chunk-{rank}-{k}.bin``) straight to the output store and returns its chunk list; the driver merges
``index.json`` exactly as for worker processes, so the output is byte-identical to
``optimize(..., num_workers=N)`` on one machine with the same N.

* Joining a cluster: as ``ray.init()`` does. ``address`` (or ``RAY_ADDRESS``, or the cluster the last
  ``ray start`` on this machine recorded) is probed first: nothing listening there raises
  :class:`~streamscope._core.errors.ClusterUnreachableError` naming it within ``ray_connect_timeout`` seconds
  (``ray.init`` itself keeps retrying for minutes). No address anywhere: ``ray.init()`` starts a local Ray. A
  driver already connected (``ray.is_initialized()``) is used as it is; one connected here is disconnected at
  the end.
* Retries: a task whose process or node dies is rerun by Ray (``max_retries``, knob ``ray_max_retries``); the
  rerun rewrites the same chunk names with the same bytes (``fn`` must be deterministic), from its checkpoint
  record with ``use_checkpoint=True``. An exception in ``fn`` is reported, never retried.
* Progress: tasks report inputs finished to a small actor (at most every ``ray_progress_interval`` seconds);
  the driver shows them on the same tqdm bar as worker processes.
* Tracing: the driver's ``STREAMSCOPE_*`` / ``LITDATA_*`` variables (what ``enable_tracer`` sets) go to the tasks
  through ``runtime_env``, so a task traces as a worker process does (its node as the rank, its worker number as
  the worker) and writes its events before it returns. The log file is on the machine that runs the task.
* Where chunks are staged: a private temporary folder on the task's machine (inside a local ``output_dir`` when
  the task's machine sees it, so publishing is a rename). A local ``output_dir`` must be on storage every Ray
  node mounts at the same path; otherwise use an object store URL.

Not supported on Ray: ``queue=...`` and ``keep_data_ordered=False`` (their shared multiprocessing queue does not
cross machines).
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import socket
import tempfile
import time
from collections.abc import Mapping
from typing import Any

from streamscope import events as ev
from streamscope._core import config as cfg
from streamscope._core.errors import ClusterUnreachableError, ExecutorError, OptimizeInputError, WorkerDiedError
from streamscope._core.optional import require
from streamscope.events import context as ev_context
from streamscope.processing.runner import JobRun, Results, progress_bar, raise_worker_error
from streamscope.processing.worker import Resume, WorkerJob, checkpoint_key, execute, set_environ

__all__ = ["RayExecutor", "Results"]


#: Environment variables of the driver a task gets (tracer, metrics, knobs).
_FORWARDED_PREFIXES = ("STREAMSCOPE_", "LITDATA_")


def _ray() -> Any:
    return require("ray", "optimize(executor='ray') / map(executor='ray')", "ray")


def _host_port(address: str) -> tuple[str, int] | None:
    """``host:port`` (also ``ray://host:port``, ``[v6]:port``) split, or None when it is not of that form."""
    rest = address.split("://", 1)[1] if "://" in address else address
    rest = rest.split("/", 1)[0]
    host, sep, port = rest.rpartition(":")
    if not sep or not port.isdigit():
        return None
    return host.strip("[]") or "127.0.0.1", int(port)


class RayExecutor:
    """Run optimize()/map() workers as tasks on a Ray cluster.

    Args:
        address: the cluster, as ``ray.init(address=...)`` takes it: ``"host:port"`` (the GCS port of
            ``ray start --head``, 6379 by default), ``"ray://host:10001"`` (Ray Client), ``"auto"``, or None
            (``RAY_ADDRESS``, else the cluster the last ``ray start`` on this machine recorded, else a new local
            Ray).
        num_cpus: CPUs each worker task reserves (Ray's ``num_cpus``; fractions allowed).
        resources: other resources each task reserves, e.g. ``{"GPU": 1}`` or a custom ``{"prep": 1}``.
        max_retries: reruns of a task whose process or node died (None: knob ``ray_max_retries``).
        runtime_env: Ray runtime environment of the tasks (``pip``, ``working_dir``, ``env_vars``...); the driver's
            tracer variables are added to its ``env_vars``.
        init_kwargs: more keyword arguments of ``ray.init`` (used only when this executor connects).

    ``num_workers=None`` in optimize()/map() means one worker per ``num_cpus`` of the cluster's CPUs.
    """

    name = "ray"
    #: queue=... and keep_data_ordered=False hand inputs out through a multiprocessing queue: not across machines
    supports_queue = False

    def __init__(
        self,
        address: str | None = None,
        *,
        num_cpus: float = 1,
        resources: Mapping[str, float] | None = None,
        max_retries: int | None = None,
        runtime_env: Mapping[str, Any] | None = None,
        init_kwargs: Mapping[str, Any] | None = None,
    ) -> None:
        if not (isinstance(num_cpus, (int, float)) and num_cpus >= 0):
            raise OptimizeInputError(f"RayExecutor(num_cpus=...) must be a number >= 0, got {num_cpus!r}")
        if max_retries is not None and (not isinstance(max_retries, int) or max_retries < -1):
            raise OptimizeInputError(f"RayExecutor(max_retries=...) must be an int >= -1, got {max_retries!r}")
        self.address = address
        self.num_cpus = num_cpus
        self.resources = dict(resources or {})
        self.max_retries = max_retries
        self.runtime_env = dict(runtime_env or {})
        self.init_kwargs = dict(init_kwargs or {})
        self._connected_here = False

    def __repr__(self) -> str:
        return f"RayExecutor(address={self.address!r}, num_cpus={self.num_cpus!r}, resources={self.resources!r})"

    # --- the cluster --------------------------------------------------------------------------------

    def _target(self) -> tuple[str | None, str]:
        """The address to join and where it came from (for messages)."""
        if self.address:
            return self.address, "RayExecutor(address=...)"
        env = os.environ.get("RAY_ADDRESS", "").strip()
        if env:
            return env, "RAY_ADDRESS"
        return None, "ray.init()"

    def connect(self) -> Any:
        """Join the cluster (see the module doc); return the ``ray`` module.

        Raises:
            MissingDependencyError: ray is not installed (``pip install "streamscope[ray]"``).
            ClusterUnreachableError: nothing answers at the address, or ``ray.init`` failed to join it.
        """
        ray = _ray()
        if ray.is_initialized():
            return ray
        address, origin = self._target()
        probe = address
        if address is None or address == "auto" or "://" not in address:
            try:  # what ray.init() would join: RAY_ADDRESS, "auto", or the last `ray start` on this machine
                from ray._private.services import canonicalize_bootstrap_address  # noqa: PLC0415

                # Ray annotates addr as str, but documents and handles None (RAY_ADDRESS, then the last `ray start`)
                probe = canonicalize_bootstrap_address(address)  # type: ignore[arg-type]
                if address is None and probe is not None:
                    origin = "the last `ray start` on this machine (ray_current_cluster)"
            except Exception as exc:  # a private helper of Ray: its failure is the address's fault
                if address not in (None, "auto"):
                    raise ClusterUnreachableError(
                        f"Ray address {address!r} (from {origin}) is not usable: {exc}"
                    ) from exc
                if address == "auto":
                    raise ClusterUnreachableError(
                        f"no running Ray cluster found for address 'auto' (from {origin}): {exc}; start one with "
                        f"`ray start --head` or give its address"
                    ) from exc
                probe = None
        timeout = float(cfg.get("ray_connect_timeout"))
        if probe:
            self._probe(probe, origin, timeout, address)
        kwargs: dict[str, Any] = {"address": address, "ignore_reinit_error": True, **self.init_kwargs}
        if address is None and probe is None:
            kwargs["address"] = None  # a new local Ray, as ray.init() starts
        try:
            ray.init(**kwargs)
        except Exception as exc:
            raise ClusterUnreachableError(
                f"cannot join the Ray cluster at {probe or address!r} (from {origin}): {type(exc).__name__}: {exc}"
            ) from exc
        self._connected_here = True
        return ray

    @staticmethod
    def _probe(address: str, origin: str, timeout: float, given: str | None = None) -> None:
        hp = _host_port(address)
        if hp is None:
            raise ClusterUnreachableError(f"Ray address {address!r} (from {origin}) is not host:port")
        host, port = hp
        deadline = time.monotonic() + timeout
        last: Exception | None = None
        while True:
            try:
                with socket.create_connection((host, port), timeout=max(0.1, min(2.0, deadline - time.monotonic()))):
                    return
            except OSError as exc:
                last = exc
            if time.monotonic() >= deadline:
                break
            time.sleep(0.25)
        named = address if given in (None, address) else f"{given} ({address})"
        raise ClusterUnreachableError(
            f"no Ray cluster answers at {named} (from {origin}) after {timeout:g} s: {last}. Start one there "
            f"(`ray start --head --port {port}`) or pass the right address"
        )

    def start(self) -> None:
        self.connect()

    def close(self) -> None:
        self.disconnect()

    def disconnect(self) -> None:
        """Leave the cluster if this executor joined it (a driver connected by the user stays connected)."""
        if self._connected_here:
            self._connected_here = False
            ray = _ray()
            ray.shutdown()

    def default_workers(self) -> int:
        ray = self.connect()
        cpus = float(ray.cluster_resources().get("CPU", 1.0))
        per = float(self.num_cpus) or 1.0
        return max(1, int(cpus // per))

    # --- running a job ------------------------------------------------------------------------------

    def _runtime_env(self) -> dict[str, Any] | None:
        env = dict(self.runtime_env)
        forwarded = {k: v for k, v in os.environ.items() if k.startswith(_FORWARDED_PREFIXES)}
        if forwarded:
            env["env_vars"] = {**forwarded, **dict(env.get("env_vars") or {})}
        return env or None

    def run(self, run: JobRun) -> Results:
        """Run one Ray task per job (see the module doc); ``start_method`` does not apply."""
        if run.shared_items is not None or any(job.source is not None for job in run.jobs):
            raise OptimizeInputError(
                "executor='ray' needs each worker's inputs fixed up front: queue=... and keep_data_ordered=False "
                "are not supported on Ray"
            )
        return self._run(self.connect(), run.jobs, run.total_inputs, run.verbose, run.desc)

    def _run(self, ray: Any, jobs: list[WorkerJob], total_inputs: int | None, verbose: bool, desc: str) -> Results:
        retries = int(cfg.get("ray_max_retries")) if self.max_retries is None else self.max_retries
        interval = float(cfg.get("ray_progress_interval"))
        poll = float(cfg.get("optimize_poll_interval"))
        bar = progress_bar(total_inputs, desc, verbose)
        try:
            return self._run_tasks(ray, jobs, total_inputs, bar, retries, interval, poll)
        finally:
            if bar is not None:
                bar.close()

    def _run_tasks(
        self,
        ray: Any,
        jobs: list[WorkerJob],
        total_inputs: int | None,
        bar: Any,
        retries: int,
        interval: float,
        poll: float,
    ) -> Results:
        # the progress actor exists only for a bar to show (starting it costs a Ray worker process)
        tracker = ray.remote(num_cpus=0)(_Progress).remote(len(jobs)) if bar is not None else None
        options: dict[str, Any] = {
            "num_cpus": self.num_cpus,
            "max_retries": retries,
            "retry_exceptions": False,
        }
        if self.resources:
            options["resources"] = self.resources
        renv = self._runtime_env()
        if renv:
            options["runtime_env"] = renv
        task = ray.remote(_run_task)
        refs: dict[Any, WorkerJob] = {}
        for job in jobs:
            job = dataclasses.replace(job, in_child=False)
            ref = task.options(**options, name=f"streamscope-{job.kind}-{job.worker}").remote(job, tracker, interval)
            refs[ref] = job
        out: Results = {}
        shown = 0
        asked: Any = None
        last_ask = 0.0
        pending = list(refs)
        try:
            while pending:
                ready, pending = ray.wait(pending, num_returns=len(pending), timeout=poll)
                for ref in ready:
                    job = refs[ref]
                    try:
                        msg = ray.get(ref)
                    except Exception as exc:
                        raise self._died(ray, exc, job, retries) from exc
                    if msg[0] == "done":
                        out[msg[1]] = (msg[2], msg[3])
                    else:
                        raise_worker_error(msg)
                if bar is not None:
                    assert tracker is not None  # created whenever the bar is
                    if asked is None:
                        if time.monotonic() - last_ask >= interval:
                            asked, last_ask = tracker.counts.remote(), time.monotonic()
                    elif ray.wait([asked], timeout=0)[0]:
                        done_inputs = sum(ray.get(asked))
                        if done_inputs > shown:
                            bar.update(done_inputs - shown)
                            shown = done_inputs
                        asked = None
            if bar is not None and total_inputs is not None and shown < total_inputs:
                bar.update(total_inputs - shown)  # the last reports may still be on their way
            return out
        finally:
            for ref in pending:
                try:
                    ray.cancel(ref, force=True)
                except Exception:
                    pass
            if pending:  # a cancelled task may still be publishing a chunk: the caller's cleanup must come after
                try:
                    ray.wait(pending, num_returns=len(pending), timeout=float(cfg.get("optimize_exit_grace")))
                except Exception:
                    pass
            if tracker is not None:
                try:
                    ray.kill(tracker)
                except Exception:
                    pass

    @staticmethod
    def _died(ray: Any, exc: Exception, job: WorkerJob, retries: int) -> Exception:
        what = type(exc).__name__
        lost = (ray.exceptions.WorkerCrashedError, ray.exceptions.NodeDiedError)
        if isinstance(exc, lost) or "died" in str(exc).lower():
            return WorkerDiedError(
                f"optimize worker {job.worker} (Ray task, inputs [{job.offset}, {job.offset + len(job.inputs)})) "
                f"died {retries + 1} time(s) and was not retried again ({what}): {str(exc)[:500]}"
            )
        return ExecutorError(f"Ray could not run optimize worker {job.worker}: {what}: {str(exc)[:800]}")


class _Progress:
    """Ray actor: inputs finished per worker slot."""

    def __init__(self, n: int) -> None:
        self._counts = [0] * n

    def set(self, slot: int, value: int) -> None:
        self._counts[slot] = value

    def counts(self) -> list[int]:
        return list(self._counts)


class _Reporter:
    """``progress[slot] = n`` inside a task: forwarded to the actor at most every ``interval`` seconds."""

    def __init__(self, tracker: Any, interval: float) -> None:
        self._tracker = tracker
        self._interval = interval
        self._last = 0.0
        self._pending: tuple[int, int] | None = None

    def __setitem__(self, slot: int, value: int) -> None:
        if self._tracker is None:  # no bar shown
            return
        self._pending = (slot, int(value))
        now = time.monotonic()
        if now - self._last >= self._interval:
            self.flush()
            self._last = now

    def flush(self) -> None:
        if self._pending is not None:
            self._tracker.set.remote(*self._pending)
            self._pending = None


def _resume_from_store(job: WorkerJob) -> WorkerJob:
    """A rerun task (``use_checkpoint=True``) starts from the latest checkpoint record, not the driver's copy."""
    if not job.use_checkpoint or job.kind != "optimize":
        return job
    import json  # noqa: PLC0415

    from streamscope.processing._store import open_output  # noqa: PLC0415

    store = open_output(job.output_dir, job.storage_options)
    try:
        rec = json.loads(store.get(checkpoint_key(job.worker)))
    except FileNotFoundError:
        return job
    return dataclasses.replace(job, resume=Resume.from_record(rec))


def _staging_for(job: WorkerJob) -> str:
    """A private folder in the driver's staging folder when this machine sees it (inside a local output_dir:
    publishing is then a rename), else in this machine's temp folder."""
    if os.path.isdir(job.staging_dir):
        try:
            return tempfile.mkdtemp(prefix=f"ray-{job.worker}-", dir=job.staging_dir)
        except OSError:
            pass
    return tempfile.mkdtemp(prefix=f"streamscope-ray-{job.worker}-")


def _run_task(job: WorkerJob, tracker: Any, interval: float) -> tuple[Any, ...]:
    """Body of one worker task (runs in a Ray worker process, which Ray may reuse for other tasks)."""
    set_environ(job)
    ev.configure_from_env()
    staging = _staging_for(job)
    reporter = _Reporter(tracker, interval)
    try:
        job = dataclasses.replace(_resume_from_store(job), staging_dir=staging)
        return execute(job, reporter)
    finally:
        reporter.flush()
        try:
            ev.flush()
        except Exception:
            pass
        ev_context.pin(None)
        shutil.rmtree(staging, ignore_errors=True)
