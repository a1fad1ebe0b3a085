"""A simulated loader for the tuner's tests: its wait per batch follows from the knobs by a simple pipeline model,
with optional noise, on a simulated clock (no threads, no sleeps).

Model: each of ``max(1, workers)`` readers downloads up to ``min(concurrency, depth + 1)`` chunks at once, each
taking ``latency`` seconds (so a reader brings ``k / latency`` chunks per second of ``spc`` samples); decoding costs
``decode`` seconds per batch in a worker (in the loop itself without workers). The loop's period per batch is the
slowest of its step, the downloads and the decoding; its wait is the period less its step, split between
``download`` and ``decode`` by which limit binds.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import Any

from streamscope._core.board import KnobBoard
from streamscope.tune import Budgets, Controller, Policy, Reading, Resources, TargetInfo
from streamscope.tune.policy import WORKERS


@dataclass
class Pipeline:
    step: float = 0.005  # the loop's own time per batch
    batch: int = 256
    spc: float = 80.0  # samples per chunk
    latency: float = 0.1  # seconds per chunk download
    decode: float = 0.0  # seconds per batch of decoding
    noise: float = 0.0  # relative sd of each reading's wait
    flat: float | None = None  # a wait per batch that no knob changes (the oscillation test)
    flat_stage: str = "decode"  # what the flat wait is attributed to
    per_worker: int = 200_000_000  # RSS of one worker
    main: int = 300_000_000  # RSS of the main process

    def period(self, conc: int, depth: int, workers: int) -> tuple[float, str]:
        if self.flat is not None:
            return self.step + self.flat, self.flat_stage
        readers = max(1, workers)
        inflight = max(1, min(conc, depth + 1))
        samples_s = readers * inflight / self.latency * self.spc if self.latency > 0 else math.inf
        p_dl = self.batch / samples_s if samples_s else 0.0
        if workers == 0:
            p_cpu = self.step + self.decode
        else:
            p_cpu = self.decode / workers
        p = max(self.step, p_dl, p_cpu)
        if workers == 0:
            p = max(p_dl, self.step + self.decode)
        return p, ("download" if p_dl >= p_cpu else "decode")


@dataclass
class SimTarget:
    """A loader as the tuner sees it, with a real knob board."""

    info: TargetInfo
    board_: KnobBoard
    nworkers: int = 0
    pending: int | None = None
    epochs: int = 1
    live: bool = True

    def board(self) -> Any:
        return self.board_

    def workers(self) -> int:
        return self.pending if self.pending is not None else self.nworkers

    def request_workers(self, n: int) -> None:
        self.pending = n

    def epoch(self) -> int:
        return self.epochs

    def iterating(self) -> bool:
        return self.live

    def new_epoch(self) -> None:
        if self.pending is not None:
            self.nworkers, self.pending = self.pending, None
        self.epochs += 1


@dataclass
class Sim:
    """Runs a controller over a :class:`Pipeline` on a simulated clock."""

    pipe: Pipeline
    target: SimTarget
    controller: Controller
    events: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    t: float = 0.0
    waits: float = 0.0
    wait_s: float = 0.0
    stages: dict[str, float] = field(default_factory=lambda: {"download": 0.0, "decode": 0.0})
    epoch_s: float = 10.0
    rng: random.Random = field(default_factory=lambda: random.Random(7))
    history: list[dict[str, Any]] = field(default_factory=list)  # per tick: the knobs and the wait per batch
    downloads: float = 0.0
    download_s: float = 0.0

    def knobs(self) -> tuple[int, int, int]:
        b = self.target.board_
        return int(b.value("download_concurrency")), int(b.value("prefetch_depth")), self.target.nworkers

    def wait_now(self) -> float:
        c, d, w = self.knobs()
        p, _ = self.pipe.period(c, d, w)
        return max(0.0, p - self.pipe.step)

    def resources(self) -> Resources:
        w = self.target.nworkers
        return Resources(self.pipe.main + w * self.pipe.per_worker, self.pipe.main, w)

    def advance(self, dt: float) -> None:
        c, d, w = self.knobs()
        p, stage = self.pipe.period(c, d, w)
        n = dt / p
        wait = max(0.0, p - self.pipe.step)
        if self.pipe.noise:
            wait *= max(0.0, self.rng.gauss(1.0, self.pipe.noise))
        self.waits += n
        self.wait_s += n * wait
        self.stages[stage] += n * wait
        chunks = n * self.pipe.batch / self.pipe.spc if self.pipe.spc > 0 else 0.0
        self.downloads += chunks
        self.download_s += chunks * self.pipe.latency
        before = int((self.t) // self.epoch_s)
        self.t += dt
        if int(self.t // self.epoch_s) > before:
            self.target.new_epoch()

    def reading(self) -> Reading:
        stages = {"download": self.stages["download"], "decompress": 0.0, "read": 0.0, "decode": self.stages["decode"]}
        stages["idle"] = 0.0
        return Reading(
            self.t, int(self.waits), self.wait_s, stages, downloads=int(self.downloads), download_s=self.download_s
        )

    def run(self, seconds: float, tick: float = 1.0) -> None:
        end = self.t + seconds
        while self.t < end:
            self.advance(tick)
            if self.t + 1e-9 >= self.controller.next_wake():
                self.controller.step(self.t, self.reading(), self.resources())
            c, d, w = self.knobs()
            self.history.append({"t": self.t, "conc": c, "depth": d, "workers": w, "wait": self.wait_now()})


def make_sim(
    pipe: Pipeline,
    *,
    workers: int = 0,
    cpus: int = 4,
    ram: int = 10**12,
    max_workers: int | None = None,
    base: dict[str, Any] | None = None,
    info: dict[str, Any] | None = None,
    epoch_s: float = 10.0,
) -> Sim:
    board = KnobBoard(base or {"prefetch_depth": (2, False, "max_pre_download")})
    ti = TargetInfo(
        **{
            "batch_size": pipe.batch,
            "samples_per_chunk": pipe.spc,
            "chunk_bytes": 1_000_000,
            "dataset_bytes": 250_000_000,
            "uses_cache": True,
            **(info or {}),
        }
    )
    target = SimTarget(ti, board, nworkers=workers)
    budgets = Budgets(ram, "test", cpus, cpus if max_workers is None else max_workers)
    events: list[tuple[str, dict[str, Any]]] = []
    c = Controller(target, Policy(ti, budgets), budgets, lambda n, f: events.append((n, f)), tick=1.0)
    sim = Sim(pipe, target, c, events, epoch_s=epoch_s)
    c.start(0.0, sim.resources())
    return sim


def kept_values(sim: Sim) -> list[tuple[float, str, Any]]:
    """(time, knob, value) of every kept decision."""
    return [(0.0, f["knob"], f["new"]) for n, f in sim.events if n == "decision" and f["outcome"] == "kept"]


__all__ = ["WORKERS", "Pipeline", "Sim", "SimTarget", "kept_values", "make_sim"]
