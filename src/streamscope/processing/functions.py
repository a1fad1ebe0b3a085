"""optimize() and map(): LitData's signatures and defaults, deterministic output, no half-written datasets.

How a job runs (both functions):

1. Validate every argument before any process starts or any file is touched.
2. Split the inputs into one contiguous range per worker (:mod:`.split`); worker ``w`` writes
   ``chunk-{w}-{k}[.{compression}].bin`` into a staging directory private to this job and publishes each
   closed chunk to the output store.
3. When every worker has reported, merge their chunk lists in rank order (append: existing chunks first) and
   publish ``index.json`` LAST. Until then the output directory holds no index a reader would accept.

Where the workers run is the executor's business (:mod:`.executors`: processes here, or Ray tasks); the split,
the chunk names and the merge are the same everywhere. On several machines (:mod:`.nodes`), each node runs
workers ``r*W .. r*W+W-1`` of ``N*W``, publishes its chunk list as ``{r}-index.json`` (LitData's per-node
file), and the last node to finish merges them into ``index.json`` (then removes the per-node files, the
claims in ``.nodes/`` and the checkpoint records).

The layout written is LitData 0.2.76's by default, or 0.2.68's (byte for byte): the ``write_format`` knob
(``STREAMSCOPE_WRITE_FORMAT``) chooses it, see :mod:`streamscope.format.writer`. ``mode="append"`` keeps the
layout of the dataset it extends, whatever the knob says (a 0.2.76 dataset is told by its config keys), and, when
they are not given, its ``compression_level`` / ``compression_batch_size``; the workers' and the existing
dataset's ``config.types`` are fused as LitData 0.2.76's index merge does.

On failure (an exception in ``fn``, a serializer error, a killed worker) the job raises, the chunks this run
published are deleted (unless ``use_checkpoint=True``, which keeps them with the checkpoint records so a rerun
resumes), and no ``index.json`` is written.

``reorder_files`` and ``weights``: LitData may reorder inputs by size for load balancing. Here the input order
is always kept (that is what makes the output deterministic); ``weights`` only moves the boundaries between
the workers' contiguous ranges so that each gets about the same total weight; ``reorder_files`` is accepted
and has no effect.
"""

from __future__ import annotations

import builtins
import hashlib
import json
import os
import re
import shutil
import socket
import tempfile
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from streamscope import events as ev
from streamscope._core import config as cfg
from streamscope._core.dirs import Dir, as_dir
from streamscope._core.errors import (
    CheckpointMismatchError,
    ConfigError,
    DatasetExistsError,
    FormatError,
    NodeConfigError,
    OptimizeError,
    OptimizeInputError,
    OutputDirError,
    SchemaMismatchError,
)
from streamscope._core.protocols import ObjectStore
from streamscope._core.units import parse_bytes
from streamscope.format.compression import parse_compression
from streamscope.format.framed_write import resolve_compression_level
from streamscope.format.writer import fuse_configs, layout_of, resolve_write_format
from streamscope.processing._store import check_writable, local_root, open_output
from streamscope.processing.executors import Executor, resolve_executor
from streamscope.processing.merge import merge_datasets  # noqa: F401 - litdata.processing.functions path
from streamscope.processing.nodes import NODES_DIR, NodeEnv, NodeGroup, detect_node, node_index_key
from streamscope.processing.runner import JobRun
from streamscope.processing.split import aligned_ranges, even_ranges, weighted_ranges
from streamscope.processing.worker import CHECKPOINT_DIR, Resume, WorkerJob, checkpoint_key

__all__ = ["check_compression", "expand_time_template", "map", "optimize", "write_options"]


_CHUNK_RE = re.compile(r"^chunk-(\d+)-(\d+)(\.[^/]+)?\.bin$")
_VALID_MODES = (None, "append", "overwrite")
_CKPT_CONFIG = f"{CHECKPOINT_DIR}/config.json"


def _check_encryption_arg(encryption: Any, item_loader: Any) -> None:
    """optimize(encryption=...): a key object LitData's writer would accept (checked before any worker starts)."""
    if encryption is None:
        return
    if getattr(encryption, "level", None) not in ("sample", "chunk") or not callable(
        getattr(encryption, "encrypt", None)
    ):
        raise OptimizeInputError(
            f"encryption must be a FernetEncryption/RSAEncryption (level 'sample' or 'chunk'), got {encryption!r}"
        )
    if item_loader is not None and getattr(item_loader, "name", type(item_loader).__name__) == "TokensLoader":
        raise OptimizeInputError("TokensLoader datasets cannot be encrypted (LitData cannot read them back either)")


def check_compression(compression: str | None) -> None:
    """Raise :class:`ConfigError` unless ``compression`` is None, ``"zstd"`` or ``"zstd:1"`` .. ``"zstd:22"``."""
    try:
        parse_compression(compression)
    except FormatError as exc:
        raise ConfigError(str(exc)) from None


def write_options(
    existing_config: dict[str, Any] | None,
    compression: str | None,
    compression_level: str | None,
    compression_batch_size: int | None,
    encryption: Any,
    item_loader: Any,
) -> dict[str, Any]:
    """The layout arguments of the chunk writers: ``write_format``, ``compression_level``, ``compression_batch_size``.

    The layout is the one of the dataset appended to (``existing_config``: LitData 0.2.76's keys present or not),
    else the ``write_format`` knob's. Appending to a 0.2.76 dataset without ``compression_level`` /
    ``compression_batch_size`` takes the dataset's (whole-file zstd when it has a compression and no level).

    Raises:
        ConfigError: an unknown knob value, compression or level, or a level the layout or the other arguments
            do not allow (LitData 0.2.76's sentences first).
    """
    fmt = layout_of(existing_config) if existing_config is not None else resolve_write_format()
    if fmt == "0.2.76" and existing_config is not None:
        if compression_level is None:
            if existing_config.get("compression_level"):
                compression_level = existing_config["compression_level"]
            elif existing_config.get("compression"):
                compression_level = "chunk"
        if compression_batch_size is None and existing_config.get("compression_batch_size") is not None:
            compression_batch_size = existing_config["compression_batch_size"]
    try:
        if fmt == "0.2.76":
            loader = "PyTreeLoader" if item_loader is None else getattr(item_loader, "name", type(item_loader).__name__)
            resolve_compression_level(
                compression, compression_level, compression_batch_size, encryption=encryption, item_loader_name=loader
            )
        else:
            parse_compression(compression)
    except FormatError as exc:
        raise ConfigError(str(exc)) from None
    if fmt == "0.2.68" and (compression_level not in (None, "", "chunk") or compression_batch_size is not None):
        where = "the dataset appended to has" if existing_config is not None else "write_format is"
        raise ConfigError(
            f"compression_level={compression_level!r} / compression_batch_size={compression_batch_size!r} need "
            f"LitData 0.2.76's layout, but {where} LitData 0.2.68's (whole-file zstd only: leave them unset)"
        )
    return {
        "write_format": fmt,
        "compression_level": compression_level,
        "compression_batch_size": compression_batch_size,
    }


