"""Knobs of the chunk cache: where it lives, its budget, prefetching and downloads."""

from __future__ import annotations

import os

from streamscope._core.knob_registry import get, knob
from streamscope._core.units import cache_budget

__all__: list[str] = []


def _cache_size(raw: str) -> int:
    # "auto" and shares of the free disk are measured where the cache_dir knob puts the cache
    return cache_budget(raw, str(get("cache_dir")))


knob(
    "cache_dir",
    os.path.join(os.path.expanduser("~"), ".lightning", "chunks"),
    "path",
    ("STREAMSCOPE_CACHE_DIR", "LITDATA_CACHE_DIR"),
    "Default root of the local chunk cache for remote datasets.",
)
knob(
    "prefetch_depth",
    0,
    "chunks",
    ("STREAMSCOPE_PREFETCH_DEPTH",),
    "Chunks fetched ahead of the reader. 0 = each dataset's max_pre_download (its board starts there). Read live "
    "from the dataset's knob board each prefetch loop.",
    live=True,
    bounds=(0, 4096),
    step=1,
    unset=0,
)
knob(
    "download_concurrency",
    4,
    "chunks",
    ("STREAMSCOPE_DOWNLOAD_CONCURRENCY",),
    "Chunks one reader (DataLoader worker) fetches at once from storage, within prefetch_depth (at most 32 "
    "threads). Read live from the dataset's knob board.",
    live=True,
    bounds=(1, 32),
    step=1,
)
knob(
    "prefetch_head_first",
    True,
    "flag",
    ("STREAMSCOPE_PREFETCH_HEAD_FIRST",),
    "While the reader waits for a chunk that is still downloading, start no download of a later chunk (the "
    "waited-for chunk gets the bandwidth; downloads already running go on). Read live from the dataset's knob board.",
    live=True,
    bounds=(False, True),
    step=1,
)
knob(
    "chunk_wait_timeout",
    120.0,
    "s",
    ("STREAMSCOPE_CHUNK_WAIT_TIMEOUT",),
    "Longest a reader waits for a chunk download (or another process's download lock) before raising.",
)
knob(
    "max_cache_size",
    "auto",
    "bytes",
    ("STREAMSCOPE_MAX_CACHE_SIZE", "MAX_CACHE_SIZE"),
    "Budget of the chunk cache: a dataset's max_cache_size argument (the environment variables win over it, as "
    'in LitData): a size ("100GB"), a share of the free disk ("0.9"), or "auto" (what max_cache_size=None means: '
    "75 % of the free disk, leaving 50 GB free; from the environment, measured on the cache_dir knob's volume). "
    "Eviction reads it live from the dataset's knob board.",
    _cache_size,
    live=True,
    kind=int,
    bounds=(0, 2**60),
    step=2**26,
    lazy_default=True,
)
knob(
    "open_chunks_max",
    64,
    "chunks",
    ("STREAMSCOPE_OPEN_CHUNKS_MAX",),
    "Most chunk files one reader keeps mmapped at once (least recently used are closed first).",
)
