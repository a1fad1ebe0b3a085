"""The auto-tuner wired to a StreamingDataLoader: the ``autotuner`` hook the loader asks for.

``StreamingDataLoader(..., autotune=True)`` (or ``STREAMSCOPE_AUTOTUNE=1``) calls :func:`attach` through
:mod:`streamscope._core.hooks` (``stream`` may not import ``tune`` or ``api``). It switches metrics on (the tuner
reads the merged metrics of the run), adapts the loader to :class:`streamscope.tune.Target` and returns the
:class:`LoaderAutotune` the loader calls at each epoch and in its ``state_dict``. Nothing is started before the
loader's first epoch; without ``autotune`` this module is never imported.
"""

from __future__ import annotations

import time
import weakref
from typing import Any

import numpy as np

from streamscope import events as ev
from streamscope import recording
from streamscope._core import config, hooks
from streamscope.events import vocab
from streamscope.events.registry import M
from streamscope.tune import WORKERS, Tuner
from streamscope.tune.ranks import RankShare, default_store
from streamscope.tune.signals import START_WAITS
from streamscope.tune.target import TargetInfo

#: The categories the tuner reads metrics of (the wait, its split, downloads and the cache).
METRIC_LEVEL = "chunk"
#: Version of the ``autotune`` entry of a loader's state_dict.
STATE_VERSION = 1
#: Epochs whose exact times the target keeps (the tuner reads the last few).
RECORDS = 64


def _members(ds: Any) -> list[Any]:
    members = getattr(ds, "_datasets", None)
    return list(members) if members else [ds]


def target_info(loader: Any) -> TargetInfo:
    """What the tuner needs to know of a loader's data (chunk sizes, the cache) and of the loader."""
    ds = loader.dataset
    chunk_max = total = items = n = 0
    uses_cache = False
    cache_dir = None
    for d in _members(ds):
        chunks = getattr(d, "chunks", None) or []
        for c in chunks:
            b = int(c.get("chunk_bytes") or 0)
            chunk_max = max(chunk_max, b)
            total += b
            items += int(c.get("chunk_size") or 0)
            n += 1
        if (getattr(d, "remote", False) or getattr(d, "compression", None)) and getattr(d, "_plain_dir", None) is None:
            uses_cache = True
            cache_dir = cache_dir or getattr(d, "_cache_root", None)
    bs = loader.batch_size
    batch = int(sum(bs)) if isinstance(bs, (list, tuple)) else int(bs or 1)
    own = getattr(ds, "tune_info", None)  # a raw-file dataset says what it is (engine.mapped, raw.dataset)
    if own is not None:
        fields = {k: v for k, v in own().items() if k in TargetInfo.__dataclass_fields__}
        return TargetInfo(batch_size=batch, persistent_workers=bool(loader.persistent_workers), **fields)
    return TargetInfo(
        batch_size=batch,
        samples_per_chunk=items / n if n else 0.0,
        chunk_bytes=chunk_max,
        dataset_bytes=total,
        uses_cache=uses_cache,
        cache_dir=cache_dir,
        kind="chunks",
        persistent_workers=bool(loader.persistent_workers),
    )


class LoaderTarget:
    """A StreamingDataLoader as the tuner sees it (held weakly: the tuner never keeps a loader alive)."""

    def __init__(self, loader: Any) -> None:
        self._loader = weakref.ref(loader)
        self.info = target_info(loader)
        self._epochs = 0
        self.pending_workers: int | None = None
        # progress(): batches counted across epochs, and the ring's waits summed (tuner thread only)
        self._final = 0  # the last epoch's batch count when the next began (set before _epochs moves)
        self._seen_epoch = 0
        self._prev = 0
        self._batches = 0
        self._ring: Any = None
        self._ring_seen = 0
        self._wait_ns = 0
        # starts(): the waits among the first START_WAITS per worker of each iteration (the ring's generations)
        self._gens: list[tuple[int, int]] = []  # (first wait, start waits) of the last two generations seen
        self._start_n = 0
        self._start_ns = 0
        self._start_open_ns = 0  # the wait under way, when it is a start's (a first batch's long wait)
        # epoch -> (seconds from its iter() to the loop's last batch of it, its batches): exact, where the tuner's
        # windows would share an epoch's edges with the next (epochs of a few seconds)
        self._started = 0.0
        self._records: dict[int, tuple[float, int]] = {}

    def _get(self) -> Any:
        loader = self._loader()
        if loader is None:
            raise ReferenceError("the loader is gone")
        return loader

    def board(self) -> Any:
        return self._get().knobs

    def workers(self) -> int:
        n = self.pending_workers
        return int(n) if n is not None else int(self._get().num_workers)

    def running_workers(self) -> int:
        return int(self._get().num_workers)

    def request_workers(self, n: int) -> None:
        self.pending_workers = int(n)

    def epoch(self) -> int:
        return self._epochs

    def epoch_record(self, e: int) -> tuple[float, int] | None:
        return self._records.get(e)

    def iterating(self) -> bool:
        loader = self._loader()
        return loader is not None and getattr(loader, "_live", None) is not None

    def progress(self) -> tuple[int, float]:
        """Batches handed to the loop and its total wait, live: the loader's batch count, and the ring of the
        loop's waits (``recording.waits.WaitRing``: every complete wait, and the one under way so far)."""
        loader = self._get()
        live = getattr(loader, "_live", None)
        if self._seen_epoch != self._epochs:
            self._batches += max(0, self._final - self._prev)
            self._prev = int(live[0]) if live is not None else 0  # the new epoch's start position
            self._seen_epoch = self._epochs
        v = int(loader.batches_consumed)
        if v > self._prev:
            self._batches += v - self._prev
            self._prev = v
        ring = getattr(getattr(loader, "_observer", None), "wait_ring", None)  # the loader observer's
        if ring is None:  # no wait split (metrics without the stall category): the merged metric, a tick late
            return self._batches, float(ev.metrics_view().value(M.LOADER_WAIT))
        if ring is not self._ring:
            self._ring, self._ring_seen, self._gens = ring, 0, []
        _gen, first, workers = ring.generation()
        if not self._gens or self._gens[-1][0] != first:
            # the iteration before ends where this one begins; one read after an iteration's start misses nothing
            # (its waits are still in the ring), one a whole iteration late leaves that iteration's start uncounted
            prev = [(f, min(n, first - f)) for f, n in self._gens[-1:]]
            self._gens = [*prev, (first, START_WAITS * max(1, workers))]
        count, open_since = ring.head()
        if count > self._ring_seen:
            begins, ends = ring.waits(self._ring_seen, count)
            waits = ends - begins
            self._wait_ns += int(waits.sum())
            idx = np.arange(count - len(waits), count)
            for g_first, n in self._gens:
                at = (idx >= g_first) & (idx < g_first + n)
                self._start_n += int(at.sum())
                self._start_ns += int(waits[at].sum())
            self._ring_seen = count
        partial = max(0, time.monotonic_ns() - open_since) if open_since else 0
        # the wait under way counts where the complete ones do: in the starts when it is wait `count` of a start
        opening = any(f <= count < f + n for f, n in self._gens)
        self._start_open_ns = partial if opening else 0
        return self._batches, (self._wait_ns + partial) * 1e-9

    def starts(self) -> tuple[int, float]:
        return self._start_n, (self._start_ns + self._start_open_ns) * 1e-9