def optimize(
    fn: Callable[[Any], Any],
    inputs: Sequence[Any] | None = None,
    output_dir: str | os.PathLike[str] | Dir = "optimized_data",
    queue: Any | None = None,
    input_dir: str | None = None,
    weights: list[int] | None = None,
    chunk_size: int | None = None,
    chunk_bytes: int | str | None = None,
    align_chunking: bool = False,
    compression: str | None = None,
    compression_level: str | None = None,
    compression_batch_size: int | None = None,
    encryption: Any | None = None,
    num_workers: int | None = None,
    fast_dev_run: bool | int = False,
    num_nodes: int | None = None,
    machine: str | None = None,
    num_downloaders: int | None = None,
    num_uploaders: int | None = None,
    reorder_files: bool = True,
    reader: Any | None = None,
    batch_size: int | None = None,
    mode: str | None = None,
    use_checkpoint: bool = False,
    item_loader: Any | None = None,
    start_method: str | None = None,
    optimize_dns: bool | None = None,
    storage_options: dict[str, Any] = {},  # noqa: B006 - LitData's signature
    keep_data_ordered: bool = True,
    verbose: bool = True,
    broadcast_paths: bool = False,
    key_fn: Callable[[Any], Any] | None = None,
    *,
    executor: Any = None,
) -> None:
    """Convert ``inputs`` into a chunked dataset in ``output_dir`` that LitData and streamscope can stream.

    Args:
        fn: Called on each input; returns one sample (any pytree of str/int/float/bytes/arrays/tensors/...) or
            None (input skipped), or is a generator yielding samples (None values skipped).
        inputs: The inputs, a sequence (it is split into one contiguous range per worker).
        output_dir: Local directory (or URL once object storage is available) receiving the dataset.
        queue: A ``multiprocessing.Queue`` of inputs instead of ``inputs``: the workers take items from it until
            a producer puts ``streamscope.processing.data_processor.ALL_DONE`` (once, whatever the number of
            workers). Dataset order then follows which worker took which item (rank order, then arrival).
        input_dir: Accepted for compatibility; unused.
        weights: Weights of the inputs (one per input, or one per batch with ``batch_size``); they move the
            boundaries of the workers' contiguous ranges. LitData's optimize() ignores them, so weights of
            another length are ignored here too, with a warning (:func:`map` raises, as LitData's does).
        chunk_size: Maximum number of samples per chunk (exactly one of chunk_size/chunk_bytes).
        chunk_bytes: Target chunk size in bytes, or a string like ``"64MB"`` (decimal units).
        align_chunking: Give every worker but the last whole multiples of ``chunk_size`` inputs.
        compression: None, ``"zstd"`` or ``"zstd:N"``.
        compression_level: How zstd wraps the chunks (LitData 0.2.76's layout): ``"batch"`` (the default with
            zstd: frames of ``compression_batch_size`` samples inside ``chunk-R-I.bin``), ``"sample"`` (one frame
            per sample) or ``"chunk"`` (the whole file, ``chunk-R-I.zstd.bin``, LitData 0.2.68's way). The
            ``write_format`` knob picks the layout (default 0.2.76's); with ``"0.2.68"`` leave it unset.
            Not the zstd level: that is ``compression="zstd:N"``.
        compression_batch_size: Samples per zstd frame at level ``"batch"`` (default 256).
        encryption: A key from ``streamscope.utilities.encryption`` (``FernetEncryption``/``RSAEncryption``,
            level "sample" or "chunk"); samples or chunks are encrypted before compression, as LitData does.
        num_workers: Worker processes (default ``os.cpu_count()``; 0 means 1).
        fast_dev_run: True to process only the first 10 inputs of each worker (knob
            ``optimize_fast_dev_run_items``), or an int number of inputs per worker, as LitData ("items per
            process"); with ``keep_data_ordered=False`` the first inputs in all.
        num_nodes: Launches a job on the Lightning platform in LitData; must be None (several machines: see below).
        machine: Must be None (Lightning platform only).
        num_downloaders: Accepted for compatibility; unused.
        num_uploaders: Accepted for compatibility; unused (workers publish their own chunks).
        reorder_files: Accepted; inputs are never reordered here.
        reader: Optional reader (e.g. :class:`~streamscope.processing.readers.ParquetReader`): its
            ``remap_items(inputs, num_workers)`` (if any) runs once in the main process, ``read(item)`` on each
            work item before ``fn``.
        batch_size: Group consecutive inputs into lists of this length before calling ``fn``.
        mode: None (fail if a dataset exists), ``"append"`` or ``"overwrite"``.
        use_checkpoint: Record progress at chunk boundaries; a rerun resumes and gives the same dataset.
        item_loader: Item loader instance (e.g. ``TokensLoader()``); default PyTree.
        start_method: ``"fork"`` (default on Linux) or ``"spawn"``/``"forkserver"``.
        optimize_dns: Accepted for compatibility; unused.
        storage_options: Options for the output store.
        keep_data_ordered: True (default): each worker owns a contiguous range of the inputs and the dataset
            order is the input order. False: workers take inputs from one shared queue (load balancing); every
            input is written once, but the sample order depends on timing.
        verbose: Show a progress bar.
        broadcast_paths: Accepted for compatibility; unused.
        key_fn: ``sample -> key`` (str or int, unique): also write the keys sidecar (``keys/shard-*.parquet``)
            that ``StreamingDataset.get_by_key`` and ``ds["key"]`` use (see :mod:`streamscope.processing.optimize_keys`).
        executor: Where the workers run: None (knob ``optimize_executor``, default ``"process"``: worker
            processes here), ``"ray"`` (Ray tasks on the cluster ``ray.init()`` joins, ``RAY_ADDRESS`` included)
            or an executor object such as ``RayExecutor(address, num_cpus=..., resources=...)``. The output does
            not depend on it.

    Several machines: run the same script on each with ``DATA_OPTIMIZER_NUM_NODES`` / ``DATA_OPTIMIZER_NODE_RANK``
    (or torchrun's ``NNODES`` / ``NODE_RANK``, SLURM's ``SLURM_NNODES`` / ``SLURM_NODEID``) and a shared
    ``output_dir``: each node takes its share of the inputs and the last one to finish writes ``index.json``
    (see :mod:`streamscope.processing.nodes`); the dataset is the one ``num_nodes * num_workers`` workers write
    on one machine.

    Raises:
        OptimizeInputError: empty inputs, both or neither of chunk_size/chunk_bytes, bad mode, ...
        ConfigError: unknown compression or ``compression_level``, a level with encryption or with another
            compression than zstd, a bad ``write_format`` knob value.
        DatasetExistsError: ``output_dir`` already holds an ``index.json`` and ``mode`` is None.
        OutputDirError: ``output_dir`` cannot be created or written.
        WorkerFailedError: ``fn`` or the serializer raised; names the input.
        WorkerDiedError: a worker process died without reporting.
        SchemaMismatchError: samples have different structures or leaf types (also across workers).
        NodeConfigError: bad node variables, or this node disagrees with the others of the job (node count,
            workers, inputs, settings); NodeRankClaimedError: another live node has this node's rank.
        ClusterUnreachableError: ``executor="ray"`` and no Ray cluster answers at the address.
    """
    if not callable(fn):
        raise OptimizeInputError(f"fn must be callable, got {type(fn).__name__}")
    if queue is not None and inputs is not None:
        raise OptimizeInputError("pass either inputs or queue to optimize(), not both")
    if queue is None and inputs is None:
        raise OptimizeInputError("optimize() needs inputs or queue")
    if queue is not None and not (callable(getattr(queue, "get", None)) and callable(getattr(queue, "put", None))):
        raise OptimizeInputError(f"queue must be a multiprocessing.Queue, got {type(queue).__name__}")
    if use_checkpoint and (queue is not None or not keep_data_ordered):
        raise OptimizeInputError(
            "use_checkpoint=True needs a fixed split of the inputs: it cannot be combined with queue=... or "
            "keep_data_ordered=False"
        )
    if chunk_size is None and chunk_bytes is None:
        raise OptimizeInputError("optimize() needs chunk_size or chunk_bytes")
    if chunk_size is not None and chunk_bytes is not None:
        raise OptimizeInputError("pass either chunk_size or chunk_bytes to optimize(), not both")
    if chunk_size is not None and (not isinstance(chunk_size, int) or chunk_size <= 0):
        raise OptimizeInputError(f"chunk_size must be a positive int, got {chunk_size!r}")
    cbytes = None if chunk_bytes is None else parse_bytes(chunk_bytes)
    if cbytes is not None and cbytes <= 0:
        raise OptimizeInputError(f"chunk_bytes must be positive, got {chunk_bytes!r}")
    if align_chunking and chunk_size is None:
        raise OptimizeInputError(  # LitData's sentence first
            "`align_chunking` is set to True, but the `chunk_size` is not defined in the data recipe: "
            "align_chunking=True needs chunk_size"
        )
    if mode not in _VALID_MODES:
        raise OptimizeInputError(  # LitData's sentence first
            f"The provided `mode` should be either `append` or `overwrite`: mode must be None, 'append' or "
            f"'overwrite', got {mode!r}"
        )
    if mode != "append":
        layout = write_options(None, compression, compression_level, compression_batch_size, encryption, item_loader)
    _reject_platform_args(num_nodes, machine)
    _check_encryption_arg(encryption, item_loader)
    if key_fn is not None and not callable(key_fn):
        raise OptimizeInputError(f"key_fn must be callable (sample -> str or int key), got {key_fn!r}")
    if key_fn is not None and encryption is not None:
        raise OptimizeInputError("optimize(key_fn=...) does not support encrypted datasets")
    if key_fn is not None:  # before the work: the keys sidecar is written with pyarrow at the end
        from streamscope.format.keys_store import KEYS_FEATURE
        from streamscope.format.parquet import require_pyarrow

        require_pyarrow(KEYS_FEATURE, "keys")

    output_dir = _location(output_dir)
    ex = resolve_executor(executor)
    node = _node_of(ex)
    _check_queue_support(ex, queue is not None or not keep_data_ordered)
    ex.start()  # e.g. join the Ray cluster: a missing one is reported before output_dir is touched
    try:
        _optimize(
            ex,
            node,
            fn,
            inputs,
            output_dir,
            queue,
            weights,
            chunk_size,
            cbytes,
            align_chunking,
            compression,
            encryption,
            num_workers,
            fast_dev_run,
            reader,
            batch_size,
            mode,
            use_checkpoint,
            item_loader,
            start_method,
            storage_options,
            keep_data_ordered,
            verbose,
            key_fn,
            layout if mode != "append" else None,
            compression_level,
            compression_batch_size,
        )
    finally:
        ex.close()


