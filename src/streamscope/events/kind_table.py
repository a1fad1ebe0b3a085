"""The event kinds as data: every event streamscope records, with its Litracer name(s), category, phase and typed
fields (:class:`Kind`, :class:`Field`, one constant per kind, :data:`KINDS`). :mod:`.kinds` re-exports them next to
their emission helpers; read them there (``kinds.DOWNLOAD.cat``). Their Markdown table: :mod:`.kind_doc`.

Field meanings of the names in :data:`.vocab.FIELDS` are taken from there (one spelling, one meaning).
"""

from __future__ import annotations

from dataclasses import dataclass

from streamscope.events.vocab import FIELDS

__all__ = [
    "BACKEND",
    "BACKEND_FALLBACK",
    "BATCH",
    "BUILD_KEYS_INDEX",
    "CACHE_BYTES",
    "CACHE_WRITE",
    "CHUNKS_PER_BATCH",
    "CHUNK_WRITE",
    "CHUNK_WRITTEN",
    "COPY",
    "CRASH",
    "DATASET_UPDATE",
    "DECODE_BATCH",
    "DECOMPRESS",
    "DECRYPT",
    "DELETE",
    "DOWNLOAD",
    "DOWNLOADS_IN_FLIGHT",
    "EPOCH",
    "Field",
    "GIVE_UP",
    "HEDGE",
    "INDEX",
    "INDEX_FOUND",
    "INDEX_MERGE",
    "KINDS",
    "KEY_LOOKUP",
    "KNOB",
    "KNOBS_SEEN",
    "Kind",
    "LOCK",
    "MMAP",
    "OPTIMIZE",
    "OPTIMIZE_FN",
    "OPTIMIZE_INPUT",
    "OVERWRITE",
    "PLAN",
    "PREFETCH",
    "PREFETCH_HITS",
    "PREFETCH_SCHEDULED",
    "READ",
    "READ_FOOTER",
    "READ_ITEM",
    "READ_ROW_GROUP",
    "RESHARD",
    "RETRY",
    "SAMPLE",
    "SERIALIZE",
    "STALL",
    "STORAGE_OP",
    "SWEEP",
    "TUNER",
    "UPLOAD",
]


@dataclass(frozen=True)
class Field:
    """One field of a kind: its name, Python type (as text), whether every event of the kind has it, its meaning.

    ``end``: set in the span's body (the ``E`` carries it), not an argument of the helper.
    """

    name: str
    type: str
    required: bool
    meaning: str
    end: bool = False


@dataclass(frozen=True)
class Kind:
    """One kind of event: Litracer ``name`` (and the other ``names`` it is written under; ``"*"``: the caller names
    it), category ``cat``, phase ``ph`` (``span``, ``instant``, ``counter``, or ``series``/``bulk``/``timeline``
    for the hot-path kinds without a helper), its ``fields`` in order, and whether other fields may ride along
    (``open``)."""

    name: str
    cat: str
    ph: str
    fields: tuple[Field, ...]
    meaning: str
    names: tuple[str, ...] = ()
    open: bool = False

    @property
    def key(self) -> str:
        """``cat/name``: the kind's key in the metrics snapshots (spans, instants, gauges)."""
        return f"{self.cat}/{self.name}"

    @property
    def all_names(self) -> tuple[str, ...]:
        """``name`` and ``names``."""
        return (self.name, *self.names)

    def field(self, name: str) -> Field:
        """The field called ``name`` (KeyError when the kind has none)."""
        for f in self.fields:
            if f.name == name:
                return f
        raise KeyError(f"kind {self.name!r} ({self.cat}) has no field {name!r}")


def _f(name: str, type_: str, required: bool = False, meaning: str = "", end: bool = False) -> Field:
    """A field; its meaning is :data:`.vocab.FIELDS`'s when the name is there and none is given."""
    return Field(name, type_, required, meaning or FIELDS[name], end)


_ERR = (_f("exception", "str", True), _f("error", "str", True))

# --- epoch --------------------------------------------------------------------------------------------------------
EPOCH = Kind(
    "epoch",
    "epoch",
    "span",
    (
        _f("epoch", "int", True),
        _f("rank", "int", True, "global rank of the process"),
        _f("worker", "int", meaning="DataLoader worker id of a pass outside a StreamingDataLoader"),
        _f("batches", "int", meaning="batches of the rank's epoch (the loader's)"),
        _f("workers", "int"),
    ),
    "one epoch of a StreamingDataLoader (name epoch), or one pass over a worker's batches outside a loader "
    "(name epoch, combined or parallel, with the worker)",
    ("combined", "parallel"),
)
PLAN = Kind(
    "plan",
    "epoch",
    "span",
    (
        _f("epoch", "int", True),
        _f("rank", "int", True, "global rank of the process"),
        _f("world_size", "int", True, "number of ranks"),
        _f("chunks", "int", True),
    ),
    "building an epoch's plan (the chunk schedule of every rank)",
)
OPTIMIZE = Kind(
    "optimize",
    "epoch",
    "span",
    (
        _f("inputs", "int", True, "number of inputs"),
        _f("workers", "int", True, "number of workers of the job"),
        _f("url", "str", True),
        _f("node", "int", True, "node rank of this process"),
    ),
    "an optimize() or map() job on this node (names optimize, map)",
    ("map",),
)

