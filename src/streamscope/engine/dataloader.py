"""StreamingDataLoader: LitData's loader arguments, whole batches built in workers, exact mid-epoch resume.

Workers build whole batches (collated in the worker: column-wise from the mmap when ``collate_fn`` is None) and
tag each with its batch number. The loader is a ``torch.utils.data.DataLoader`` with ``batch_size=None`` over
the dataset in batch mode; its iterator strips the tag, checks that batches arrive in order and counts them for
:meth:`StreamingDataLoader.state_dict`. What is recorded of it (the ``epoch`` span, ``stall``: the time the
training loop waited in ``next``, ``batch``: the time it spent on a batch, trace parcels, the wait split, the
loader's metrics) is its observer's (:mod:`streamscope.engine.observer`).

Resume state = (epoch, batches handed to the loop) plus what defines the order (checked on load). It does not
depend on ``num_workers``: a state saved with 2 workers resumes exactly with 0 or 3.
"""

from __future__ import annotations

import atexit
import cProfile
import multiprocessing
import os
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import numpy.random  # noqa: F401  torch seeds numpy in every worker: import it once here, before the fork
from torch.utils.data import DataLoader

from streamscope import events as ev
from streamscope._core import config, hooks
from streamscope._core.board import BoardGroup, KnobBoard
from streamscope._core.errors import DatasetError, NotAStreamingDatasetError, StateDictError
from streamscope.engine import cprofile
from streamscope.engine.batch_mode import BatchMode
from streamscope.engine.batching import ArenaFlags, Reorder
from streamscope.engine.collate_fn import litdata_collate
from streamscope.engine.dataset import StreamingDataset
from streamscope.engine.mapped import MappedBatches, fetches_batches
from streamscope.engine.observer import Iteration, observer_for

__all__ = ["StreamingDataLoader", "join_worker_shutdowns", "pending_worker_shutdowns"]


#: What the loader calls on its dataset (StreamingDataset and CombinedStreamingDataset provide it).
_PROTOCOL = (
    "plan",
    "iter_batches",
    "state_dict",
    "resume_position",
    "set_batch_size",
    "set_num_workers",
    "set_batch_mode",
)


#: Background joins of finished epochs' workers (see ``_run``); :func:`join_worker_shutdowns` waits for them.
_SHUTDOWNS: list[threading.Thread] = []


def join_worker_shutdowns(timeout: float = 10.0) -> bool:
    """Wait (at most ``timeout`` seconds) until the workers of every finished epoch have exited.

    A complete epoch returns to the training loop without waiting for its DataLoader workers to exit; they
    exit, and write their last trace events, in the background. Tracing (``flush_tracer``) and interpreter exit
    call this. Returns True when none is left running.
    """
    deadline = time.monotonic() + timeout
    while _SHUTDOWNS:
        t = _SHUTDOWNS[0]
        t.join(max(0.0, deadline - time.monotonic()))
        if t.is_alive():
            return False
        _SHUTDOWNS.pop(0)
    return True


atexit.register(join_worker_shutdowns)


def pending_worker_shutdowns() -> int:
    """How many finished epochs' worker shutdowns run in the background."""
    return len(_SHUTDOWNS)


def _tell_workers_to_stop(it: Any) -> None:
    """The first step of torch's ``_shutdown_workers``, done at once: the done event set and a stop (None) sent
    to each worker still active, so they exit while this process goes on; ``_shutdown_workers`` then skips them
    and joins. Uses torch's private iterator state; nothing is done when it is missing or a pin-memory thread
    runs (torch stops that thread first)."""
    done_event = getattr(it, "_workers_done_event", None)
    mark = getattr(it, "_mark_worker_as_unavailable", None)
    status = getattr(it, "_workers_status", None)
    if done_event is None or mark is None or status is None or hasattr(it, "_pin_memory_thread"):
        return
    try:
        done_event.set()
        for w, active in enumerate(list(status)):
            if active:
                mark(w, shutdown=True)
    except Exception:  # left to _shutdown_workers
        pass


def _finish_workers(
    shutdown: Callable[[], None], settle: Callable[[list[int | None]], None] | None, pids: list[int | None]
) -> None:
    """Let a complete epoch's workers exit, then settle what they left (the observer's ``end``)."""
    shutdown()
    if settle is not None:
        settle(pids)


def _identity(item: Any) -> Any:
    return item