def _optimize(
    ex: Executor,
    node: NodeEnv,
    fn: Callable[[Any], Any],
    inputs: Sequence[Any] | None,
    output_dir: str,
    queue: Any,
    weights: list[int] | None,
    chunk_size: int | None,
    cbytes: int | None,
    align_chunking: bool,
    compression: str | None,
    encryption: Any,
    num_workers: int | None,
    fast_dev_run: bool | int,
    reader: Any,
    batch_size: int | None,
    mode: str | None,
    use_checkpoint: bool,
    item_loader: Any,
    start_method: str | None,
    storage_options: dict[str, Any],
    keep_data_ordered: bool,
    verbose: bool,
    key_fn: Callable[[Any], Any] | None,
    layout: dict[str, Any] | None,
    compression_level: str | None,
    compression_batch_size: int | None,
) -> None:
    """optimize() once its arguments are checked: split, join the other nodes, run, merge."""
    split = _split(
        ex,
        node,
        inputs,
        queue,
        weights,
        num_workers,
        fast_dev_run,
        reader,
        batch_size,
        keep_data_ordered,
        align=int(chunk_size) if align_chunking else None,  # type: ignore[arg-type]
        strict_weights=False,
    )
    items, n, workers, ranges = split.items, split.n, split.workers, split.ranges

    store = open_output(output_dir, storage_options)
    if mode == "append":  # the layout follows the dataset appended to (checked before any file is touched)
        existing_config = _existing_config(store) if store.exists("index.json") else None
        layout = write_options(
            existing_config, compression, compression_level, compression_batch_size, encryption, item_loader
        )
    assert layout is not None  # optimize() passes it for every mode but "append", computed just above
    check_writable(store)
    writer_kwargs = {
        "chunk_size": chunk_size,
        "chunk_bytes": cbytes,
        "compression": compression,
        "item_loader": item_loader,
        "encryption": encryption,
        **layout,
    }
    ckpt_config: dict[str, Any] = {
        "num_workers": workers,
        "num_inputs": n,
        "ranges": [list(r) for r in ranges],
        "inputs_sha256": _fingerprint(items) if use_checkpoint else None,
        "writer": {
            "chunk_size": chunk_size,
            "chunk_bytes": cbytes,
            "compression": compression,
            "item_loader": None if item_loader is None else type(item_loader).__name__,
            "encryption": None if encryption is None else encryption.state_dict(),
            **layout,
        },
        "mode": mode,
    }
    group: NodeGroup | None = None
    if node.multi:  # agree with the other nodes before touching anything in output_dir
        ckpt_config["num_nodes"] = node.num_nodes
        agreed = {**ckpt_config, "kind": "optimize", "queue": queue is not None, "key_fn": key_fn is not None}
        agreed["inputs_sha256"] = None if queue is not None else _fingerprint(items)
        if encryption is not None:  # the claims are plain files: a fingerprint of the key, not the key
            secret = json.dumps(ckpt_config["writer"]["encryption"], sort_keys=True, default=str)
            agreed["writer"] = {**ckpt_config["writer"], "encryption": hashlib.sha256(secret.encode()).hexdigest()}
        group = _join_nodes(store, node, agreed, "optimize")

    try:
        with ev.span("optimize", "epoch", inputs=n, workers=workers, url=store.url, node=node.node_rank):
            _optimize_node(
                store,
                node,
                group,
                ex,
                fn,
                split,
                queue,
                mode,
                use_checkpoint,
                ckpt_config,
                writer_kwargs,
                output_dir,
                storage_options,
                reader,
                start_method,
                verbose,
                key_fn,
            )
    except BaseException:
        if group is not None:
            group.fail()
        raise