class LoaderAutotune:
    """The tuner of one loader (what :func:`attach` returns; see :class:`streamscope._core.hooks.LoaderTuner`)."""

    def __init__(self, loader: Any) -> None:
        self.target = LoaderTarget(loader)
        self.tuner = Tuner(self.target, ranks=rank_share())
        self._finalizer = weakref.finalize(loader, self.tuner.stop, 0.0)

    def before_epoch(self) -> None:
        loader = self.target._get()
        n = self.target.pending_workers
        self.target.pending_workers = None
        if n is not None and n != loader.num_workers:
            loader._retune_workers(n)
        self.target._final = int(loader.batches_consumed)  # before the epoch count moves (progress() reads both)
        self.target._epochs += 1
        self.target._started = time.monotonic()
        if not self.tuner.running and self.tuner.error is None and not self.tuner._stop.is_set():
            self.tuner.start()  # the first epoch: budgets checked (raising before any batch), then tuning

    def after_epoch(self, batches: int) -> None:
        t = self.target
        t._records[t._epochs] = (time.monotonic() - t._started, batches)
        t._records.pop(t._epochs - RECORDS, None)

    def state_dict(self) -> dict[str, Any]:
        values = self.tuner.values()
        return {"version": STATE_VERSION, "values": values}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        values = state.get("values") if isinstance(state, dict) else None
        if isinstance(values, dict) and values:
            self.tuner.restore(values)

    def close(self) -> None:
        self.tuner.stop()

    # --- for users and tests --------------------------------------------------------------------

    @property
    def decisions(self) -> list[Any]:
        """Every tried move with its verdict (:class:`streamscope.tune.Decision`)."""
        return self.tuner.decisions

    def values(self) -> dict[str, Any]:
        """The values the tuner set and kept (``num_workers`` too)."""
        return self.tuner.values()


def rank_share(store: Any = None) -> RankShare | None:
    """The ranks' sharing (``tune/ranks.py``) when ``torch.distributed`` runs more than one rank (or ``store`` is
    given) and ``autotune_rank_every`` is not 0; None: this rank tunes alone."""
    every = int(config.get("autotune_rank_every"))
    store = store if store is not None else default_store()
    if every <= 0 or store is None:
        return None
    import torch.distributed as dist

    return RankShare(
        store, dist.get_rank(), dist.get_world_size(), every=every, tick=float(config.get("metrics_interval"))
    )


def ensure_metrics() -> None:
    """Metrics on for the categories the tuner reads, in this process and the workers it starts."""
    need = vocab.categories_for_level(METRIC_LEVEL)
    have = frozenset(recording.RECORDER.metric_cats) | frozenset(recording.RECORDER.trace_cats)
    if need <= have:
        return
    from streamscope.api.tracing import enable_metrics

    enable_metrics(categories=sorted(need | frozenset(recording.RECORDER.metric_cats)))


def attach(loader: Any) -> LoaderAutotune:
    """Tune ``loader`` (metrics switched on now; the tuner starts with its first epoch)."""
    ensure_metrics()
    return LoaderAutotune(loader)


hooks.provide("autotuner", attach)

__all__ = ["WORKERS", "LoaderAutotune", "LoaderTarget", "attach", "ensure_metrics", "rank_share", "target_info"]