class StreamingDataLoader(DataLoader[Any]):
    """A DataLoader for :class:`StreamingDataset` with exact, worker-count-independent resume.

    Args:
        dataset: a StreamingDataset or CombinedStreamingDataset (anything with the loader protocol), or a
            StreamingRawDataset (driven through ``engine.mapped.MappedBatches``: ``shuffle``, exact resume and
            the tuner work the same; ``loader.dataset.dataset`` is the raw dataset).
        batch_size: samples per batch (the dataset's epoch plan cuts batches with it).
        num_workers: DataLoader worker processes.
        profile_batches, profile_skip_batches: accepted for compatibility; use streamscope tracing.
        profile_dir: where ``profile_cprofile`` writes (default: the working directory).
        profile_cprofile: write cProfile stats of the main process and of worker 0 (``stream.cprofile``).
        prefetch_factor: batches each worker keeps ready (default 2 with workers).
        shuffle, drop_last: forwarded to the dataset (never to torch, like LitData).
        collate_fn: receives the list of samples of a batch; None (LitData 0.2.76: ``litdata_collate``) =
            default_collate (computed column-wise).
        autotune: tune this loader (see ``src/streamscope/tune/README.md``): from its first epoch a thread of this
            process moves the live knobs nobody pinned (prefetch depth, download concurrency, cache budget) and,
            between epochs, ``num_workers`` (given here: where it starts), to cut the loop's wait for data within
            the RAM and cache budgets; every decision is a ``tune`` event. None (the default): the ``autotune`` knob
            (``STREAMSCOPE_AUTOTUNE``), off unless set. Sample order and resume are the same either way.
        **kwargs: other ``torch.utils.data.DataLoader`` arguments (pin_memory, multiprocessing_context, ...).
    """

    #: an int, or per-dataset sizes for a CombinedStreamingDataset (DataLoader's own is None: batches come whole)
    batch_size: Any

    def __init__(
        self,
        dataset: StreamingDataset,
        *args: Any,
        batch_size: int = 1,
        num_workers: int = 0,
        profile_batches: bool | int = False,
        profile_skip_batches: int = 0,
        profile_dir: str | None = None,
        profile_cprofile: bool = False,
        prefetch_factor: int | None = None,
        shuffle: bool | None = None,
        drop_last: bool | None = None,
        collate_fn: Callable[[list[Any]], Any] | None = None,
        autotune: bool | None = None,
        **kwargs: Any,
    ) -> None:
        ev.configure_from_env()  # an entry point: tracing switched on by the environment starts here (once)
        hooks.first_use()  # what the environment switches on with no call (STREAMSCOPE_PROMETHEUS_PORT), once
        if not isinstance(dataset, StreamingDataset) and not all(hasattr(dataset, a) for a in _PROTOCOL):
            if not fetches_batches(dataset):
                raise NotAStreamingDatasetError(
                    f"StreamingDataLoader needs a StreamingDataset (or a dataset with {', '.join(_PROTOCOL)}, such "
                    f"as CombinedStreamingDataset, or a StreamingRawDataset), got {type(dataset).__name__}; use "
                    "torch's DataLoader for other datasets"
                )
            dataset = MappedBatches(dataset)  # e.g. StreamingRawDataset (engine.mapped)
        if args:
            raise DatasetError("StreamingDataLoader takes only keyword arguments after the dataset")
        if (
            kwargs.get("persistent_workers")
            and num_workers > 0
            and not getattr(dataset, "follows_shared_position", False)
        ):
            raise DatasetError(
                f"persistent_workers=True needs a dataset whose workers read the epoch from the loader's shared "
                f"position (batch mode 'position'); {type(dataset).__name__} does not"
            )
        for key in ("sampler", "batch_sampler"):
            if kwargs.get(key) is not None:
                raise DatasetError(f"StreamingDataLoader does not take {key}: the dataset's epoch plan orders samples")
        if profile_batches and profile_cprofile:
            raise ValueError(
                "profile_batches (viztracer) and profile_cprofile both install a profiler; enable one of them"
            )
        if profile_batches and num_workers == 0:
            raise ValueError("profile_batches needs num_workers >= 1 (as in LitData); use streamscope tracing instead")
        if profile_batches:
            warnings.warn(
                "profile_batches is ignored by streamscope; enable tracing (STREAMSCOPE_TRACE_LEVEL) instead",
                stacklevel=2,
            )
        if shuffle is not None:
            dataset.set_shuffle(shuffle)
        if drop_last is not None:
            dataset.set_drop_last(drop_last)
        dataset.set_batch_size(batch_size)
        dataset.set_num_workers(num_workers)
        if num_workers > 0 and prefetch_factor is None:
            prefetch_factor = 2
        if profile_cprofile and num_workers > 0:
            kwargs["worker_init_fn"] = cprofile.WorkerInit(
                cprofile.output_dir(profile_dir), kwargs.get("worker_init_fn")
            )
        dataset.plan(dataset.current_epoch, batch_size)  # a rank without data fails here, at construction
        # (epoch, start batch) of the next iteration, in shared memory so that persistent workers see each new
        # epoch: the main process writes it before torch tells the workers to start iterating again.
        self._position = multiprocessing.RawArray("q", 2)
        self._position[0], self._position[1] = dataset.current_epoch, 0
        # Busy flags of the workers' reusable batch arenas (stream.batching); persistent workers keep theirs.
        self._arenas = ArenaFlags(num_workers) if num_workers > 0 else None
        super().__init__(
            dataset,
            batch_size=None,
            num_workers=num_workers,
            prefetch_factor=prefetch_factor,
            collate_fn=_identity,
            **kwargs,
        )
        object.__setattr__(self, "batch_size", batch_size)
        # None means litdata_collate in LitData 0.2.76: default_collate for all but graph samples (which streamscope
        # does not write). Both take the column-wise path, which returns what default_collate does.
        self.user_collate_fn = None if collate_fn is litdata_collate else collate_fn
        self.current_epoch = 0
        self.num_samples_yielded = 0
        self.batches_consumed = 0
        self._epoch_batches = 0
        self._pending: tuple[int, int] | None = None
        self._latest_worker_idx = 0
        # the running iteration: (batches and samples at its start, its reorder, torch's iterator), else None
        self._live: tuple[int, int, Reorder, Any] | None = None
        # what the runtime records of this loader (parcels, the wait split, events, metrics: engine.observer)
        self._observer = observer_for(self)
        #: LitData's flag: True after load_state_dict() of a state saved inside an epoch, until an epoch completes.
        self.restore = False
        self.profile_batches = profile_batches
        self.profile_skip_batches = profile_skip_batches
        self.profile_dir = profile_dir
        self.profile_cprofile = profile_cprofile
        tune = config.get("autotune") if autotune is None else autotune
        if not isinstance(tune, bool):
            raise DatasetError(f"autotune must be True, False or None, got {autotune!r}")
        # the auto-tuner (a lower layer's hook that api fills: stream may not import tune); nothing runs until the
        # first epoch, and without autotune nothing of it is imported
        self._tuner: hooks.LoaderTuner | None = hooks.get("autotuner")(self) if tune else None

    # --- iteration ---------------------------------------------------------------------------------

    def __iter__(self) -> Iterator[Any]:  # type: ignore[override]
        if self._tuner is not None:
            self._tuner.before_epoch()  # may change num_workers; the first epoch checks the tuner's budgets
        watch = self._observer.begin(
            self.num_workers,
            self.persistent_workers,
            self.persistent_workers and getattr(self, "_iterator", None) is not None,
            self.multiprocessing_context,
            self._tuner is not None,
        )
        ds: StreamingDataset = self.dataset  # type: ignore[assignment]
        knobs = self.knobs
        if knobs is not None:
            knobs.activate()  # the knob values the metrics report are this loader's
        if self._pending is not None:
            epoch, start = self._pending
            self._pending = None
        else:
            epoch, start = self.current_epoch + 1, 0
        self.current_epoch = epoch
        ds.current_epoch = epoch
        ds._pending = None
        plan = ds.plan(epoch, self.batch_size)
        if start == 0:
            self.num_samples_yielded = 0
        self.batches_consumed = start
        self._epoch_batches = plan.num_batches
        self._position[0], self._position[1] = epoch, start
        arenas = self._arenas
        if arenas is not None and not self.persistent_workers:
            arenas = ArenaFlags(self.num_workers)  # this iteration's fresh workers (an older iterator keeps its own)
        ds.set_batch_mode(
            BatchMode(
                epoch=epoch,
                start=start,
                batch_size=self.batch_size,
                collate_fn=self.user_collate_fn,
                position=self._position,
                arena_flags=arenas.flags if arenas is not None else None,
                ticket=watch.ticket,
            )
        )
        try:
            # iter(dataset) runs here (in this process, or in the workers it starts); the epoch begins as they
            # are told (the observer's epoch span: persistent workers start on their share at once)
            it = watch.start_workers(super().__iter__)
        finally:
            # batch mode is the loader's own: the dataset iterated directly still yields plain samples
            ds.set_batch_mode(None)
        if self.profile_cprofile:
            # started once the workers exist, so that a forked worker does not inherit a running profiler
            return self._profiled(self._run(it, plan, epoch, arenas, watch))
        return self._run(it, plan, epoch, arenas, watch)

    def _profiled(self, batches: Iterator[Any]) -> Iterator[Any]:
        profiler = cProfile.Profile()
        profiler.enable()
        try:
            yield from batches
        finally:
            cprofile.dump(profiler, os.path.join(cprofile.output_dir(self.profile_dir), cprofile.MAIN_STEM))

    def _run(self, it: Any, plan: Any, epoch: int, arenas: ArenaFlags | None, watch: Iteration) -> Iterator[Any]:
        """Reorder the workers' batches and hand them to the loop; the observer (``watch``) records the rest."""
        workers = max(1, self.num_workers)
        reorder = Reorder(self.batches_consumed, arenas, count_bytes=watch.count_bytes)
        self._live = (self.batches_consumed, self.num_samples_yielded, reorder, it)
        done = False
        try:
            with watch.epoch(it, reorder, epoch, plan.rank, plan.num_batches, self.num_workers):
                delivered = watch.delivered  # None: nothing to call per batch
                while True:
                    for j, batch in reorder.ready():
                        self.batches_consumed = j + 1
                        self.num_samples_yielded += plan.batch_len(j)
                        self._latest_worker_idx = j % workers
                        try:
                            yield batch
                        except BaseException:  # the loop left during this batch (break, exception)
                            if delivered is not None:
                                delivered(j)
                            raise
                        if delivered is not None:
                            delivered(j)
                    if (
                        self.num_workers > 0
                        and reorder.expected >= plan.num_batches
                        and not reorder.pending()
                        and watch.settled()
                    ):
                        # Every batch of the plan and everything the observer waits for arrived: no need to
                        # wait for the workers' stop. (A worker sends its last trace events right after its
                        # last batch: a loop that does any work on that batch does not wait for them.)
                        done = True
                        break
                    if arenas is not None:
                        arenas.release_dropped()  # arenas of batches the loop has dropped go back to the workers
                    try:
                        item = watch.fetch(it)  # next(it), the loop's wait (None: the observer's own message)
                    except StopIteration:
                        break
                    if item is not None:
                        parcel = reorder.add(item)
                        if parcel is not None:
                            watch.take(parcel)  # what rode with a worker's last group
                if reorder.pending() or reorder.expected != plan.num_batches:
                    raise DatasetError(
                        f"epoch {epoch} ended after batch {reorder.expected - 1} of {plan.num_batches} with "
                        f"{reorder.pending()} batches out of order: the DataLoader must deliver worker results in "
                        f"order (in_order=True)"
                    )
            self.restore = False  # a complete epoch
        finally:
            live, self._live = self._live, None
            if self._tuner is not None:
                self._tuner.after_epoch(self.batches_consumed - live[0])  # the tuner's exact epoch time
            settle = watch.end(done)
            shutdown = getattr(it, "_shutdown_workers", None)
            if shutdown is not None and not self.persistent_workers:
                pids = [getattr(p, "pid", None) for p in getattr(it, "_workers", [])] if settle is not None else []
                if done:
                    # A complete epoch: the workers are finishing on their own; joining them (tens of ms) need
                    # not delay the training loop's next step. They are told to stop now: the thread that joins
                    # them may wait up to the interpreter's switch interval (5 ms) for the GIL.
                    _tell_workers_to_stop(it)
                    joiner = threading.Thread(
                        target=_finish_workers,
                        args=(shutdown, settle, pids),
                        name="streamscope-loader-shutdown",
                        daemon=True,
                    )
                    _SHUTDOWNS.append(joiner)
                    joiner.start()
                else:
                    shutdown()  # an abandoned epoch frees its workers now (persistent ones are reset by torch)
                    if settle is not None:  # a worker that exited before the loop decided left its parcel behind
                        settle(pids)

    def _retune_workers(self, num_workers: int) -> None:
        """Run the next epoch with ``num_workers`` workers (the tuner's move, between epochs). The epoch plan, the
        sample order and the resume state do not depend on it; persistent workers are never changed."""
        n = int(num_workers)
        if n < 0 or n == self.num_workers or self.persistent_workers or self._live is not None:
            return
        self.num_workers = n
        self.dataset.set_num_workers(n)  # type: ignore[attr-defined]
        if n > 0 and self.prefetch_factor is None:
            self.prefetch_factor = 2
        self._arenas = ArenaFlags(n) if n > 0 else None

    @property
    def tuner(self) -> hooks.LoaderTuner | None:
        """The auto-tuner of this loader (``autotune=True``), else None: its ``decisions`` and ``values()``."""
        return self._tuner

    @property
    def knobs(self) -> KnobBoard | BoardGroup | None:
        """The live knobs of this loader's dataset (prefetch depth, download concurrency, cache budget, ...).

        The board is the dataset's shared memory, made when the dataset was built, so before any worker starts:
        forked workers inherit it, spawned ones receive it with the dataset. A value set here (``set``, or the
        tuner's ``propose``) or by ``config.set_value`` in this process reaches every worker, persistent or not,
        at its next chunk or batch. See docs/knobs.md.
        """
        return getattr(self.dataset, "knobs", None)

    def __len__(self) -> int:
        ds: StreamingDataset = self.dataset  # type: ignore[assignment]
        epoch = self._pending[0] if self._pending is not None else max(1, self.current_epoch)
        return ds.plan(epoch, self.batch_size).num_batches

    # --- state -------------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """Where the training loop is: epoch, batches it received, and the dataset's identity."""
        ds: StreamingDataset = self.dataset  # type: ignore[assignment]
        if self._pending is not None:
            epoch, consumed = self._pending
        else:
            epoch, consumed = max(1, self.current_epoch), self.batches_consumed
        started = self.current_epoch > 0 or self._pending is not None
        complete = started and consumed > 0 and consumed == ds.plan(epoch, self.batch_size).num_batches
        return {
            "dataset": ds.state_dict(
                self.num_samples_yielded, self.num_workers, self.batch_size, epoch=epoch, batches_consumed=consumed
            ),
            "current_epoch": epoch if started else 0,
            "num_samples_yielded": self.num_samples_yielded,
            "latest_worker_idx": self._latest_worker_idx,
            "batches_consumed": consumed,
            "epoch_complete": complete,
            **({"autotune": self._tuner.state_dict()} if self._tuner is not None else {}),
        }

    def load_state_dict(self, obj: dict[str, Any]) -> None:
        """Continue from :meth:`state_dict` output: the next iteration yields exactly the batches not yet seen.

        A state saved at the end of an epoch leaves nothing of that epoch to resume: the next iteration is the
        following epoch, from its start, over this loader's dataset even when it is not the one the state was
        saved with (as in LitData). A state saved inside an epoch sets :attr:`restore` until an epoch completes.

        Raises:
            StateDictError: a mid-epoch state that belongs to another dataset, seed, batch size or configuration.
        """
        if not isinstance(obj, dict) or "dataset" not in obj:
            raise StateDictError("not a StreamingDataLoader state_dict (no 'dataset' key)")
        if self._tuner is not None and isinstance(obj.get("autotune"), dict):
            self._tuner.load_state_dict(obj["autotune"])  # a resumed run starts from the saved run's tuned values
        ds: StreamingDataset = self.dataset  # type: ignore[assignment]
        if int(obj.get("current_epoch", 1)) == 0:
            self._pending = None
            self.current_epoch = 0
            return
        if obj.get("epoch_complete") is True:
            epoch = int(obj["current_epoch"]) + 1
            self._pending = (epoch, 0)
            self.current_epoch = epoch
            self.batches_consumed = self.num_samples_yielded = self._latest_worker_idx = 0
            return
        saved_bs = obj["dataset"].get("batch_size", self.batch_size)
        if _sizes(saved_bs) != _sizes(self.batch_size):  # per-dataset sizes: a tuple is saved as a list
            raise StateDictError(f"the state was saved with batch_size={saved_bs}, this loader uses {self.batch_size}")
        epoch, start = ds.resume_position(obj["dataset"], self.batch_size)
        self._pending = (epoch, start)
        self.current_epoch = epoch
        self.batches_consumed = start
        self.restore = start > 0
        self.num_samples_yielded = _samples_yielded(obj.get("num_samples_yielded", 0)) if start else 0
        self._latest_worker_idx = int(obj.get("latest_worker_idx", 0))


def _samples_yielded(saved: Any) -> int:
    """A state's ``num_samples_yielded``: an int, or LitData's per-worker counts for a combination
    (``{worker: [per-dataset counts]}``), summed."""
    if isinstance(saved, dict):
        return sum(int(sum(v)) if isinstance(v, (list, tuple)) else int(v) for v in saved.values())
    return int(saved)


def _sizes(batch_size: Any) -> Any:
    """A batch size as compared between a state and a loader: one per dataset as a list, else as it is."""
    return list(batch_size) if isinstance(batch_size, (list, tuple)) else batch_size