def _optimize_node(
    store: ObjectStore,
    node: NodeEnv,
    group: NodeGroup | None,
    ex: Executor,
    fn: Callable[[Any], Any],
    split: _Split,
    queue: Any,
    mode: str | None,
    use_checkpoint: bool,
    ckpt_config: dict[str, Any],
    writer_kwargs: dict[str, Any],
    output_dir: str,
    storage_options: dict[str, Any],
    reader: Any,
    start_method: str | None,
    verbose: bool,
    key_fn: Callable[[Any], Any] | None,
) -> None:
    """The body of optimize() once the arguments are checked (and, multi-node, the node joined its group):
    this node's workers ``split.mine`` of the ``split.world`` global ones."""
    multi = group is not None
    mine, world, n = split.mine, split.world, split.n
    has_index = store.exists("index.json")
    resume_records: dict[int, Resume] = {}
    saved = _load_json(store, _CKPT_CONFIG) if use_checkpoint else None
    if mode == "overwrite" and saved is not None:
        # a rerun of an interrupted overwrite job resumes (its first run already removed the old dataset);
        # a checkpoint of another job is simply replaced, as the rest of the old output is
        saved["start_chunk_index"] = [0] * world
        if has_index or saved != {**ckpt_config, "start_chunk_index": [0] * world}:
            saved = None
    if mode == "overwrite" and saved is None:
        _wipe_dataset(store, mine if multi else None)
        has_index = False
    elif has_index and mode is None:
        raise DatasetExistsError(  # LitData's sentences, then ours
            f"The provided output_dir `{store.url}` already contains an optimized immutable datasets.\n HINT: "
            "If you want to append/overwrite to the existing dataset, use `mode='append | overwrite'`.\n"
            f"output_dir {store.url!r} already holds a dataset (index.json); pass mode='overwrite' to "
            f"replace it or mode='append' to add to it"
        )
    existing: dict[str, Any] | None = None
    existing_raw: bytes | None = None
    if mode == "append" and has_index:
        existing_raw = store.get("index.json")
        existing = json.loads(existing_raw)

    if saved is not None:
        starts = saved.get("start_chunk_index")
        ckpt_config["start_chunk_index"] = starts
        if saved != ckpt_config:
            raise CheckpointMismatchError(
                f"{store.url}/{_CKPT_CONFIG} was written for a different job "
                f"(workers, inputs or chunk settings differ): {_diff(saved, ckpt_config)}; delete "
                f"{CHECKPOINT_DIR}/ or rerun with the same arguments"
            )
        for w in mine:
            rec = _load_json(store, checkpoint_key(w))
            resume_records[w] = Resume.from_record(rec) if rec else Resume(next_chunk_index=starts[w])
    else:
        if not has_index:  # leftovers of a failed run without an index (multi-node: of this node's workers)
            _remove_chunks(store, (lambda r, k: r in mine) if multi else (lambda r, k: True))
        _delete_checkpoints(store, mine if multi else None)
        starts = _next_chunk_indexes(existing, world)
        ckpt_config["start_chunk_index"] = starts
        if use_checkpoint:  # every node writes the same record
            store.put(_CKPT_CONFIG, json.dumps(ckpt_config, sort_keys=True).encode())
        resume_records = {w: Resume(next_chunk_index=starts[w]) for w in mine}

    staging = _make_staging(store)
    jobs = split.jobs(
        "optimize",
        node,
        fn,
        staging,
        output_dir,
        storage_options,
        reader,
        source=queue,
        resume=resume_records,
        writer_kwargs=writer_kwargs,
        use_checkpoint=use_checkpoint,
    )
    run = split.run(jobs, "optimize", verbose, start_method)
    try:
        results = ex.run(run)
        parts = [(f"worker {w}", *results[w]) for w in mine]
        if not multi:
            _publish_index(store, parts, existing, n)
    except BaseException:
        if not use_checkpoint:
            _remove_chunks(store, lambda r, k: r in mine and k >= starts[r])
        raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    if group is not None:
        chunks, config = _merge_parts(parts, None)
        if not group.finish({"chunks": chunks, "config": config}):
            if verbose:
                print(
                    f"optimize(): {node.describe()} wrote its share to {store.url}; index.json is written by the "
                    f"last node to finish (waiting for nodes {group.pending()})",
                    flush=True,
                )
            return
        if not _merge_nodes(store, group, existing, existing_raw, n):
            return
    _delete_checkpoints(store)
    if key_fn is not None:
        from streamscope.processing.optimize_keys import write_keys_for  # noqa: PLC0415

        write_keys_for(store, key_fn, verbose=verbose)
    if group is not None:
        for r in range(node.num_nodes):
            store.delete(node_index_key(r))
        group.cleanup()
        _remove_nodes_dir(store)


