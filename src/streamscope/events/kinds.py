"""Event kinds: every event streamscope records, as a constant with its Litracer name(s), category and typed fields,
and one emission helper per kind.

A kind is what a Litracer line means: its name and category (which never change meaning: new ones are additive) and
the fields it carries. Call sites emit through the helpers (``kinds.download(chunk=i, url=url)``), consumers look
kinds up by constant (``kinds.DOWNLOAD.cat``, ``(kinds.BATCH.name, kinds.BATCH.cat)``) instead of spelling strings.

* A helper does what ``ev.span`` / ``ev.instant`` / ``ev.counter`` does with the kind's name and category: a span
  helper returns the same object (the null span when the category is inactive: one membership test, nothing
  else), the dict it yields may be updated in the body (fields marked "end" are set there).
* Optional fields (``None``) are left out of the event, so a line carries only what its site knows; the fields
  that are present are written in the kind's order.
* Per-sample and per-batch kinds recorded by ``Series``, ``Timeline``, ``bulk`` and ``each`` (``SAMPLE``,
  ``DECODE_BATCH``, ``BATCH``, ``STALL``) have constants, no helper: their hot paths stay as they are.
* A kind whose name the caller chooses (a knob, a storage operation, a tuner event) lists ``"*"`` in ``names``.

The constants are defined in :mod:`.kind_table` (the kinds as data) and re-exported here.
"""

from __future__ import annotations

from typing import Any

from streamscope.events import counter as _counter
from streamscope.events import instant as _instant
from streamscope.events import span as _span
from streamscope.events import span_since as _span_since
from streamscope.events.bus import ACTIVE, NULL_SPAN, Span, record
from streamscope.events.kind_table import (
    BACKEND,
    BACKEND_FALLBACK,
    BATCH,
    BUILD_KEYS_INDEX,
    CACHE_BYTES,
    CACHE_WRITE,
    CHUNK_WRITE,
    CHUNK_WRITTEN,
    CHUNKS_PER_BATCH,
    COPY,
    CRASH,
    DATASET_UPDATE,
    DECODE_BATCH,
    DECOMPRESS,
    DECRYPT,
    DELETE,
    DOWNLOAD,
    DOWNLOADS_IN_FLIGHT,
    EPOCH,
    GIVE_UP,
    HEDGE,
    INDEX,
    INDEX_FOUND,
    INDEX_MERGE,
    KEY_LOOKUP,
    KINDS,
    KNOB,
    KNOBS_SEEN,
    LOCK,
    MMAP,
    OPTIMIZE,
    OPTIMIZE_FN,
    OPTIMIZE_INPUT,
    OVERWRITE,
    PLAN,
    PREFETCH,
    PREFETCH_HITS,
    PREFETCH_SCHEDULED,
    READ,
    READ_FOOTER,
    READ_ITEM,
    READ_ROW_GROUP,
    RESHARD,
    RETRY,
    SAMPLE,
    SERIALIZE,
    STALL,
    STORAGE_OP,
    SWEEP,
    TUNER,
    UPLOAD,
    Field,
    Kind,
)

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
    "backend",
    "backend_fallback",
    "build_keys_index",
    "cache_bytes",
    "cache_write",
    "chunk_write",
    "chunk_written",
    "chunks_per_batch",
    "copy",
    "crash",
    "dataset_update",
    "decompress",
    "decrypt",
    "delete",
    "download",
    "downloads_in_flight",
    "epoch",
    "give_up",
    "hedge",
    "index",
    "index_found",
    "index_merge",
    "key_lookup",
    "knob",
    "knobs_seen",
    "lock",
    "mmap",
    "optimize",
    "optimize_fn",
    "optimize_input",
    "overwrite",
    "plan",
    "prefetch",
    "prefetch_hits",
    "prefetch_scheduled",
    "read",
    "read_footer",
    "read_item",
    "read_row_group",
    "reshard",
    "retry",
    "serialize",
    "storage_op",
    "sweep",
    "tuner",
    "upload",
]


# --- the helpers ----------------------------------------------------------------------------------------------------
# Each tests its category first (the only cost when it is inactive), then drops the optional fields not given.


def _given(f: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in f.items() if v is not None}


