"""Where the workers of optimize()/map() run: ``executor=`` chooses.

* ``"process"`` (the default, knob ``optimize_executor``): one process per worker on this machine
  (:func:`~streamscope.processing.runner.run_jobs`).
* ``"ray"`` or a :class:`~streamscope.processing.ray_executor.RayExecutor` (address, resources): one Ray task per
  worker on a Ray cluster. Needs the ``ray`` extra.
* Any object with the :class:`Executor` methods.

Every executor runs the same :class:`~streamscope.processing.runner.JobRun` (its
:class:`~streamscope.processing.worker.WorkerJob` list) and returns the same
``{worker: (chunks, config)}``: the job's split, chunk names and merge do not depend on where workers ran, so
neither does the output.
"""

from __future__ import annotations

import os
from typing import Any, Protocol, runtime_checkable

from streamscope._core import config as cfg
from streamscope._core.errors import OptimizeInputError
from streamscope.processing.runner import JobRun, Results, run_jobs

__all__ = ["Executor", "JobRun", "ProcessExecutor", "Results", "resolve_executor"]


@runtime_checkable
class Executor(Protocol):
    """Runs a job's workers and collects their reports."""

    name: str

    def start(self) -> None:
        """Get ready (join a cluster); called before the job touches ``output_dir``. Raises when it cannot."""
        ...

    def close(self) -> None:
        """Release what :meth:`start` took (called once the job ended, whatever the outcome)."""
        ...

    def default_workers(self) -> int:
        """Workers to start when ``num_workers`` is None."""
        ...

    def run(self, run: JobRun) -> Results:
        """Run every job of ``run``; return ``{job.worker: (chunks, config)}`` once all reported ``done``.

        Raises:
            WorkerFailedError: ``fn`` raised (the first report of an error stops the job).
            WorkerDiedError: a worker ended without reporting and was not (or no longer) retried.
        """
        ...


class ProcessExecutor:
    """One worker process per job on this machine (fork or spawn)."""

    name = "process"

    def start(self) -> None:
        return None

    def close(self) -> None:
        return None

    def default_workers(self) -> int:
        return os.cpu_count() or 1

    def run(self, run: JobRun) -> Results:
        return run_jobs(run)

    def __repr__(self) -> str:
        return "ProcessExecutor()"


def resolve_executor(executor: Any) -> Executor:
    """The executor for optimize()/map()'s ``executor`` argument (None: knob ``optimize_executor``).

    Raises:
        OptimizeInputError: an unknown name or an object without the executor methods.
        MissingDependencyError: ``"ray"`` without the ``ray`` extra.
    """
    if executor is None:
        executor = str(cfg.get("optimize_executor")).strip().lower()
    if isinstance(executor, str):
        name = executor.strip().lower()
        if name == "process":
            return ProcessExecutor()
        if name == "ray":
            from streamscope.processing.ray_executor import RayExecutor  # noqa: PLC0415 - optional extra

            return RayExecutor()
        raise OptimizeInputError(
            f"executor must be one of {', '.join(cfg.EXECUTOR_CHOICES)} or an executor object, got {executor!r}"
        )
    if all(callable(getattr(executor, m, None)) for m in ("run", "default_workers", "start", "close")):
        return executor  # type: ignore[no-any-return]
    raise OptimizeInputError(
        f"executor must be 'process', 'ray' or an object with start(), close(), default_workers() and run() "
        f"(e.g. RayExecutor(...)), "
        f"got {type(executor).__name__}"
    )