def map(  # noqa: A001 - LitData's name
    fn: Callable[..., None],
    inputs: Sequence[Any],
    output_dir: str | os.PathLike[str] | Dir,
    input_dir: str | None = None,
    weights: list[int] | None = None,
    num_workers: int | None = None,
    fast_dev_run: bool | int = False,
    num_nodes: int | None = None,
    machine: str | None = None,
    num_downloaders: int | None = None,
    num_uploaders: int | None = None,
    reorder_files: bool = True,
    error_when_not_empty: bool = False,
    reader: Any | None = None,
    batch_size: int | None = None,
    start_method: str | None = None,
    optimize_dns: bool | None = None,
    storage_options: dict[str, Any] = {},  # noqa: B006 - LitData's signature
    keep_data_ordered: bool = True,
    broadcast_paths: bool = False,
    *,
    executor: Any = None,
) -> None:
    """Run ``fn(item, output_dir)`` on every input in worker processes and publish the files it writes.

    ``fn`` writes files under the temporary directory it is given and returns None (anything else raises
    :class:`MapReturnError`, a ValueError). Every file is published to ``output_dir`` at the same relative path.
    As in LitData, an ``fn`` with a parameter named ``is_last`` gets ``is_last=True`` on its worker's last input
    (always False with ``keep_data_ordered=False``, where the workers share one queue), and one named ``device``
    gets ``"cuda:N"`` (the worker's GPU, round robin) or None without CUDA. ``weights`` works as in
    :func:`optimize`, but weights of another length raise :class:`OptimizeInputError` (LitData's message).
    ``executor`` and several machines (node variables) work as for :func:`optimize`; each node publishes its
    share of the files (there is no index to merge).

    Raises:
        OptimizeInputError: empty inputs, or ``error_when_not_empty`` and the output is not empty.
        MapReturnError: ``fn`` returned a value.
        WorkerFailedError / WorkerDiedError: as for :func:`optimize`.
    """
    if not callable(fn):
        raise OptimizeInputError(f"fn must be callable, got {type(fn).__name__}")
    _reject_platform_args(num_nodes, machine)
    output_dir = _location(output_dir)
    ex = resolve_executor(executor)
    node = _node_of(ex)
    if error_when_not_empty and node.multi:
        raise OptimizeInputError(
            f"error_when_not_empty=True cannot tell this node's output from the other nodes' ({node.describe()}): "
            "check the output folder before starting the nodes"
        )
    _check_queue_support(ex, not keep_data_ordered)
    ex.start()
    try:
        _map(
            ex,
            node,
            fn,
            inputs,
            output_dir,
            weights,
            num_workers,
            fast_dev_run,
            error_when_not_empty,
            reader,
            batch_size,
            start_method,
            storage_options,
            keep_data_ordered,
        )
    finally:
        ex.close()


def _map(
    ex: Executor,
    node: NodeEnv,
    fn: Callable[[Any, str], None],
    inputs: Sequence[Any],
    output_dir: str,
    weights: list[int] | None,
    num_workers: int | None,
    fast_dev_run: bool | int,
    error_when_not_empty: bool,
    reader: Any,
    batch_size: int | None,
    start_method: str | None,
    storage_options: dict[str, Any],
    keep_data_ordered: bool,
) -> None:
    """map() once its arguments are checked."""
    split = _split(ex, node, inputs, None, weights, num_workers, fast_dev_run, reader, batch_size, keep_data_ordered)
    items, n, workers, ranges = split.items, split.n, split.workers, split.ranges
    store = open_output(output_dir, storage_options)
    check_writable(store)
    if error_when_not_empty and any(True for _ in store.list("")):
        raise OptimizeInputError(f"output_dir {store.url!r} is not empty (error_when_not_empty=True)")
    group: NodeGroup | None = None
    if node.multi:
        agreed = {
            "kind": "map",
            "num_workers": workers,
            "num_inputs": n,
            "ranges": [list(r) for r in ranges],
            "inputs_sha256": _fingerprint(items),
        }
        group = _join_nodes(store, node, agreed, "map")
    staging = _make_staging(store)
    run = split.run(
        split.jobs("map", node, fn, staging, output_dir, storage_options, reader), "map", True, start_method
    )
    try:
        with ev.span("map", "epoch", inputs=n, workers=workers, url=store.url, node=node.node_rank):
            ex.run(run)
        if group is not None and group.finish(None):
            group.cleanup()  # the last node: the job is over
            _remove_nodes_dir(store)
    except BaseException:
        if group is not None:
            group.fail()
        raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)


# --- helpers ----------------------------------------------------------------------------------------


def _join_nodes(store: ObjectStore, node: NodeEnv, agreed: dict[str, Any], kind: str) -> NodeGroup:
    """Join the job's node group (its claims agree on ``agreed``) and keep this node's heartbeat going."""
    group = NodeGroup(store, node, agreed, kind)
    group.join()
    group.start_heartbeat()
    return group