# --- batch, stall, sample: the per-batch and per-sample kinds (Series, Timeline, bulk, each; no helper) --------
BATCH = Kind(
    "batch",
    "batch",
    "timeline",
    (_f("batch", "int", True), _f("epoch", "int", True), _f("rank", "int", True, "global rank of the process")),
    "the time the training loop held a batch (the loader's timeline)",
)
STALL = Kind(
    "stall",
    "stall",
    "timeline",
    (_f("batch", "int", True, "the batch the loop waited for"), _f("epoch", "int", True)),
    "the training loop's wait for its next batch (the loader's timeline)",
)
SAMPLE = Kind(
    "sample",
    "sample",
    "bulk",
    (_f("chunk", "int", True), _f("item", "int", True), _f("batch", "int"), _f("batched", "int")),
    "one sample decoded (ev.bulk for a batch decoded column-wise, ev.each per sample)",
)
READ_ITEM = Kind(
    "read_item",
    "sample",
    "span",
    (_f("chunk", "int", True), _f("index", "int", True)),
    "one item read by LitData's reader face (streaming/reader.py)",
)
OPTIMIZE_FN = Kind(
    "optimize_fn", "sample", "span", (_f("input", "int", True, "input index"),), "the user's fn on one input"
)
SERIALIZE = Kind(
    "serialize",
    "sample",
    "span",
    (_f("input", "int", True, "input index"), _f("sample", "int", True, "sample index within the worker")),
    "one sample serialised into a chunk by optimize()",
)

# --- read ---------------------------------------------------------------------------------------------------------
DECODE_BATCH = Kind(
    "decode_batch",
    "read",
    "series",
    (_f("batch", "int", True), _f("items", "int", True)),
    "a worker decoding one batch (a Series)",
)
READ = Kind(
    "read",
    "read",
    "span",
    (
        _f("items", "int", meaning="items read together (a raw dataset's batch)"),
        _f("inline", "bool", meaning="True: read in the main process, not by the prefetcher"),
        _f("path", "str", meaning="the file read (a raw dataset's cached file)"),
        _f("bytes", "int"),
        _f("cached", "bool", meaning="True: read from the local cache"),
    ),
    "a raw dataset reading items (items, inline) or one cached file (path, bytes, cached)",
)
MMAP = Kind("mmap", "read", "span", (_f("file", "str", True, "base name of the chunk file"),), "mapping a chunk file")
DECRYPT = Kind(
    "decrypt",
    "read",
    "span",
    (_f("chunk", "int"), _f("file", "str", True, "base name of the chunk file")),
    "decrypting a chunk file",
)
READ_FOOTER = Kind(
    "read_footer",
    "read",
    "span",
    (_f("file", "str", True, "the Parquet file"), _f("bytes", "int", True)),
    "reading a Parquet file's footer",
)
READ_ROW_GROUP = Kind(
    "read_row_group",
    "read",
    "span",
    (
        _f("chunk", "int", True),
        _f("row_group", "int", True, "row group index"),
        _f("rows", "int", meaning="rows read", end=True),
    ),
    "reading one row group of a Parquet chunk",
)
KEY_LOOKUP = Kind(
    "key_lookup", "read", "span", (_f("key", "str", True, "the key (first 64 characters)"),), "a keyed lookup"
)
BUILD_KEYS_INDEX = Kind(
    "build_keys_index",
    "read",
    "span",
    (_f("chunks", "int", True), _f("items", "int")),
    "building the index of a keyed dataset",
)
DATASET_UPDATE = Kind(
    "dataset_update",
    "read",
    "span",
    (_f("chunks", "int", True), _f("items", "int", True)),
    "writing a dataset's pending updates",
)
INDEX_MERGE = Kind(
    "index_merge",
    "read",
    "span",
    (
        _f("files", "int", meaning="index files merged (streaming writer)"),
        _f("workers", "int", meaning="workers' index parts merged (optimize)"),
    ),
    "merging partial indexes into index.json",
)
OPTIMIZE_INPUT = Kind(
    "optimize_input", "read", "span", (_f("input", "int", True, "input index"),), "reading one input of optimize()"
)
RESHARD = Kind(
    "reshard",
    "read",
    "span",
    (
        _f("file", "str", True, "the input file"),
        _f("start", "int", True, "first row"),
        _f("end", "int", True, "end row"),
    ),
    "reading a slice of an input file (resharding readers)",
)

