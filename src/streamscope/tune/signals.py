"""What the tuner measures: cumulative readings of one rank's loader, and windows between two of them.

A :class:`Reading` holds, at one moment, the counters the capacity model needs (see ``README.md``):

* the loop's **batches** and **wait**, read live from the loader (the batch count it keeps, and the ring of the
  loop's waits its observer writes for the wait split, ``recording.waits.WaitRing`` of
  ``recording.loader_observer``: every complete wait and the one in progress), never from a flusher-lagged
  histogram, so a window's step and wait per batch are exact;
* **downloads**: completed chunk (or raw-file) downloads, their total time and bytes, from the merged metrics
  (``streamscope.download.duration`` / ``.bytes``; they lag by up to one flusher tick, which windows of several
  ticks and the model's smoothing absorb);
* **decode CPU**: the thread CPU time the workers (or the loop without workers) spent producing batches
  (``streamscope.loader.decode.cpu``: one ``thread_time_ns`` pair per batch in ``recording.loader_share``);
* **CPU share**: the share of time this machine's runnable tasks got a CPU (``1 - some avg10`` of
  ``/proc/pressure/cpu``; 1 where PSI is missing);
* the **epoch starts**: the waits among the first :data:`START_WAITS` per worker of each epoch (fresh workers
  starting, their first downloads), counted apart from the wait: no download knob shortens them (measured at
  S3 +50 ms, two workers: 0.32-0.35 s an epoch at 12, 30 and 32 downloads allowed at once, while the steady
  wait fell from 4.3 to 0.7 ms a batch), so the decision whether the loop waits is taken on the steady rest
  (:attr:`Window.steady_wait_share`).

A :class:`Window` is the difference of two readings, with the model's inputs as properties.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from streamscope.events.registry import STAGES, M

__all__ = ["START_WAITS", "STEADY_MIN", "Reading", "Window", "cpu_pressure", "merge", "read_view", "window"]

#: Waits per worker (at least one reader) at an epoch's start that count as the start: with two workers at S3
#: +50 ms the first four waited 159, 97, 44 and 16 ms and the fifth 0.1; without workers the first two.
START_WAITS = 2
#: The starts are set apart only when they are at most this share of a window's batches (else the epochs are
#: too short to have a steady part, and the whole wait counts).
STEADY_MIN = 0.1


@dataclass(frozen=True)
class Reading:
    """One rank's cumulative counters at monotonic time ``t`` (seconds)."""

    t: float
    batches: int = 0  # batches handed to the loop
    wait_s: float = 0.0  # the loop's total wait for them (seconds)
    downloads: int = 0  # downloads completed
    download_s: float = 0.0  # their total time
    download_bytes: float = 0.0
    retries: int = 0  # storage requests retried (a store pushing back: 503 SlowDown, throttling)
    decode_cpu_s: float = 0.0  # thread CPU time spent producing batches
    cpu_share: float = 1.0  # share of time a runnable task got a CPU (now, not cumulative)
    epoch: int = 0  # the loader's epochs started so far
    workers: int = 0  # the workers of the epoch that runs
    split_s: float = 0.0  # the wait split's seconds settled so far (all stages; recording.attribution)
    split_download_s: float = 0.0  # ... of them with the workers downloading
    start_waits: int = 0  # the loop's waits at epoch starts so far (:data:`START_WAITS` per worker an epoch)
    start_wait_s: float = 0.0  # ... their seconds (part of ``wait_s``)