@dataclass(frozen=True)
class _Split:
    """How a job's inputs are dealt: ``ranges[w]`` of ``items`` to global worker ``w`` of ``world`` (``workers``
    a node), this node's workers ``mine``; ``shared`` (from global input ``shared_offset``): this node's share
    handed out through one queue (``keep_data_ordered=False``), else None. ``n``: the inputs the job processes."""

    items: list[Any]
    n: int
    workers: int
    world: int
    ranges: list[tuple[int, int]]
    mine: range
    shared: list[Any] | None
    shared_offset: int

    def jobs(
        self,
        kind: str,
        node: NodeEnv,
        fn: Callable[..., Any],
        staging: str,
        output_dir: str,
        storage_options: dict[str, Any],
        reader: Any,
        *,
        source: Any = None,
        resume: dict[int, Resume] | None = None,
        writer_kwargs: dict[str, Any] | None = None,
        use_checkpoint: bool = False,
    ) -> list[WorkerJob]:
        """This node's workers as jobs of ``kind`` (optimize or map), each on its range of the inputs (or taking
        them from the user's queue ``source``)."""
        return [
            WorkerJob(
                kind=kind,
                worker=w,
                num_workers=self.workers,
                fn=fn,
                inputs=self.items[self.ranges[w][0] : self.ranges[w][1]],
                offset=self.ranges[w][0],
                output_dir=output_dir,
                storage_options=storage_options,
                staging_dir=staging,
                writer_kwargs=writer_kwargs or {},
                use_checkpoint=use_checkpoint,
                resume=resume[w] if resume is not None else Resume(),
                reader=reader,
                source=source,
                num_nodes=node.num_nodes,
                node_rank=node.node_rank,
            )
            for w in self.mine
        ]

    def run(self, jobs: list[WorkerJob], desc: str, verbose: bool, start_method: str | None) -> JobRun:
        """``jobs`` to run, with the progress bar's total (None for the user's queue: unknown)."""
        if any(j.source is not None for j in jobs):
            total = None
        else:
            total = len(self.shared) if self.shared is not None else sum(len(j.inputs) for j in jobs)
        return JobRun(jobs, total, desc, verbose, start_method, self.shared, self.shared_offset)


def _split(
    ex: Executor,
    node: NodeEnv,
    inputs: Sequence[Any] | None,
    queue: Any,
    weights: list[int] | None,
    num_workers: int | None,
    fast_dev_run: bool | int,
    reader: Any,
    batch_size: int | None,
    keep_data_ordered: bool,
    *,
    align: int | None = None,
    strict_weights: bool = True,
) -> _Split:
    """Deal the inputs (or, with the user's ``queue``, none: it feeds the workers) to the job's global workers:
    node r runs ranks ``r*workers .. r*workers + workers - 1``. ``align``: whole chunks of that many items per
    worker (optimize's align_chunking). Weights that do not fit the inputs raise with ``strict_weights`` (map),
    else warn and are ignored (LitData's optimize() ignores weights: code passing these runs there)."""
    keep: int | None = None
    if queue is not None:
        items: list[Any] = []
        n_given = n = 0
        workers = _num_workers(num_workers, None, ex)
    else:
        items, n_given, keep = _prepare_inputs(inputs, batch_size, fast_dev_run, reader, num_workers)
        if keep is not None and not keep_data_ordered:  # the workers share one queue: its first inputs
            items, keep = items[:keep], None
        n = len(items)
        workers = _num_workers(num_workers, n, ex)
    world = workers * node.num_nodes
    if queue is not None or not keep_data_ordered:
        ranges = [(0, 0)] * world  # items are handed out through a queue shared by the workers
    elif weights is not None:
        try:
            ranges = _weighted_split(weights, n_given, batch_size, n, world)
        except OptimizeInputError as exc:
            if strict_weights:
                raise
            warnings.warn(f"{exc}; optimize() ignores them (as LitData's does)", UserWarning, stacklevel=3)
            ranges = even_ranges(n, world)
    elif align is not None:
        ranges = aligned_ranges(n, world, align)
    else:
        ranges = even_ranges(n, world)
    if keep is not None:
        ranges = _keep_first(ranges, keep)
        n = sum(b - a for a, b in ranges)
    shared, shared_offset = None, 0
    if queue is None and not keep_data_ordered:  # this node's share of the inputs, handed out by one queue
        a, b = even_ranges(len(items), node.num_nodes)[node.node_rank]
        shared, shared_offset = items[a:b], a
    mine = range(node.node_rank * workers, (node.node_rank + 1) * workers)
    return _Split(items, n, workers, world, ranges, mine, shared, shared_offset)


_TIME_TEMPLATE = re.compile(r"\{(%[^{}]*)\}")


def expand_time_template(path: str) -> str:
    """Replace each ``{%strftime pattern}`` in ``path`` by the current local time (``run_{%Y-%m-%d}``)."""
    if "{%" not in path:
        return path
    now = time.localtime()
    return _TIME_TEMPLATE.sub(lambda m: time.strftime(m.group(1), now), path)


def _location(output_dir: str | os.PathLike[str] | Dir) -> str:
    if isinstance(output_dir, str):
        output_dir = expand_time_template(output_dir)
    d = as_dir(output_dir)
    loc = d.url or d.path
    if not loc:
        raise OptimizeInputError(f"output_dir {output_dir!r} names no directory")
    return loc


def _reject_platform_args(num_nodes: int | None, machine: str | None) -> None:
    if num_nodes is not None or machine is not None:
        raise OptimizeInputError(
            "num_nodes and machine start jobs on the Lightning platform (leave them None). To prepare a dataset on "
            "several machines, run the same script on each with DATA_OPTIMIZER_NUM_NODES / DATA_OPTIMIZER_NODE_RANK "
            "set (or under torchrun / SLURM), or pass executor='ray'"
        )


def _check_queue_support(executor: Executor, queued: bool) -> None:
    if queued and not getattr(executor, "supports_queue", True):
        raise OptimizeInputError(
            f"executor={executor.name!r} runs each worker on a fixed share of the inputs: queue=... and "
            "keep_data_ordered=False (one multiprocessing queue shared by the workers) are not supported there"
        )


def _node_of(executor: Executor) -> NodeEnv:
    """This process's node (see :mod:`.nodes`). A Ray executor spreads the workers itself: the node variables of
    a Ray-on-SLURM/torchrun allocation are ignored, LitData's explicit ones refused.

    Raises:
        NodeConfigError: bad node variables, or ``DATA_OPTIMIZER_NUM_NODES`` > 1 with a non-process executor.
    """
    node = detect_node()
    if node.multi and executor.name != "process":
        if node.source.startswith("DATA_OPTIMIZER_"):
            raise NodeConfigError(
                f"executor={executor.name!r} spreads the workers over its cluster itself; it cannot also be "
                f"{node.describe()}: unset DATA_OPTIMIZER_NUM_NODES or use the default executor"
            )
        return NodeEnv()
    return node


