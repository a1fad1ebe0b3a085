"""The tuner's thread in a rank's main process: read the metrics on the controller's schedule, feed it, and report.

Every event is a ``tune`` instant (Litracer log, Perfetto, OTLP as a zero-length span):

* ``started``  the budgets (RAM and where it comes from, cores, the workers cap), the kind of data, and a knob left
  to another controller (``left_to_governor``: the raw-file governor owns ``raw_concurrency``);
* ``decision`` a candidate's verdict, one per knob it moved: ``decision`` (its number), ``knob``, ``old``, ``new``,
  ``reason``, ``cause`` (download / saturated / cpu), ``wait_before_ms``, ``wait_after_ms``, ``outcome`` (kept,
  rolled back, abandoned), ``epoch``; the model's inputs (``step_ms``, ``wait_ms``, ``wait_share``, ``latency_ms``,
  ``w0_ms``, ``downloads_per_s``, ``bdp``, ``in_flight``, ``downloads_per_batch``, ``cpu_ms_per_batch``,
  ``cpu_share``, ``download_share``, ``occupancy``, ``start_wait_ms``, ``steady_wait_share``, ``saturated``) and
  prediction (``predicted_gain``); the paired check's result (``check``,
  ``blocks``, ``gain``, ``gain_lo``, ``gain_hi``). The board's own ``tune`` event (named by the knob) marks each
  value change, the paired check's switches included;
* ``budget``   a value lowered at the start to fit the cache or its disk;
* ``settled`` / ``resumed``: the tuner found nothing to improve (and why), or looks again (and why);
* ``restored`` the tuned values a resumed run started from;
* ``ranks``    ranks tuning together (``ranks.py``): a plan rank 0 published (``published``, ``ranks_seen``,
  ``decider``), or applied on this rank (``applied``, ``step``, ``at_batch``, ``decider``, ``values``, the
  decider's inputs as ``decider_*``).

A controller that raises stops tuning: a move on trial goes back to the last good values, a ``crash`` instant
(name ``tuner``) is recorded and a RuntimeWarning says so; the loader goes on.
"""

from __future__ import annotations

import os
import threading
import time
import warnings
from collections.abc import Callable
from dataclasses import replace as dc_replace
from typing import Any

from streamscope import events as ev
from streamscope._core import config
from streamscope.events import kinds
from streamscope.tune.budgets import Budgets, disk_free, resolve, tree_rss
from streamscope.tune.controller import Controller
from streamscope.tune.decision import Decision
from streamscope.tune.gauges import ModelGauges, dataset_of
from streamscope.tune.policy import Policy, Resources
from streamscope.tune.ranks import Plan, RankShare
from streamscope.tune.signals import Reading, cpu_pressure, read_view
from streamscope.tune.target import Target

__all__ = ["RSS_EVERY", "Sensors", "Tuner", "record"]

#: Seconds between two reads of the process tree's resident memory.
RSS_EVERY = 5.0


class Sensors:
    """What the tuner reads each tick: the loader's live batch count and wait (the wait ring), the merged
    metrics' downloads, retries and decode CPU, the CPU pressure, the rank's resident memory
    (``benchmarks/bench_tune_read.py`` measures what a read costs)."""

    def __init__(self, pid: int | None = None, pressure: str = "/proc/pressure/cpu") -> None:
        self.pid = pid or os.getpid()
        self.pressure = pressure
        self._res: Resources | None = None
        self._res_t = 0.0

    def read(self, now: float, target: Target) -> Reading:
        batches, wait_s = target.progress()
        start_waits, start_wait_s = target.starts()
        downloads, download_s, nbytes, retries, cpu, split, split_dl = read_view(ev.metrics_view())
        return Reading(
            t=now,
            batches=batches,
            wait_s=wait_s,
            downloads=downloads,
            download_s=download_s,
            download_bytes=nbytes,
            retries=retries,
            decode_cpu_s=cpu,
            cpu_share=cpu_pressure(self.pressure),
            epoch=target.epoch(),
            workers=target.running_workers(),
            split_s=split,
            split_download_s=split_dl,
            start_waits=start_waits,
            start_wait_s=start_wait_s,
        )

    def resources(self) -> Resources:
        """The rank's resident memory, read at most every :data:`RSS_EVERY` seconds (a walk of the process tree
        costs about a millisecond, most of a tick; the RAM budget does not need it every second)."""
        t = time.monotonic()
        if self._res is None or t - self._res_t >= RSS_EVERY:
            tree, own, n = tree_rss(self.pid)
            self._res, self._res_t = Resources(tree, own, n), t
        return self._res

    def cache_free(self, cache_dir: str | None) -> int | None:
        return disk_free(cache_dir) if cache_dir else None