@dataclass(frozen=True)
class Window:
    """What happened between two readings (the model's inputs)."""

    t0: float
    t1: float
    batches: int
    wait_s: float
    downloads: int = 0
    download_s: float = 0.0
    download_bytes: float = 0.0
    retries: int = 0
    decode_cpu_s: float = 0.0
    cpu_share: float = 1.0
    epoch: int = 0
    workers: int = 0
    split_s: float = 0.0
    split_download_s: float = 0.0
    start_waits: int = 0
    start_wait_s: float = 0.0

    @property
    def seconds(self) -> float:
        return max(0.0, self.t1 - self.t0)

    @property
    def period(self) -> float:
        """Seconds per batch of the loop (its step and its wait): the objective (lower is better)."""
        return self.seconds / self.batches if self.batches else math.inf

    @property
    def wait_per_batch(self) -> float:
        return self.wait_s / self.batches if self.batches else 0.0

    @property
    def step(self) -> float:
        """The loop's own time per batch (the training step): the period less the wait."""
        return max(0.0, (self.seconds - self.wait_s) / self.batches) if self.batches else 0.0

    @property
    def wait_share(self) -> float:
        """Share of the loop's time spent waiting for data (0..1)."""
        s = self.seconds
        return min(1.0, self.wait_s / s) if s > 0 else 0.0

    def _starts_apart(self) -> bool:
        return 0 < self.start_waits <= STEADY_MIN * self.batches

    @property
    def steady_period(self) -> float:
        """:attr:`period` with the epoch starts' waits taken out (where :attr:`steady_wait_share` sets them
        apart)."""
        if not self._starts_apart() or not self.batches:
            return self.period
        return max(0.0, self.seconds - self.start_wait_s) / self.batches

    @property
    def steady_wait_share(self) -> float:
        """Share of the loop's time spent waiting outside epoch starts (their waits and time taken out): what a
        download knob can shorten. The whole :attr:`wait_share` where starts are over :data:`STEADY_MIN` of the
        batches."""
        if not self._starts_apart():
            return self.wait_share
        s = self.seconds - self.start_wait_s
        return min(1.0, max(0.0, self.wait_s - self.start_wait_s) / s) if s > 0 else 0.0

    @property
    def latency(self) -> float:
        """Mean seconds per download (0 without downloads)."""
        return self.download_s / self.downloads if self.downloads else 0.0

    @property
    def download_rate(self) -> float:
        """Downloads completed per second."""
        s = self.seconds
        return self.downloads / s if s > 0 else 0.0

    @property
    def in_flight(self) -> float:
        """Downloads under way on average (Little's law: completions per second x mean latency)."""
        return self.download_rate * self.latency

    @property
    def downloads_per_batch(self) -> float:
        return self.downloads / self.batches if self.batches else 0.0

    @property
    def download_wait_share(self) -> float:
        """Share of the wait the workers spent downloading (the wait split; 0 without one)."""
        return min(1.0, self.split_download_s / self.split_s) if self.split_s > 0 else 0.0

    @property
    def cpu_per_batch(self) -> float:
        """Thread CPU seconds spent producing one batch."""
        return self.decode_cpu_s / self.batches if self.batches else 0.0


def window(a: Reading, b: Reading) -> Window:
    return Window(
        t0=a.t,
        t1=b.t,
        batches=max(0, b.batches - a.batches),
        wait_s=max(0.0, b.wait_s - a.wait_s),
        downloads=max(0, b.downloads - a.downloads),
        download_s=max(0.0, b.download_s - a.download_s),
        download_bytes=max(0.0, b.download_bytes - a.download_bytes),
        retries=max(0, b.retries - a.retries),
        decode_cpu_s=max(0.0, b.decode_cpu_s - a.decode_cpu_s),
        cpu_share=b.cpu_share,
        epoch=b.epoch,
        workers=b.workers,
        split_s=max(0.0, b.split_s - a.split_s),
        split_download_s=max(0.0, b.split_download_s - a.split_download_s),
        start_waits=max(0, b.start_waits - a.start_waits),
        start_wait_s=max(0.0, b.start_wait_s - a.start_wait_s),
    )


def merge(ws: list[Window]) -> Window:
    """Consecutive (or interleaved) windows as one: sums, the last CPU share and epoch."""
    if not ws:
        return Window(0.0, 0.0, 0, 0.0)
    return Window(
        t0=0.0,
        t1=sum(w.seconds for w in ws),
        batches=sum(w.batches for w in ws),
        wait_s=sum(w.wait_s for w in ws),
        downloads=sum(w.downloads for w in ws),
        download_s=sum(w.download_s for w in ws),
        download_bytes=sum(w.download_bytes for w in ws),
        retries=sum(w.retries for w in ws),
        decode_cpu_s=sum(w.decode_cpu_s for w in ws),
        cpu_share=ws[-1].cpu_share,
        epoch=ws[-1].epoch,
        workers=ws[-1].workers,
        split_s=sum(w.split_s for w in ws),
        split_download_s=sum(w.split_download_s for w in ws),
        start_waits=sum(w.start_waits for w in ws),
        start_wait_s=sum(w.start_wait_s for w in ws),
    )


def read_view(view: Any) -> tuple[int, float, float, int, float, float, float]:
    """(downloads, their seconds, their bytes, retries, decode CPU seconds, the wait split's seconds, its download
    seconds) from a ``MetricsView``."""
    dl = view.histogram(M.DOWNLOAD_DURATION)
    split = {s: float(view.value(M.LOADER_WAIT_STAGE, stage=s)) for s in STAGES}
    return (
        int(dl.count),
        float(dl.sum),
        float(view.value(M.DOWNLOAD_BYTES)),
        int(view.value(M.DOWNLOAD_RETRIES)),
        float(view.value(M.LOADER_DECODE_CPU)),
        sum(split.values()),
        split.get("download", 0.0),
    )


def cpu_pressure(path: str = "/proc/pressure/cpu") -> float:
    """Share of time runnable tasks got a CPU over the last 10 s: ``1 - some avg10 / 100`` from Linux PSI;
    1.0 where PSI is missing or unreadable (a kernel without it, a container hiding it)."""
    try:
        with open(path, "rb") as f:
            line = f.readline()
        i = line.index(b"avg10=")
        some = float(line[i + 6 : line.index(b" ", i)])
    except (OSError, ValueError):
        return 1.0
    return max(0.05, min(1.0, 1.0 - some / 100.0))