def epoch(
    *,
    epoch: int,
    rank: int,
    worker: int | None = None,
    batches: int | None = None,
    workers: int | None = None,
    name: str = "epoch",
    t0: int | None = None,
) -> Span | Any:
    """:data:`EPOCH` span; with ``t0`` (an earlier ``ev.now()``) it begins then (``ev.span_since``)."""
    if "epoch" not in ACTIVE:
        return NULL_SPAN
    f = _given({"epoch": epoch, "rank": rank, "worker": worker, "batches": batches, "workers": workers})
    return _span(name, "epoch", **f) if t0 is None else _span_since(t0, name, "epoch", **f)


def plan(*, epoch: int, rank: int, world_size: int, chunks: int) -> Span | Any:
    """:data:`PLAN` span."""
    if "epoch" not in ACTIVE:
        return NULL_SPAN
    return _span("plan", "epoch", epoch=epoch, rank=rank, world_size=world_size, chunks=chunks)


def optimize(name: str, *, inputs: int, workers: int, url: str, node: int) -> Span | Any:
    """:data:`OPTIMIZE` span (``name``: optimize or map)."""
    if "epoch" not in ACTIVE:
        return NULL_SPAN
    return _span(name, "epoch", inputs=inputs, workers=workers, url=url, node=node)


def read_item(*, chunk: int, index: int) -> Span | Any:
    """:data:`READ_ITEM` span."""
    if "sample" not in ACTIVE:
        return NULL_SPAN
    return _span("read_item", "sample", chunk=chunk, index=index)


def optimize_fn(*, input: int) -> Span | Any:
    """:data:`OPTIMIZE_FN` span."""
    if "sample" not in ACTIVE:
        return NULL_SPAN
    return _span("optimize_fn", "sample", input=input)


def serialize(*, input: int, sample: int) -> Span | Any:
    """:data:`SERIALIZE` span."""
    if "sample" not in ACTIVE:
        return NULL_SPAN
    return _span("serialize", "sample", input=input, sample=sample)


def read(
    *,
    items: int | None = None,
    inline: bool | None = None,
    path: str | None = None,
    bytes: int | None = None,
    cached: bool | None = None,
) -> Span | Any:
    """:data:`READ` span."""
    if "read" not in ACTIVE:
        return NULL_SPAN
    return _span(
        "read", "read", **_given({"items": items, "inline": inline, "path": path, "bytes": bytes, "cached": cached})
    )


def mmap(*, file: str) -> Span | Any:
    """:data:`MMAP` span."""
    if "read" not in ACTIVE:
        return NULL_SPAN
    return _span("mmap", "read", file=file)


def decrypt(*, file: str, chunk: int | None = None) -> Span | Any:
    """:data:`DECRYPT` span."""
    if "read" not in ACTIVE:
        return NULL_SPAN
    return _span("decrypt", "read", **_given({"chunk": chunk, "file": file}))


def read_footer(*, file: str, bytes: int) -> Span | Any:
    """:data:`READ_FOOTER` span."""
    if "read" not in ACTIVE:
        return NULL_SPAN
    return _span("read_footer", "read", file=file, bytes=bytes)


def read_row_group(*, chunk: int, row_group: int) -> Span | Any:
    """:data:`READ_ROW_GROUP` span (set ``rows`` in the body)."""
    if "read" not in ACTIVE:
        return NULL_SPAN
    return _span("read_row_group", "read", chunk=chunk, row_group=row_group)


def key_lookup(*, key: str) -> Span | Any:
    """:data:`KEY_LOOKUP` span."""
    if "read" not in ACTIVE:
        return NULL_SPAN
    return _span("key_lookup", "read", key=key)


def build_keys_index(*, chunks: int, items: int | None = None) -> Span | Any:
    """:data:`BUILD_KEYS_INDEX` span."""
    if "read" not in ACTIVE:
        return NULL_SPAN
    return _span("build_keys_index", "read", **_given({"chunks": chunks, "items": items}))


def dataset_update(*, chunks: int, items: int) -> Span | Any:
    """:data:`DATASET_UPDATE` span."""
    if "read" not in ACTIVE:
        return NULL_SPAN
    return _span("dataset_update", "read", chunks=chunks, items=items)


def index_merge(*, files: int | None = None, workers: int | None = None) -> Span | Any:
    """:data:`INDEX_MERGE` span."""
    if "read" not in ACTIVE:
        return NULL_SPAN
    return _span("index_merge", "read", **_given({"files": files, "workers": workers}))


def optimize_input(*, input: int) -> Span | Any:
    """:data:`OPTIMIZE_INPUT` span."""
    if "read" not in ACTIVE:
        return NULL_SPAN
    return _span("optimize_input", "read", input=input)