def _prepare_inputs(
    inputs: Any, batch_size: int | None, fast_dev_run: bool | int, reader: Any = None, num_workers: int | None = None
) -> tuple[list[Any], int, int | None]:
    """The work items (remapped by the reader, batched), the number of inputs given, and how many work items
    each worker keeps for ``fast_dev_run`` (None: all)."""
    if isinstance(inputs, (str, bytes)) or not hasattr(inputs, "__len__") or not hasattr(inputs, "__getitem__"):
        try:
            inputs = builtins.list(inputs)
        except TypeError:
            raise OptimizeInputError(f"inputs must be a sequence, got {type(inputs).__name__}") from None
    if len(inputs) == 0:
        raise OptimizeInputError("inputs is empty: there is nothing to process")
    items = builtins.list(inputs)
    if reader is not None and callable(getattr(reader, "remap_items", None)):
        items = builtins.list(reader.remap_items(items, num_workers or os.cpu_count() or 1))
        if not items:
            raise OptimizeInputError(f"{type(reader).__name__}.remap_items() returned no work items")
    n_given = len(items)
    if batch_size is not None and batch_size > 1:
        items = [items[p : p + batch_size] for p in range(0, len(items), batch_size)]
    keep = None
    if fast_dev_run:
        keep = int(cfg.get("optimize_fast_dev_run_items")) if fast_dev_run is True else int(fast_dev_run)
    return items, n_given, keep


def _keep_first(ranges: list[tuple[int, int]], keep: int | None) -> list[tuple[int, int]]:
    """``fast_dev_run``: each worker's range cut to its first ``keep`` work items, as LitData ("items per
    process"), so a dev run writes the chunks of the full run's first ``keep`` items of every worker."""
    return ranges if keep is None else [(a, min(b, a + keep)) for a, b in ranges]