def record(name: str, fields: dict[str, Any]) -> None:
    """A tuner event as a ``tune`` instant (nothing when the category is off)."""
    kinds.tuner(name, fields)


class Tuner:
    """Tunes one target from a daemon thread of this process (see the module docstring).

    Args:
        target: the loader, adapted (:class:`~streamscope.tune.target.Target`).
        budgets: the budgets (default: :func:`~streamscope.tune.budgets.resolve`, from the knobs and the machine).
        sensors: what is read (default: the metrics view and psutil).
        tick: seconds between two readings while searching (default: ``metrics_interval``).
        clock: the monotonic clock.
        ranks: share the model inputs with the other ranks and follow the slowest's plan (``tune/ranks.py``).
    """

    def __init__(
        self,
        target: Target,
        budgets: Budgets | None = None,
        sensors: Sensors | None = None,
        tick: float | None = None,
        clock: Callable[[], float] = time.monotonic,
        emit: Callable[[str, dict[str, Any]], None] = record,
        ranks: RankShare | None = None,
    ) -> None:
        self.target = target
        self.budgets = budgets or resolve()
        self.sensors = sensors or Sensors()
        self.clock = clock
        self._emit_to = emit
        self.events: list[tuple[str, dict[str, Any]]] = []  # every event this tuner emitted, in order
        self.controller = Controller(
            target,
            Policy(target.info, self.budgets),
            self.budgets,
            self._emit,
            tick=float(tick if tick is not None else config.get("metrics_interval")),
            period_max=float(config.get("autotune_period_max")),
            min_gain=float(config.get("autotune_min_gain")),
            wait_share=float(config.get("autotune_wait_share")),
            probe_share=float(config.get("autotune_probe_share")),
        )
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.error: BaseException | None = None
        self.gauges = ModelGauges(dataset_of(target), self.controller.model)  # the model, as metrics
        self.ranks = ranks
        if ranks is not None:
            ranks.emit = self._emit
        self._follow_next = 0.0  # a follower's next reading (its controller does not run)
        self._paused = False  # the controller stopped because another rank decides

    def _emit(self, name: str, fields: dict[str, Any]) -> None:
        self.events.append((name, fields))
        if len(self.events) > 10_000:
            del self.events[:1000]
        self._emit_to(name, fields)

    @property
    def decisions(self) -> list[Decision]:
        return list(self.controller.decisions)

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def check(self) -> None:
        """The budgets against what runs now; unpinned values brought inside them.

        Raises:
            TuneBudgetError: the loader cannot run within them at all.
        """
        res = self.sensors.resources()
        with self._lock:
            self.controller.start(self.clock(), res, self.sensors.cache_free(self.target.info.cache_dir))

    def start(self) -> None:
        """:meth:`check`, then tune from a daemon thread (once)."""
        if self._thread is not None:
            return
        self.check()
        info = self.target.info
        extra: dict[str, Any] = {"kind": info.kind}
        if info.raw_governed:
            # told in the trace: raw_concurrency is the governor's, the tuner moves the look-ahead only
            extra["left_to_governor"] = "raw_concurrency"
            extra["governor"] = "each worker's raw-file GET limit follows its measured GET latency (raw.planning)"
        self._emit("started", {**self.budgets.describe(), "workers": self.target.workers(), **extra})
        self._thread = threading.Thread(target=self._run, name="streamscope-tuner", daemon=True)
        self._thread.start()

    def _wake(self) -> float:
        share = self.ranks
        if share is None:
            return self.controller.next_wake()
        wake = self.controller.next_wake() if share.leads() else self._follow_next
        return share.next_wake(wake, self.clock())

    def _run(self) -> None:
        c = self.controller
        try:
            while not self._stop.wait(max(0.0, self._wake() - self.clock())):
                now = self.clock()
                share = self.ranks
                if share is not None and now < (c.next_wake() if share.leads() else self._follow_next):
                    self._follow(share, self.target.progress()[0])  # a poll for a pending plan's step only
                    continue
                reading = self.sensors.read(now, self.target)
                res = self.sensors.resources()
                with self._lock:
                    if self._stop.is_set():
                        break
                    if share is None:
                        c.step(now, reading, res)
                    else:
                        self._shared_step(share, now, reading, res)
                    self.gauges.update(reading, self.target.iterating())  # the model, as metrics
        except ReferenceError:
            # the loader was collected while this thread ran (its finalizer stops the tuner, which may come after
            # the reading that found it gone): nothing is left to tune nor to roll back, and nothing failed
            self._stop.set()
            self.gauges.close()
        except Exception as exc:  # noqa: BLE001 - tuning stops; the loader must go on
            self.error = exc
            try:
                with self._lock:
                    c.abort(f"the tuner failed: {type(exc).__name__}: {exc}")
            except Exception:  # noqa: BLE001 - the values stay where they are
                pass
            kinds.crash(exc, "tuner", component="tuner")
            warnings.warn(
                f"streamscope's auto-tuner stopped after an error ({type(exc).__name__}: {exc}); the loader goes on "
                f"with the last good knob values",
                RuntimeWarning,
                stacklevel=1,
            )

    def _shared_step(self, share: RankShare, now: float, reading: Reading, res: Resources) -> None:
        """One reading with ranks sharing (the lock held): the controller runs on the deciding rank only."""
        c = self.controller
        share.ram = res.tree / self.budgets.ram if res.tree and self.budgets.ram > 0 else 0.0
        if share.leads():
            if self._paused:  # this rank decides again: its controller starts over from a warm-up
                self._paused = False
                c.phase = "warmup"
            ram, rank = share.worst_ram()
            if rank != share.rank and ram > 1.0 and ram > share.ram:
                # another rank is over its RAM budget: this controller answers for it as for its own
                res = dc_replace(res, tree=int(ram * self.budgets.ram), rank=rank)
            c.step(now, reading, res)
        else:
            self._follow_next = now + c.tick
            if not self._paused:
                self._paused = True
                if c.phase != "stopped":
                    c.abort(f"rank {share.plan.decider if share.plan else '?'} decides for every rank")
        share.on_reading(reading, lambda w: c.model.estimates(w, w.retries, w.workers).fields(), dict(c.good))
        self._apply(share.due(reading.batches), reading.batches)

    def _follow(self, share: RankShare, batches: int) -> None:
        with self._lock:
            if not self._stop.is_set():
                self._apply(share.due(batches), batches)

    def _apply(self, plan: Plan | None, batches: int) -> None:
        """A plan whose step this rank reached: its values, now (the lock held)."""
        if plan is None:
            return
        done = self.controller.restore(plan.values)
        self._emit("ranks", {**plan.fields(), "applied": plan.seq, "at_batch": batches, "set": len(done)})

    def stop(self, timeout: float = 2.0) -> None:
        """Stop the thread (a move on trial goes back to the last good values); the model's gauges go."""
        self._stop.set()
        self.gauges.close()
        t = self._thread
        if t is not None and t.is_alive() and t is not threading.current_thread():
            t.join(timeout)
        with self._lock:
            if self.controller.phase != "stopped" and self.controller.trying:
                try:
                    self.controller.abort("the tuner stopped")
                except ReferenceError:
                    # the loader was collected first (stop runs from its finalizer): its knob board and workers are
                    # gone with it, so there is nothing left to roll back
                    self.controller.phase = "stopped"

    def values(self) -> dict[str, Any]:
        """The values the tuner set and kept."""
        with self._lock:
            return dict(self.controller.good)

    def restore(self, values: dict[str, Any]) -> dict[str, Any]:
        """Start from a saved run's tuned values."""
        with self._lock:
            done = self.controller.restore(values)
        if done:
            self._emit("restored", {"values": ",".join(f"{k}={v}" for k, v in sorted(done.items()))})
        return done