def reshard(*, file: str, start: int, end: int) -> Span | Any:
    """:data:`RESHARD` span."""
    if "read" not in ACTIVE:
        return NULL_SPAN
    return _span("reshard", "read", file=file, start=start, end=end)


def decompress(*, file: str) -> Span | Any:
    """:data:`DECOMPRESS` span (set ``bytes`` in the body)."""
    if "decompress" not in ACTIVE:
        return NULL_SPAN
    return _span("decompress", "decompress", file=file)


def download(
    *,
    chunk: int | None = None,
    url: str | None = None,
    path: str | None = None,
    bytes: int | None = None,
    attempt: int | None = None,
    local: bool | None = None,
) -> Span | Any:
    """:data:`DOWNLOAD` span (set ``bytes`` in the body when it is known only then)."""
    if "download" not in ACTIVE:
        return NULL_SPAN
    f = _given({"chunk": chunk, "url": url, "path": path, "bytes": bytes, "attempt": attempt, "local": local})
    return _span("download", "download", **f)


def storage_op(name: str, *, op: str, url: str, attempt: int, **extra: Any) -> Span | Any:
    """:data:`STORAGE_OP` span (``name`` defaults to ``op`` at the caller; ``extra`` fields ride along)."""
    if "download" not in ACTIVE:
        return NULL_SPAN
    return _span(name, "download", op=op, url=url, attempt=attempt, **extra)


def retry(
    *, op: str, url: str, attempt: int, status: str, http_status: int | None, exception: str, delay_s: float
) -> None:
    """:data:`RETRY` instant."""
    if "download" in ACTIVE:
        _instant(
            "retry",
            "download",
            op=op,
            url=url,
            attempt=attempt,
            status=status,
            http_status=http_status,
            exception=exception,
            delay_s=delay_s,
        )


def give_up(
    *, op: str, url: str, attempt: int, status: str, http_status: int | None, exception: str, elapsed_s: float
) -> None:
    """:data:`GIVE_UP` instant."""
    if "download" in ACTIVE:
        _instant(
            "give_up",
            "download",
            op=op,
            url=url,
            attempt=attempt,
            status=status,
            http_status=http_status,
            exception=exception,
            elapsed_s=elapsed_s,
        )


def hedge(*, path: str, bytes: int, state: str) -> None:
    """:data:`HEDGE` instant."""
    if "download" in ACTIVE:
        _instant("hedge", "download", path=path, bytes=bytes, state=state)


def backend_fallback(*, url: str, backend: str, reason: str) -> None:
    """:data:`BACKEND_FALLBACK` instant."""
    if "download" in ACTIVE:
        _instant("backend_fallback", "download", url=url, backend=backend, reason=reason)


def backend(*, backend: str, reason: str) -> None:
    """:data:`BACKEND` instant."""
    if "download" in ACTIVE:
        _instant("backend", "download", backend=backend, reason=reason)


def copy(*, key: str, url: str) -> Span | Any:
    """:data:`COPY` span."""
    if "download" not in ACTIVE:
        return NULL_SPAN
    return _span("copy", "download", key=key, url=url)


def delete(*, path: str, bytes: int) -> Span | Any:
    """:data:`DELETE` span."""
    if "delete" not in ACTIVE:
        return NULL_SPAN
    return _span("delete", "delete", path=path, bytes=bytes)


def overwrite(*, url: str) -> Span | Any:
    """:data:`OVERWRITE` span."""
    if "delete" not in ACTIVE:
        return NULL_SPAN
    return _span("overwrite", "delete", url=url)


def prefetch(*, chunk: int, position: int) -> Span | Any:
    """:data:`PREFETCH` span."""
    if "prefetch" not in ACTIVE:
        return NULL_SPAN
    return _span("prefetch", "prefetch", chunk=chunk, position=position)


def prefetch_hits(*, hits: int, misses: int, items: int) -> None:
    """:data:`PREFETCH_HITS` instant."""
    if "prefetch" in ACTIVE:
        _instant("prefetch", "prefetch", hits=hits, misses=misses, items=items)


def prefetch_scheduled(*, items: int, first: int) -> None:
    """:data:`PREFETCH_SCHEDULED` instant."""
    if "prefetch" in ACTIVE:
        _instant("prefetch_scheduled", "prefetch", items=items, first=first)