# --- decompress ---------------------------------------------------------------------------------------------------
DECOMPRESS = Kind(
    "decompress",
    "decompress",
    "span",
    (_f("file", "str", True, "base name of the compressed file"), _f("bytes", "int", end=True)),
    "inflating a compressed chunk",
)

# --- download -----------------------------------------------------------------------------------------------------
DOWNLOAD = Kind(
    "download",
    "download",
    "span",
    (
        _f("chunk", "int"),
        _f("url", "str", meaning="object URL with credentials removed (or a local path)"),
        _f("path", "str", meaning="a raw dataset's file (its index path)"),
        _f("bytes", "int"),
        _f("attempt", "int"),
        _f("local", "bool", meaning="True: a local file read, counted as a download"),
    ),
    "one chunk (or a raw dataset's file) fetched into the cache, LitData's meaning; storage requests nest in it",
)
STORAGE_OP = Kind(
    "get",
    "download",
    "span",
    (
        _f("op", "str", True, "the storage operation (get, get_range, head, put, download_file, ...)"),
        _f("url", "str", True),
        _f("attempt", "int", True),
        _f("status", "str", end=True),
        _f("exception", "str", end=True),
        _f("error", "str", end=True),
        _f("http_status", "int", meaning="the HTTP status of a failed request", end=True),
        _f("duration_s", "float", meaning="the attempt's duration in seconds", end=True),
    ),
    "one attempt of a storage request under the retry policy (named for its operation; extra fields ride along)",
    ("*",),
    open=True,
)
RETRY = Kind(
    "retry",
    "download",
    "instant",
    (
        _f("op", "str", True, "the storage operation"),
        _f("url", "str", True),
        _f("attempt", "int", True),
        _f("status", "str", True),
        _f("http_status", "int | None", True, "the HTTP status, None when there was none"),
        _f("exception", "str", True),
        _f("delay_s", "float", True, "backoff before the next attempt, seconds"),
    ),
    "a storage request retried",
)
GIVE_UP = Kind(
    "give_up",
    "download",
    "instant",
    (
        _f("op", "str", True, "the storage operation"),
        _f("url", "str", True),
        _f("attempt", "int", True),
        _f("status", "str", True),
        _f("http_status", "int | None", True, "the HTTP status, None when there was none"),
        _f("exception", "str", True),
        _f("elapsed_s", "float", True, "seconds since the first attempt"),
    ),
    "a storage request given up (attempts or deadline exhausted)",
)
HEDGE = Kind(
    "hedge",
    "download",
    "instant",
    (
        _f("path", "str", True, "a raw dataset's file"),
        _f("bytes", "int", True),
        _f("state", "str", True, "fired or won"),
    ),
    "a hedged second read of a slow raw file",
)
BACKEND_FALLBACK = Kind(
    "backend_fallback",
    "download",
    "instant",
    (_f("url", "str", True), _f("backend", "str", True, "the client used instead"), _f("reason", "str", True, "why")),
    "a storage client unavailable: another one used",
)
BACKEND = Kind(
    "backend",
    "download",
    "instant",
    (_f("backend", "str", True, "the client chosen"), _f("reason", "str", True, "why")),
    "a raw dataset choosing its storage client",
)
COPY = Kind(
    "copy",
    "download",
    "span",
    (_f("key", "str", True, "the object key copied"), _f("url", "str", True)),
    "an object copied when datasets are merged",
)

# --- delete -------------------------------------------------------------------------------------------------------
DELETE = Kind(
    "delete",
    "delete",
    "span",
    (_f("path", "str", True, "base name of the chunk file evicted"), _f("bytes", "int", True)),
    "a chunk evicted from the cache",
)
OVERWRITE = Kind(
    "overwrite", "delete", "span", (_f("url", "str", True),), "an output directory emptied (mode='overwrite')"
)

