"""Knobs of raw-file datasets (StreamingRawDataset): concurrency, look-ahead, hedging, the S3 client."""

from __future__ import annotations

from streamscope._core.knob_registry import knob

__all__: list[str] = []

knob(
    "raw_concurrency",
    0,
    "requests",
    ("STREAMSCOPE_RAW_CONCURRENCY",),
    "Per-process cap on in-flight raw-file GETs. 0 = the dataset's max_concurrent_downloads, or the adaptive "
    "default from the median file size when that is None (latency-driven, per worker: see "
    "raw_adaptive_concurrency). A board value > 0 switches the adaptive limit off. Read live from the dataset's "
    "knob board at every batch.",
    live=True,
    bounds=(0, 1024),
    step=1,
    unset=0,
)
knob(
    "raw_prefetch",
    -1,
    "items",
    ("STREAMSCOPE_RAW_PREFETCH",),
    "Per-worker look-ahead of raw-file items. -1 = the dataset's max_prefetch (capped so all DataLoader workers "
    "together hold about 64 items); another value is each worker's depth as it is; 0 = off. Read live from the "
    "dataset's knob board at every batch.",
    live=True,
    bounds=(-1, 4096),
    step=1,
    unset=-1,
)
knob(
    "raw_lookahead_when_left",
    -1,
    "items",
    ("STREAMSCOPE_RAW_LOOKAHEAD_WHEN_LEFT",),
    "Raw-file look-ahead GETs start once at most this many items of the current batch are still in flight, "
    "so a server that answers in arrival order works on them across the next batch's round trip. -1 = the "
    "look-ahead depth; a large number = together with the batch. Read live from the dataset's knob board at "
    "every batch.",
    live=True,
    bounds=(-1, 1 << 20),
    step=1,
)
knob(
    "raw_io_threads",
    256,
    "threads",
    ("STREAMSCOPE_RAW_IO_THREADS",),
    "Upper bound on the raw-file I/O thread pool of one process (threads start only as needed).",
)
knob(
    "raw_write_source_index",
    False,
    "bool",
    ("STREAMSCOPE_RAW_WRITE_SOURCE_INDEX",),
    "Also write index.json.zstd into a LOCAL source folder (LitData does this always; streamscope only on "
    "request). Remote sources always get a copy next to the data.",
)
knob(
    "raw_min_throughput",
    25 * 1024 * 1024,
    "bytes/s",
    ("STREAMSCOPE_RAW_MIN_THROUGHPUT",),
    "Slowest per-object throughput assumed when sizing batch timeouts and hedge delays.",
)
knob(
    "raw_hedge_max_bytes",
    8 * 1024 * 1024,
    "bytes",
    ("STREAMSCOPE_RAW_HEDGE_MAX_BYTES",),
    "Objects at or above this size are not hedged whole (their ranged parts are).",
)
knob(
    "raw_adaptive_concurrency",
    True,
    "bool",
    ("STREAMSCOPE_RAW_ADAPTIVE_CONCURRENCY",),
    "When max_concurrent_downloads is None, move the raw-file GET limit with measured latency (grow while "
    "latency stays flat, shrink when it climbs) under the size-based default. False: the size-based default.",
)
knob(
    "raw_main_obstore_after",
    4,
    "batches",
    ("STREAMSCOPE_RAW_MAIN_OBSTORE_AFTER",),
    "Raw S3 reads in the MAIN process switch to the obstore client at the first multi-index batch "
    "(num_workers=0 streaming) or after this many single-item calls (faster than boto3, but DataLoader "
    "workers forked later fall back to boto3). 0 = never.",
)
knob(
    "raw_local_inline_s",
    0.001,
    "s",
    ("STREAMSCOPE_RAW_LOCAL_INLINE_S",),
    "Local files are read in the calling thread (no pool, no look-ahead) while the running average read "
    "takes less than this; slower local storage (network mounts) gets the concurrent path. 0 = never inline.",
)
