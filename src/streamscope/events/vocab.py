"""The event vocabulary: categories, levels, colours and the typed fields events carry.

Levels select categories. LitData's sets are kept for its nine categories; the four streamscope categories
are placed where their volume fits:

========  ============================================================================
level     categories
========  ============================================================================
off       (none)
batch     epoch, batch, crash, stall, tune
chunk     batch + download, read, delete, decompress, prefetch, cache, upload, write   (the default)
sample    chunk + sample
debug     every category (adds lock)
========  ============================================================================

``stall`` (the training loop waited for data) and ``tune`` (an auto-tuner decision) are rare and explain a
run at the coarsest level, so they are in ``batch``. ``prefetch`` and ``cache`` happen once per chunk, so
they are in ``chunk``. ``lock`` stays debug-only, as in LitData.

``upload`` and ``write`` are the write path's (``optimize``/``map``): publishing a chunk to the output store, and
closing/flushing a chunk file. They have categories of their own so that ``download`` means chunk downloads and
``read`` the read path's reads, as in LitData; they happen once per chunk, so they are in ``chunk``.
"""

from __future__ import annotations

from collections.abc import Iterable

from streamscope._core.errors import TraceConfigError

__all__ = [
    "CATEGORIES",
    "CNAMES",
    "ENV_FIELDS",
    "FIELDS",
    "LEVELS",
    "categories_for_level",
    "parse_categories",
    "resolve",
]


CATEGORIES: tuple[str, ...] = (
    "epoch",
    "batch",
    "sample",
    "download",
    "read",
    "decompress",
    "delete",
    "prefetch",
    "lock",
    "crash",
    "stall",
    "tune",
    "cache",
    "upload",
    "write",
)

_BATCH = frozenset({"epoch", "batch", "crash", "stall", "tune"})
_CHUNK = _BATCH | {"download", "read", "delete", "decompress", "prefetch", "cache", "upload", "write"}
_SAMPLE = _CHUNK | {"sample"}

LEVELS: dict[str, frozenset[str]] = {
    "off": frozenset(),
    "batch": _BATCH,
    "chunk": _CHUNK,
    "sample": _SAMPLE,
    "debug": frozenset(CATEGORIES),
}

#: Chrome trace colour per category (LitData's for its nine categories).
CNAMES: dict[str, str] = {
    "epoch": "memory_dump",
    "batch": "thread_state_runnable",
    "download": "rail_load",
    "read": "good",
    "delete": "rail_animate",
    "decompress": "cq_build_attempt_running",
    "sample": "generic_work",
    "lock": "thread_state_sleeping",
    "crash": "terrible",
    "prefetch": "rail_idle",
    "stall": "bad",
    "tune": "rail_response",
    "cache": "thread_state_iowait",
    "upload": "olive",
    "write": "yellow",
}

#: Typed fields call sites use (name -> meaning). Other fields are allowed; these keep one spelling.
FIELDS: dict[str, str] = {
    "chunk": "chunk index (int) within the dataset",
    "chunks": "number of chunks (int)",
    "index": "global sample index (int)",
    "item": "item index (int) within its chunk",
    "batched": (
        "on sample events decoded together in one vectorised call: how many (int). The event's ts/dur are "
        "then an even share of the call's measured interval, not a per-sample measurement"
    ),
    "epoch": "epoch number (int): the loader's current_epoch, 1 for the first epoch (LitData counts so)",
    "batch": "batch number within the epoch (int, 0-based)",
    "bytes": "payload size in bytes (int); summed into the bytes metric of the span",
    "size": "item count of an interval (int), LitData's meaning for read spans",
    "items": "item count (int)",
    "attempt": "retry attempt (int, 1-based)",
    "status": "outcome: ok, retry, error, hit, miss, evict",
    "url": "object URL with credentials removed",
    "op": "operation name (str), e.g. increment/decrement for lock spans",
    "count": "reference count (int)",
    "exception": "exception class name (str) on crash instants and on spans that ended by an exception",
    "error": "'Type: message' of the exception (str)",
    "aborted": "1 on an E the recorder wrote for a span its process never closed (exit, kill)",
    "value": "counter value (number) of a C event",
    "workers": (
        "the loader's num_workers (int), on its epoch event; 0 means the loop decodes its batches itself, so its "
        "stalls are decoding (the stall report counts them so)"
    ),
}

#: Keys of the rank/worker context appended to every Litracer line (computed once per process).
ENV_FIELDS: tuple[str, ...] = (
    "dist_world_size",
    "dist_global_rank",
    "dist_num_nodes",
    "worker_world_size",
    "worker_rank",
)


def categories_for_level(level: str) -> frozenset[str]:
    """The categories of ``level``.

    Raises:
        TraceConfigError: (a ``ValueError``) when ``level`` is not one of :data:`LEVELS`.
    """
    key = str(level).strip().lower()
    try:
        return LEVELS[key]
    except KeyError:
        raise TraceConfigError(f"unknown trace level {level!r}; valid levels: {', '.join(LEVELS)}") from None


def parse_categories(cats: str | Iterable[str]) -> frozenset[str]:
    """Validate a comma list or iterable of category names.

    Raises:
        TraceConfigError: naming every unknown category and listing the valid ones.
    """
    parts = cats.split(",") if isinstance(cats, str) else list(cats)
    out = {str(p).strip().lower() for p in parts}
    out.discard("")
    unknown = sorted(out - set(CATEGORIES))
    if unknown:
        raise TraceConfigError(
            f"unknown trace categor{'y' if len(unknown) == 1 else 'ies'} {', '.join(map(repr, unknown))}; "
            f"valid categories: {', '.join(CATEGORIES)}"
        )
    return frozenset(out)


def resolve(level: str | None, categories: str | Iterable[str] | None) -> frozenset[str]:
    """Categories selected by an explicit category list (wins when non-empty) or else by ``level``."""
    if categories is not None and not (isinstance(categories, str) and not categories.strip()):
        return parse_categories(categories)
    return categories_for_level(level or "off")