# --- prefetch -----------------------------------------------------------------------------------------------------
PREFETCH = Kind(
    "prefetch",
    "prefetch",
    "span",
    (_f("chunk", "int", True), _f("position", "int", True, "position in the prefetcher's schedule")),
    "a chunk fetched ahead of the reader",
)
PREFETCH_HITS = Kind(
    "prefetch",
    "prefetch",
    "instant",
    (
        _f("hits", "int", True, "items found prefetched"),
        _f("misses", "int", True, "items not prefetched"),
        _f("items", "int", True),
    ),
    "a raw dataset's batch: how many of its items the prefetcher had",
)
PREFETCH_SCHEDULED = Kind(
    "prefetch_scheduled",
    "prefetch",
    "instant",
    (_f("items", "int", True), _f("first", "int", True, "first item index scheduled")),
    "a raw dataset scheduling items ahead",
)
DOWNLOADS_IN_FLIGHT = Kind(
    "downloads_in_flight", "prefetch", "counter", (_f("value", "int", True),), "a prefetcher's downloads under way"
)

# --- lock ---------------------------------------------------------------------------------------------------------
LOCK = Kind(
    "lock",
    "lock",
    "span",
    (_f("op", "str", True), _f("count", "int")),
    "a lock operation (debug level only, as in LitData)",
    ("*",),
)

# --- crash --------------------------------------------------------------------------------------------------------
CRASH = Kind(
    "crash",
    "crash",
    "instant",
    (
        _f("chunk", "int"),
        _f("url", "str"),
        _f("worker", "int", meaning="the optimize() worker"),
        _f("input", "int", meaning="the input being processed"),
        _f("component", "str", meaning="what failed (e.g. tuner)"),
        *_ERR,
    ),
    "an exception (class and message); ev.crash records it too",
    ("*",),
)

# --- tune ---------------------------------------------------------------------------------------------------------
KNOB = Kind(
    "knob",
    "tune",
    "instant",
    (
        _f("knob", "str", True, "the knob's name"),
        _f("old", "Any", True, "its value before"),
        _f("new", "Any", True, "its value after"),
        _f("source", "str", True, "who moved it"),
        _f("reason", "str", meaning="why"),
        _f("samples", "int", meaning="latencies the governor saw"),
    ),
    "a knob value changed (named for the knob)",
    ("*",),
)
KNOBS_SEEN = Kind(
    "knobs_seen",
    "tune",
    "instant",
    (
        _f("prefetch_depth", "int", True, "the depth used from now on"),
        _f("download_concurrency", "int", True, "the concurrency used from now on"),
        _f("prefetch_head_first", "bool", True, "the order used from now on"),
    ),
    "a prefetcher taking the board's new values",
)
TUNER = Kind("tuner", "tune", "instant", (), "an auto-tuner event (decision, settled, ...; its fields)", ("*",), True)
CHUNKS_PER_BATCH = Kind(
    "plan_chunks_per_batch",
    "tune",
    "counter",
    (_f("epoch", "int", True), _f("rank", "int", True, "global rank of the process"), _f("value", "float", True)),
    "mean chunks a batch of the plan touches",
)

# --- cache --------------------------------------------------------------------------------------------------------
CACHE_BYTES = Kind("cache_bytes", "cache", "counter", (_f("value", "int", True),), "bytes of chunks in the cache")
INDEX = Kind(
    "index",
    "cache",
    "span",
    (_f("source", "str", True, "the raw source's root"), _f("files", "int", meaning="files found", end=True)),
    "a raw dataset's files listed (its index built)",
)
INDEX_FOUND = Kind(
    "index",
    "cache",
    "instant",
    (_f("where", "str", True, "local or source"), _f("files", "int", True, "files in it")),
    "a raw dataset's index found",
)
CACHE_WRITE = Kind(
    "cache_write",
    "cache",
    "span",
    (_f("path", "str", True, "the cached file"), _f("bytes", "int", True)),
    "a raw file written into the cache",
)
SWEEP = Kind(
    "sweep",
    "cache",
    "instant",
    (_f("path", "str", True, "the cache directory"), _f("files", "int", True, "files removed")),
    "stale cached files removed",
)

# --- upload, write ------------------------------------------------------------------------------------------------
UPLOAD = Kind(
    "upload",
    "upload",
    "span",
    (_f("file", "str", True, "the file published"), _f("bytes", "int", True), _f("rank", "int", meaning="worker rank")),
    "a chunk (or index) published to the output store",
)
CHUNK_WRITE = Kind(
    "chunk_write",
    "write",
    "span",
    (_f("rank", "int", True, "worker rank"), _f("final", "bool", meaning="True: the worker's last chunk")),
    "closing and flushing a chunk file",
)
CHUNK_WRITTEN = Kind(
    "chunk_write",
    "write",
    "instant",
    (_f("file", "str", True, "the chunk file"), _f("bytes", "int", True), _f("items", "int", True)),
    "a chunk file closed",
)

#: Every kind, by constant name.
KINDS: dict[str, Kind] = {k: v for k, v in globals().items() if isinstance(v, Kind)}
