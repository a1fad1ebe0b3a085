"""A deterministic, coarse simulation of one rank's input pipeline, for the real tuner (``tune.Controller``).

Time advances in steps of ``DT`` seconds (one tuner reading each); flows are aggregated per step, no event per
batch. What it models:

* the **store**: ``k`` downloads in flight take ``W(k)`` each, ``W0`` below the knee ``K``; beyond it the latency
  grows with ``k`` (queueing) and worse (``pen``: the store loses throughput past its knee), so the delivery rate
  is ``k / W0`` below the knee, ``K / W0 / (1 + pen (k/K - 1))`` past it, capped by a bandwidth (``x_bw``
  downloads per second). A store in ``slowdown`` mode answers the excess with 503s: retried requests counted;
  the latency of one download is log-normal (``sigma_w``): a window's mean latency carries that noise (over the
  downloads it averages), and a shallow prefetch stalls on the slow ones (``1 + sigma_w^2 / (1 + depth)``);
* **decoding**: ``u`` CPU seconds per batch, on ``min(workers, cores x share)`` cores; without workers, in series
  with the step in the loop's process;
* the **training step** ``step`` per batch, with log-normal noise per step (``noise``) and a sine drift
  (``drift`` relative amplitude, ``drift_period``), the latency drifting with it;
* **epochs** of ``nb`` batches, each starting with ``start_s + start_per_worker x workers`` seconds without
  batches (reported as the epoch's start waits, ``Target.starts``); ``num_workers`` changes only there. An epoch
  begins with a step: the rest of the step in which one ends is idle, so an epoch lasts a whole number of steps
  (for epochs of a few steps, as ``short-epochs``, throughput moves by steps between configurations: the best
  static point is one that just fits an epoch into fewer);
* the **cache**: when the dataset fits the cache budget, epochs after the first download nothing (else every
  epoch downloads every chunk: an LRU cache scanned in order evicts before reuse);
* a **regime change**: at ``jump_t`` the latency is multiplied by ``jump``.

:func:`static_grid` runs many fixed configurations at once (numpy over configurations, the same formula, the same
random draws): the untuned one and the grid of the tuner's reachable space.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from streamscope._core.board import KnobBoard
from streamscope.tune import Budgets, Controller, Policy, Reading, Resources, TargetInfo
from streamscope.tune.signals import START_WAITS

DT = 1.0


@dataclass(frozen=True)
class World:
    step: float = 0.005
    noise: float = 0.05
    drift: float = 0.0
    drift_period: float = 120.0
    u: float = 0.0  # decode CPU seconds per batch
    cores: int = 4
    share: float = 1.0
    w0: float = 0.04
    sigma_w: float = 0.5
    knee: float = 1e9
    pen: float = 0.0
    x_bw: float = 1e9  # downloads per second the bandwidth allows
    dpb: float = 3.2  # downloads per batch (a cache miss)
    fits: bool = False  # the dataset fits the cache
    nb: int = 3000  # batches per epoch
    start_s: float = 1.0
    start_per_worker: float = 0.3
    slowdown: bool = False
    jump_t: float = math.inf
    jump: float = 1.0
    seconds: float = 300.0
    # the untuned loader
    conc: int = 4
    depth: int = 2
    workers: int = 2
    per_worker: int = 200_000_000
    main: int = 300_000_000


def _draws(w: World, seed: int) -> tuple[list[float], list[float]]:
    rng = random.Random(seed)
    n = int(w.seconds / DT) + 2
    z = [rng.gauss(0.0, 1.0) for _ in range(n)]
    y = [rng.gauss(0.0, 1.0) for _ in range(n)]
    return z, y


def _step_lat(w: World, i: int, z: list[float], y: list[float]) -> tuple[float, float, float]:
    """(step, W0, the standard normal draw of the step's mean latency) in time step ``i``."""
    t = i * DT
    d = 1.0 + w.drift * math.sin(2 * math.pi * t / w.drift_period)
    s = w.step * d * math.exp(w.noise * z[i] - w.noise * w.noise / 2)
    lat = w.w0 * d * (w.jump if t >= w.jump_t else 1.0)
    return s, lat, y[i]


def _period(w: World, s: float, lat: float, c: Any, d: Any, wk: Any, miss: float, xp: Any) -> tuple[Any, Any, Any]:
    """(period per batch, downloads in flight, latency), for scalars (xp = math-like) or numpy arrays."""
    r = xp.maximum(wk, 1)
    slots = xp.maximum(xp.minimum(c, d + 1), 1)
    k = r * slots
    over = xp.maximum(k / w.knee - 1.0, 0.0)
    x = xp.minimum(k / lat / (1.0 + over) / (1.0 + w.pen * over), w.x_bw)
    p_dl = (w.dpb * miss) / x * (1.0 + w.sigma_w**2 / (1.0 + d)) if miss > 0 and w.dpb > 0 else 0.0 * k
    cores = max(1.0, w.cores * w.share)
    p_cpu = xp.where(wk <= 0, s + w.u, xp.maximum(s, w.u / xp.maximum(xp.minimum(wk, cores), 1e-9)))
    p = xp.maximum(p_cpu, p_dl)
    # what the store sees: every slot busy when the downloads bind, else the downloads the loop's pace needs
    rate = w.dpb * miss / p
    k_act = xp.where(p_dl >= p_cpu, k, xp.minimum(k, rate * lat))
    over_a = xp.maximum(k_act / w.knee - 1.0, 0.0)
    lat_act = lat * (1.0 + over_a) * (1.0 + w.pen * over_a)
    return p, k_act, lat_act


class _Scalar:
    """The numpy functions :func:`_period` uses, on floats."""

    maximum = staticmethod(max)
    minimum = staticmethod(min)

    @staticmethod
    def where(cond: bool, a: float, b: float) -> float:
        return a if cond else b


@dataclass
class SimTarget:
    info: TargetInfo
    board_: KnobBoard
    nworkers: int
    pending: int | None = None
    epochs: int = 1
    batches: float = 0.0
    wait_s: float = 0.0
    started: float = 0.0  # when the running epoch began (simulated seconds)
    records: dict[int, tuple[float, int]] = field(default_factory=dict)  # epoch -> (seconds, batches)
    start_waits: int = 0  # the epochs' start waits (signals.START_WAITS per worker an epoch)
    start_wait_s: float = 0.0  # ... their seconds: each epoch's start time without batches

    def board(self) -> Any:
        return self.board_

    def workers(self) -> int:
        return self.pending if self.pending is not None else self.nworkers

    def running_workers(self) -> int:
        return self.nworkers

    def request_workers(self, n: int) -> None:
        self.pending = n

    def epoch(self) -> int:
        return self.epochs

    def iterating(self) -> bool:
        return True

    def epoch_record(self, e: int) -> tuple[float, int] | None:
        return self.records.get(e)

    def progress(self) -> tuple[int, float]:
        return int(self.batches), self.wait_s

    def starts(self) -> tuple[int, float]:
        return self.start_waits, self.start_wait_s


@dataclass
class Run:
    batches: float
    events: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    # (t, conc, depth, workers running: a requested change counts from the epoch it applies at)
    history: list[tuple[float, int, int, int]] = field(default_factory=list)
    controller: Controller | None = None
    peak_rss: int = 0
    retries: list[tuple[float, float]] = field(default_factory=list)  # (t, in flight per reader)


def make(
    w: World, *, base: dict[str, Any] | None = None, max_workers: int | None = None, ram: int = 10**12
) -> tuple[SimTarget, Controller, list[tuple[str, dict[str, Any]]]]:
    board = KnobBoard(
        base
        or {
            "prefetch_depth": (w.depth, False, "max_pre_download"),
            "download_concurrency": (w.conc, False, "download_concurrency"),
        }
    )
    info = TargetInfo(
        batch_size=256,
        samples_per_chunk=256 / w.dpb if w.dpb > 0 else 0.0,
        chunk_bytes=1_000_000,
        dataset_bytes=int(w.nb * max(w.dpb, 1.0) * 1_000_000),
        uses_cache=w.dpb > 0,
    )
    target = SimTarget(info, board, w.workers)
    budgets = Budgets(ram, "sim", w.cores, w.cores if max_workers is None else max_workers)
    events: list[tuple[str, dict[str, Any]]] = []
    c = Controller(target, Policy(info, budgets), budgets, lambda n, f: events.append((n, f)), tick=DT)
    c.start(0.0, Resources(w.main + w.workers * w.per_worker, w.main, w.workers))
    return target, c, events


def run_tuned(w: World, seed: int, *, history: bool = False, **kw: Any) -> Run:
    """The real controller on world ``w`` (random draws of ``seed``)."""
    z, y = _draws(w, seed)
    target, c, events = make(w, **kw)
    board = target.board_
    xp = _Scalar
    t = 0.0
    startup = w.start_s + w.start_per_worker * target.nworkers
    target.start_waits += START_WAITS * max(1, target.nworkers)
    in_epoch = 0.0
    dl = dls = retries = cpu = 0.0
    out = Run(0.0, events, controller=c)
    n = int(w.seconds / DT)
    for i in range(n):
        s, lat, ln = _step_lat(w, i, z, y)
        conc, depth = int(board.value("download_concurrency")), int(board.value("prefetch_depth"))
        wk = target.nworkers
        miss = 0.0 if (w.fits and target.epochs > 1) else 1.0
        p, k_act, lat_act = _period(w, s, lat, conc, depth, wk, miss, xp)
        avail = DT
        if startup > 0:
            used = min(startup, avail)
            startup -= used
            avail -= used
            target.wait_s += used  # the loop waits for the new epoch's first batch
            target.start_wait_s += used
        nb = avail / p
        if in_epoch + nb >= w.nb:  # the epoch ends inside this step: the next one starts (workers change here)
            nb = w.nb - in_epoch
            target.batches += nb
            target.wait_s += nb * (p - s)
            in_epoch = 0.0
            if target.pending is not None:
                target.nworkers, target.pending = target.pending, None
            target.records[target.epochs] = (t + DT - avail + nb * p - target.started, w.nb)
            target.started = t + DT  # the rest of this step is between epochs
            target.epochs += 1
            startup = w.start_s + w.start_per_worker * target.nworkers
            target.start_waits += START_WAITS * max(1, target.nworkers)
        else:
            in_epoch += nb
            target.batches += nb
            target.wait_s += nb * (p - s)
        d = nb * w.dpb * miss
        dl += d
        # the mean of d log-normal latencies: its spread shrinks with the downloads it averages
        sd = w.sigma_w / math.sqrt(max(d, 1.0))
        dls += d * lat_act * math.exp(sd * ln - sd * sd / 2)
        if w.slowdown and k_act > w.knee:
            retries += d * (k_act / w.knee - 1.0)
        cpu += nb * w.u
        t += DT
        rss = w.main + target.nworkers * w.per_worker
        out.peak_rss = max(out.peak_rss, rss)
        res = Resources(rss, w.main, target.nworkers)
        c.step(
            t,
            Reading(
                t,
                int(target.batches),
                target.wait_s,
                int(dl),
                dls,
                0.0,
                int(retries),
                cpu,
                w.share,
                target.epochs,
                target.nworkers,
                start_waits=target.start_waits,
                start_wait_s=target.start_wait_s,
            ),
            res,
        )
        if history:
            out.history.append(
                (t, int(board.value("download_concurrency")), int(board.value("prefetch_depth")), target.nworkers)
            )
    out.batches = target.batches
    return out


def static_grid(w: World, seeds: list[int], conc: np.ndarray, depth: np.ndarray, workers: np.ndarray) -> np.ndarray:
    """Batches each fixed configuration delivers in the run of each seed (the same formula and draws as
    :func:`run_tuned`), as an array (seeds, configurations): numpy over both."""
    draws = [_draws(w, seed) for seed in seeds]
    n = int(w.seconds / DT)
    shape = (len(seeds), len(conc))
    c = conc.astype(float)[None, :]
    d = depth.astype(float)[None, :]
    wk = workers.astype(float)[None, :]
    batches = np.zeros(shape)
    in_epoch = np.zeros(shape)
    epochs = np.ones(shape)
    startup = np.broadcast_to(w.start_s + w.start_per_worker * wk, shape).copy()
    for i in range(n):
        sl = [_step_lat(w, i, z, y) for z, y in draws]
        s = np.array([x[0] for x in sl])[:, None]
        lat = np.array([x[1] for x in sl])[:, None]
        p, _, _ = _period(w, s, lat, c, d, wk, 1.0, np)
        if w.fits:
            p_hit, _, _ = _period(w, s, lat, c, d, wk, 0.0, np)
            p = np.where(epochs > 1, p_hit, p)
        used = np.minimum(startup, DT)
        startup = startup - used
        nb = (DT - used) / p
        ends = in_epoch + nb >= w.nb
        nb = np.where(ends, w.nb - in_epoch, nb)
        batches += nb
        in_epoch = np.where(ends, 0.0, in_epoch + nb)
        epochs = epochs + ends
        startup = np.where(ends, w.start_s + w.start_per_worker * wk, startup)
    return batches


def grid(w: World) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The tuner's reachable space, coarsely: concurrency 1-32, depth a little above it, workers from the given
    number to the cores (the tuner adds workers, it never takes the user's away)."""
    cs, ds, ws = [], [], []
    for wk in range(w.workers, max(w.cores, w.workers) + 1):
        for c in (1, 2, 4, 6, 8, 12, 16, 24, 32):
            for d in {c + 1, c + max(2, math.ceil(0.5 * c)), 2 * c}:
                cs.append(c)
                ds.append(d)
                ws.append(wk)
    return np.array(cs), np.array(ds), np.array(ws)


def untuned(w: World) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return np.array([w.conc]), np.array([w.depth]), np.array([w.workers])


__all__ = ["DT", "Run", "SimTarget", "World", "grid", "make", "replace", "run_tuned", "static_grid", "untuned"]
