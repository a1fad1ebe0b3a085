"""``merge_datasets``: concatenate optimized datasets into one, as LitData's function of the same name does.

Chunks are copied (never re-encoded) and renamed ``chunk-0-{n}[.{compression}].bin`` in input order, so the
merged dataset reads as the inputs one after the other. The index is written last and atomically: a merge that
fails part way leaves no ``index.json`` (and removes the chunks it copied), so it never looks complete.

Deliberate differences from LitData 0.2.68 (which checks only ``data_format`` and ``compression``):
the inputs must also agree on ``data_spec``, ``item_loader``, ``encryption`` and LitData 0.2.76's compression keys
(otherwise samples of one input would be decoded with another's layout); a 0.2.76 ``config.types`` is the inputs'
fused schema (LitData keeps the first input's); local and remote inputs/outputs may be mixed; the index is written
like ``optimize`` writes it (sorted keys, with ``updated_at``), which both engines read.

Encrypted inputs must have been written with one key (Fernet: the same saved salt): index.json records only the
algorithm and level, so a merge of datasets encrypted with different keys cannot be detected here and would be
readable only in part.
"""

from __future__ import annotations

import concurrent.futures
import os
import tempfile
import time
from collections.abc import Sequence
from typing import Any

from streamscope._core.errors import MergeDatasetsError, ObjectNotFoundError
from streamscope._core.protocols import ObjectStore
from streamscope.events import kinds
from streamscope.format.framed_write import in_file
from streamscope.format.index import INDEX_FILENAME, dumps_index, load_index
from streamscope.format.schema import fuse_schema_json
from streamscope.storage import open_store

__all__ = ["merge_datasets"]


# config fields that must agree for the chunks of every input to decode under the first input's config (a
# LitData 0.2.68 config lacks the 0.2.76 ones: null, as a 0.2.76 config of uncompressed chunks has them)
_MUST_MATCH = (
    "data_format",
    "data_spec",
    "compression",
    "compression_level",
    "compression_batch_size",
    "ipc_compression",
    "item_loader",
    "encryption",
)


def _location(d: Any) -> str:
    """The URL (or path) of a LitData-style ``Dir``, a path-like or a string."""
    if isinstance(d, (str, os.PathLike)):
        text = os.fspath(d)
        return text if "://" in text or text.startswith("local:") else os.path.abspath(text)
    url = getattr(d, "url", None) or getattr(d, "path", None)
    if not url:
        raise MergeDatasetsError(f"cannot tell where {d!r} is: give a path, a URL or a Dir with path/url")
    return _location(str(url))


def _read_index(store: ObjectStore, where: str) -> dict[str, Any] | None:
    try:
        raw = store.get(INDEX_FILENAME)
    except (ObjectNotFoundError, FileNotFoundError):
        return None
    try:
        return load_index(raw)
    except ValueError as exc:
        raise MergeDatasetsError(f"{where}/{INDEX_FILENAME}: {exc}") from None


def _chunk_name(counter: int, compression: str | None, level: str | None = None) -> str:
    """The merged name: ``.{compression}`` only for whole-file compression (framed zstd stays ``.bin``)."""
    return f"chunk-0-{counter}.{compression}.bin" if compression and not in_file(level) else f"chunk-0-{counter}.bin"


def _copy(src: ObjectStore, src_key: str, dst: ObjectStore, dst_key: str) -> int:
    """Copy one object between stores without holding it twice in memory; returns its size."""
    with kinds.copy(key=src_key, url=src.url):
        dst_path = dst.local_path(dst_key)
        if dst_path is not None:
            os.makedirs(os.path.dirname(dst_path) or ".", exist_ok=True)
            return src.download_file(src_key, dst_path)
        src_path = src.local_path(src_key)
        if src_path is not None:
            dst.upload_file(src_path, dst_key)
            return os.path.getsize(src_path)
        with tempfile.TemporaryDirectory(prefix="streamscope-merge-") as tmp:
            staged = os.path.join(tmp, "chunk")
            size = src.download_file(src_key, staged)
            dst.upload_file(staged, dst_key)
            return size


def merge_datasets(
    input_dirs: Sequence[Any],
    output_dir: Any,
    max_workers: int | None = os.cpu_count(),
    storage_options: dict[str, Any] = {},  # noqa: B006 - LitData's signature; never mutated
) -> None:
    """Merge several optimized datasets into a new one at ``output_dir``.

    Args:
        input_dirs: Two or more optimized datasets (paths, URLs or ``Dir``), read in this order.
        output_dir: Where the merged dataset goes; it must not already hold an ``index.json``.
        max_workers: Threads copying chunks (None or 0 means 1).
        storage_options: Backend options for remote inputs/outputs (the same for all of them).

    Raises:
        MergeDatasetsError: fewer than two inputs, the output among the inputs, an input without index, an
            output that already holds a dataset, or inputs whose configs disagree (names the input and field).
    """
    if len(input_dirs) == 0:
        raise MergeDatasetsError("merge_datasets needs input_dirs: got none")
    if len(input_dirs) == 1:
        raise MergeDatasetsError(f"merge_datasets needs more than one input directory, got {list(input_dirs)!r}")
    inputs = [_location(d) for d in input_dirs]
    output = _location(output_dir)
    if output in inputs:
        raise MergeDatasetsError(f"output_dir {output!r} is one of the input_dirs; merge into a new directory")
    workers = max(1, max_workers or 1)

    src_stores = [open_store(d, storage_options) for d in inputs]
    indexes: list[dict[str, Any]] = []
    for where, store in zip(inputs, src_stores):
        index = _read_index(store, where)
        if index is None:
            raise MergeDatasetsError(f"input_dir {where!r} has no {INDEX_FILENAME}: is it an optimized dataset?")
        indexes.append(index)
    dst = open_store(output, storage_options)
    if dst.exists(INDEX_FILENAME):
        raise MergeDatasetsError(f"output_dir {output!r} already contains an optimized dataset ({INDEX_FILENAME})")

    first = indexes[0]["config"]
    for where, index in zip(inputs[1:], indexes[1:]):
        for field in _MUST_MATCH:
            a, b = first.get(field), index["config"].get(field)
            if a != b:
                raise MergeDatasetsError(
                    f"cannot merge {where!r} into {inputs[0]!r}: config field {field!r} differs ({b!r} != {a!r})"
                )

    compression, level = first.get("compression"), first.get("compression_level")
    merged_config = dict(first)
    for index in indexes[1:]:  # LitData 0.2.76 fuses the samples' schemas
        if "types" in merged_config or "types" in index["config"]:
            merged_config["types"] = fuse_schema_json(merged_config.get("types"), index["config"].get("types"))
    chunks: list[dict[str, Any]] = []
    copies: list[tuple[ObjectStore, str, str]] = []
    for store, index in zip(src_stores, indexes):
        for chunk in index["chunks"]:
            new_name = _chunk_name(len(chunks), compression, level)
            copies.append((store, chunk["filename"], new_name))
            chunks.append({**chunk, "filename": new_name})

    try:
        with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as pool:
            futures = [pool.submit(_copy, s, old, dst, new) for s, old, new in copies]
            for fut in concurrent.futures.as_completed(futures):
                fut.result()
    except BaseException:
        for _, _, name in copies:  # the pool has finished (or cancelled) every copy by now
            try:
                dst.delete(name)
            except Exception:  # noqa: BLE001 - best effort cleanup; the original error is what matters
                pass
        raise
    # written last: until this exists the output is not a dataset
    dst.put(INDEX_FILENAME, dumps_index(chunks, merged_config, str(time.time())).encode("utf-8"))