def downloads_in_flight(value: int) -> None:
    """:data:`DOWNLOADS_IN_FLIGHT` counter."""
    if "prefetch" in ACTIVE:
        _counter("downloads_in_flight", "prefetch", value)


def lock(name: str, *, op: str, count: int | None = None) -> Span | Any:
    """:data:`LOCK` span."""
    if "lock" not in ACTIVE:
        return NULL_SPAN
    return _span(name, "lock", **_given({"op": op, "count": count}))


def crash(
    exc: BaseException,
    name: str = "crash",
    *,
    chunk: int | None = None,
    url: str | None = None,
    worker: int | None = None,
    input: int | None = None,
    component: str | None = None,
    max_error: int = 0,
) -> None:
    """:data:`CRASH` instant for ``exc`` (class, ``Type: message``, cut to ``max_error`` characters when > 0), no
    traceback printed (``ev.crash`` prints one)."""
    if "crash" in ACTIVE:
        err = f"{type(exc).__name__}: {exc}"
        f = _given({"chunk": chunk, "url": url, "worker": worker, "input": input, "component": component})
        f["exception"] = type(exc).__name__
        f["error"] = err[:max_error] if max_error > 0 else err
        record("I", name, "crash", f)


def knob(
    name: str,
    *,
    old: Any,
    new: Any,
    source: str,
    reason: str | None = None,
    samples: int | None = None,
) -> None:
    """:data:`KNOB` instant named for knob ``name`` (a ``reason`` of ``""`` is left out too)."""
    if "tune" in ACTIVE:
        f = {"knob": name, "old": old, "new": new, "source": source}
        if reason:
            f["reason"] = reason
        if samples is not None:
            f["samples"] = samples
        _instant(name, "tune", **f)


def knobs_seen(*, prefetch_depth: int, download_concurrency: int, prefetch_head_first: bool) -> None:
    """:data:`KNOBS_SEEN` instant."""
    if "tune" in ACTIVE:
        _instant(
            "knobs_seen",
            "tune",
            prefetch_depth=prefetch_depth,
            download_concurrency=download_concurrency,
            prefetch_head_first=prefetch_head_first,
        )


def tuner(name: str, fields: dict[str, Any]) -> None:
    """:data:`TUNER` instant ``name`` with ``fields`` (the tuner's events carry what they decide)."""
    if "tune" in ACTIVE:
        _instant(name, "tune", **fields)


def chunks_per_batch(value: float, *, epoch: int, rank: int) -> None:
    """:data:`CHUNKS_PER_BATCH` counter."""
    if "tune" in ACTIVE:
        _counter("plan_chunks_per_batch", "tune", value, epoch=epoch, rank=rank)


def cache_bytes(value: int) -> None:
    """:data:`CACHE_BYTES` counter."""
    if "cache" in ACTIVE:
        _counter("cache_bytes", "cache", value)


def index(*, source: str) -> Span | Any:
    """:data:`INDEX` span (set ``files`` in the body)."""
    if "cache" not in ACTIVE:
        return NULL_SPAN
    return _span("index", "cache", source=source)


def index_found(*, where: str, files: int) -> None:
    """:data:`INDEX_FOUND` instant."""
    if "cache" in ACTIVE:
        _instant("index", "cache", where=where, files=files)


def cache_write(*, path: str, bytes: int) -> Span | Any:
    """:data:`CACHE_WRITE` span."""
    if "cache" not in ACTIVE:
        return NULL_SPAN
    return _span("cache_write", "cache", path=path, bytes=bytes)


def sweep(*, path: str, files: int) -> None:
    """:data:`SWEEP` instant."""
    if "cache" in ACTIVE:
        _instant("sweep", "cache", path=path, files=files)


def upload(*, file: str, bytes: int, rank: int | None = None) -> Span | Any:
    """:data:`UPLOAD` span."""
    if "upload" not in ACTIVE:
        return NULL_SPAN
    return _span("upload", "upload", **_given({"file": file, "bytes": bytes, "rank": rank}))


def chunk_write(*, rank: int, final: bool | None = None) -> Span | Any:
    """:data:`CHUNK_WRITE` span."""
    if "write" not in ACTIVE:
        return NULL_SPAN
    return _span("chunk_write", "write", **_given({"rank": rank, "final": final}))


def chunk_written(*, file: str, bytes: int, items: int) -> None:
    """:data:`CHUNK_WRITTEN` instant."""
    if "write" in ACTIVE:
        _instant("chunk_write", "write", file=file, bytes=bytes, items=items)