def _weighted_split(
    weights: Sequence[float], n_given: int, batch_size: int | None, n: int, workers: int
) -> list[tuple[int, int]]:
    """The workers' ranges of the ``n`` work items from ``weights``: one per work item (LitData's rule: per
    batch with ``batch_size``), or one per input, summed per batch.

    Raises:
        OptimizeInputError: neither length fits (a ValueError led by LitData's sentence).
    """
    w = list(weights)
    batch = batch_size if batch_size is not None and batch_size > 1 else None
    batched = batch is not None
    n_work = -(-n_given // batch) if batch is not None else n_given
    if len(w) == n_work:
        per_item = w
    elif batch is not None and len(w) == n_given:
        per_item = [sum(w[p : p + batch]) for p in range(0, n_given, batch)]
    else:
        of = f"{n_given} inputs" + (f" ({n_work} batches of {batch_size})" if batched else "")
        raise OptimizeInputError(
            f"The provided weights length should match the inputs' length. weights has {len(w)} entries for {of}"
        )
    return weighted_ranges(per_item[:n], workers)


def _num_workers(num_workers: int | None, n: int | None, executor: Executor | None = None) -> int:
    """Workers to start (on this node): at most one per input (``n`` None: the number of inputs is not known,
    queue mode). None: the executor's default (worker processes: one per CPU of this machine)."""
    if num_workers is None:
        num_workers = executor.default_workers() if executor is not None else (os.cpu_count() or 1)
    if num_workers < 0:
        raise OptimizeInputError(f"num_workers must be >= 0, got {num_workers}")
    return max(1, num_workers if n is None else min(num_workers, n))


def _fingerprint(items: list[Any]) -> str:
    h = hashlib.sha256()
    for it in items:
        h.update(repr(it)[:256].encode("utf-8", "replace"))
        h.update(b"\x00")
    return h.hexdigest()


def _diff(a: dict[str, Any], b: dict[str, Any]) -> str:
    keys = sorted(set(a) | set(b))
    return ", ".join(f"{k}: {a.get(k)!r} != {b.get(k)!r}" for k in keys if a.get(k) != b.get(k))[:500]


def _existing_config(store: ObjectStore) -> dict[str, Any] | None:
    try:
        config = json.loads(store.get("index.json")).get("config")
    except (ValueError, AttributeError):
        return None  # an unreadable index: the append itself reports it
    return config if isinstance(config, dict) else None


def _load_json(store: ObjectStore, key: str) -> Any:
    if not store.exists(key):
        return None
    return json.loads(store.get(key))


def _chunk_files(store: ObjectStore) -> list[tuple[str, int, int]]:
    out = []
    for meta in store.list(""):
        if "/" in meta.key:
            continue
        m = _CHUNK_RE.match(meta.key)
        if m:
            out.append((meta.key, int(m.group(1)), int(m.group(2))))
    return out


def _remove_chunks(store: ObjectStore, which: Callable[[int, int], bool]) -> None:
    for key, rank, idx in _chunk_files(store):
        if which(rank, idx):
            store.delete(key)


def _delete_checkpoints(store: ObjectStore, ranks: range | None = None) -> None:
    """Delete every object under ``.checkpoints/`` (config last, so a half-deleted set is never resumable);
    ``ranks``: only those workers' records (a node of a multi-node job; the others' belong to other nodes)."""
    if ranks is not None:
        for w in ranks:
            store.delete(checkpoint_key(w))
        return
    keys = [m.key for m in store.list(CHECKPOINT_DIR + "/")]
    for key in sorted(keys, key=lambda k: k == _CKPT_CONFIG):
        store.delete(key)
    root = local_root(store)
    if root is not None and os.path.isdir(os.path.join(root, CHECKPOINT_DIR)):
        shutil.rmtree(os.path.join(root, CHECKPOINT_DIR), ignore_errors=True)


_NODE_INDEX_RE = re.compile(r"^\d+-index\.json$")


def _wipe_dataset(store: ObjectStore, ranks: range | None = None) -> None:
    """``mode="overwrite"``: remove the old dataset. ``ranks``: a node of a multi-node job removes only its own
    workers' files (another node may have published its share already); the merge removes what is left."""
    with ev.span("overwrite", "delete", url=store.url):
        if store.exists("index.json"):
            store.delete("index.json")
        _remove_chunks(store, (lambda r, k: True) if ranks is None else (lambda r, k: r in ranks))
        _delete_checkpoints(store, ranks)
        if ranks is None:
            for meta in store.list(""):
                if "/" not in meta.key and _NODE_INDEX_RE.match(meta.key):
                    store.delete(meta.key)  # a multi-node job's per-node leftovers


def _next_chunk_indexes(existing: dict[str, Any] | None, workers: int) -> list[int]:
    starts = [0] * workers
    if existing:
        for c in existing.get("chunks", []):
            m = _CHUNK_RE.match(c["filename"])
            if m and int(m.group(1)) < workers:
                r = int(m.group(1))
                starts[r] = max(starts[r], int(m.group(2)) + 1)
    return starts


_STAGING_PREFIX = ".streamscope-staging-"


def _remove_stale_staging(parent: str) -> None:
    """Remove staging dirs left by jobs whose main process no longer exists (e.g. it was SIGKILLed).

    Only this host's: several nodes of a multi-node job may stage in one shared output folder, and a pid says
    nothing about another host's processes."""
    mine = _host_tag()
    for name in os.listdir(parent):
        if not name.startswith(_STAGING_PREFIX):
            continue
        pid_text, _, rest = name[len(_STAGING_PREFIX) :].partition("-")
        if not pid_text.isdigit():
            continue
        if re.match(r"^h[0-9a-f]{8}-", rest) and rest[1:9] != mine:
            continue  # another host's
        try:
            os.kill(int(pid_text), 0)
        except ProcessLookupError:
            shutil.rmtree(os.path.join(parent, name), ignore_errors=True)
        except OSError:
            pass


def _host_tag() -> str:
    return hashlib.sha1(socket.gethostname().encode(), usedforsecurity=False).hexdigest()[:8]


def _make_staging(store: ObjectStore) -> str:
    parent = str(cfg.get("optimize_staging_dir")) or local_root(store) or tempfile.gettempdir()
    try:
        os.makedirs(parent, exist_ok=True)
        _remove_stale_staging(parent)
        return tempfile.mkdtemp(prefix=f"{_STAGING_PREFIX}{os.getpid()}-h{_host_tag()}-", dir=parent)
    except OSError as exc:
        raise OutputDirError(f"cannot create a staging directory under {parent!r}: {exc}") from exc


def _merge_parts(
    parts: list[tuple[str, list[dict[str, Any]], dict[str, Any] | None]], existing: dict[str, Any] | None
) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """The chunk list and fused config of ``existing`` (append) followed by ``parts`` (``(who, chunks, config)``
    of each worker, or each node, in rank order).

    Raises:
        SchemaMismatchError: two parts' configs cannot be fused (LitData's sentence first).
    """
    chunks: list[dict[str, Any]] = []
    config: dict[str, Any] | None = None
    config_who = ""
    if existing:
        chunks.extend(existing["chunks"])
        config = existing["config"]
        config_who = "the existing dataset"
    for who, p_chunks, p_config in parts:
        if not p_chunks:
            continue
        if config is None:
            config, config_who = p_config, who
        else:
            assert p_config is not None
            fused = fuse_configs(config, p_config)
            if fused is None:
                raise SchemaMismatchError(  # LitData's sentence first
                    "The config isn't consistent between chunks: "
                    f"{who}'s samples do not match {config_who}: data_format {p_config.get('data_format')} vs "
                    f"{config.get('data_format')}, config {_diff(config, p_config)}"
                )
            config = fused
        chunks.extend(p_chunks)
    return chunks, config


def _publish_index(
    store: ObjectStore,
    parts: list[tuple[str, list[dict[str, Any]], dict[str, Any] | None]],
    existing: dict[str, Any] | None,
    n_inputs: int,
) -> list[dict[str, Any]]:
    """Merge ``parts`` after ``existing`` and publish ``index.json``; return its chunk list."""
    with ev.span("index_merge", "read", workers=len(parts)):
        chunks, config = _merge_parts(parts, existing)
        if not chunks:  # LitData writes this index too (its StreamingDataset then refuses it); say so
            warnings.warn(
                f"optimize(): fn returned no sample for any of the {n_inputs} inputs; {store.url!r} gets an "
                "index.json that lists no chunk (a StreamingDataset cannot read it; mode='append' can add to it)",
                UserWarning,
                stacklevel=2,
            )
        index = {"chunks": chunks, "config": config, "updated_at": str(time.time())}
        store.put("index.json", json.dumps(index, sort_keys=True).encode())
    return chunks


def _index_moved(store: ObjectStore, at_start: bytes | None) -> bool:
    """index.json is no longer what this node saw when it started: another node has merged already."""
    try:
        now = store.get("index.json")
    except FileNotFoundError:
        now = None
    return now != at_start


def _merge_nodes(
    store: ObjectStore,
    group: NodeGroup,
    existing: dict[str, Any] | None,
    existing_raw: bytes | None,
    n_inputs: int,
) -> bool:
    """The node that saw every node done: merge their ``{rank}-index.json`` (after the dataset appended to) into
    ``index.json``, remove chunk files no entry names (leftovers of earlier runs); False when another node that
    finished at the same moment has already merged.

    Raises:
        OptimizeError: a node is marked done but its ``{rank}-index.json`` is missing.
    """
    if _index_moved(store, existing_raw):
        return False
    parts: list[tuple[str, list[dict[str, Any]], dict[str, Any] | None]] = []
    for r in range(group.node.num_nodes):
        try:
            rec = json.loads(store.get(node_index_key(r)))
        except FileNotFoundError:
            if _index_moved(store, existing_raw):
                return False  # the other merger published and removed the node files
            raise OptimizeError(
                f"optimize(): node {r} is marked done in {store.url}/{NODES_DIR}/ but "
                f"{store.url}/{node_index_key(r)} is missing; rerun node {r}"
            ) from None
        parts.append((f"node {r}", list(rec.get("chunks") or []), rec.get("config")))
    chunks = _publish_index(store, parts, existing, n_inputs)
    named = {c["filename"] for c in chunks}
    for key, _rank, _idx in _chunk_files(store):
        if key not in named:
            store.delete(key)
    return True


def _remove_nodes_dir(store: ObjectStore) -> None:
    root = local_root(store)
    if root is not None:
        shutil.rmtree(os.path.join(root, NODES_DIR), ignore_errors=True)
