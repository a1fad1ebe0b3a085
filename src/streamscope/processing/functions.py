"""optimize() and map(): LitData's signatures and defaults, deterministic output, no half-written datasets.

How a job runs (both functions):

1. Validate every argument before any process starts or any file is touched.
2. Split the inputs into one contiguous range per worker (:mod:`.split`); worker ``w`` writes
   ``chunk-{w}-{k}[.{compression}].bin`` into a staging directory private to this job and publishes each
   closed chunk to the output store.
3. When every worker has reported, merge their chunk lists in rank order (append: existing chunks first) and
   publish ``index.json`` LAST. Until then the output directory holds no index a reader would accept.

The arguments are validated once into a frozen :class:`~streamscope.processing.options.OptimizeOptions` (or
:class:`~streamscope.processing.options.MapOptions`) that the rest of the job reads. The modules of the write
path: :mod:`.options` (the arguments), :mod:`.job_split` (who processes what), :mod:`.output_files` (leftovers,
checkpoints, staging), :mod:`.index_publish` (``index.json``, through the format layer's one index merge).

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

import hashlib
import json
import os
import shutil
from collections.abc import Callable, Sequence
from typing import Any

from streamscope._core.dirs import Dir
from streamscope._core.errors import (
    CheckpointMismatchError,
    DatasetExistsError,
    NodeConfigError,
    OptimizeInputError,
)
from streamscope._core.protocols import ObjectStore
from streamscope.events import kinds
from streamscope.format.index import merge_indexes
from streamscope.processing._store import check_writable, open_output
from streamscope.processing.executors import Executor, resolve_executor
from streamscope.processing.index_publish import merge_nodes, publish_index, remove_nodes_dir
from streamscope.processing.job_split import JobSplit, fingerprint, split_job
from streamscope.processing.merge import merge_datasets  # noqa: F401 - litdata.processing.functions path
from streamscope.processing.nodes import NodeEnv, NodeGroup, detect_node, node_index_key
from streamscope.processing.options import (
    MapOptions,
    OptimizeOptions,
    check_compression,
    expand_time_template,
    write_options,
)
from streamscope.processing.output_files import (
    CKPT_CONFIG,
    delete_checkpoints,
    existing_config,
    load_json,
    make_staging,
    next_chunk_indexes,
    remove_chunks,
    wipe_dataset,
)
from streamscope.processing.worker import CHECKPOINT_DIR, Resume, checkpoint_key

__all__ = ["check_compression", "expand_time_template", "map", "optimize", "write_options"]


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
    opts = OptimizeOptions(
        fn=fn,
        inputs=inputs,
        output_dir=output_dir,
        queue=queue,
        weights=weights,
        chunk_size=chunk_size,
        chunk_bytes=chunk_bytes,
        align_chunking=align_chunking,
        compression=compression,
        compression_level=compression_level,
        compression_batch_size=compression_batch_size,
        encryption=encryption,
        num_workers=num_workers,
        fast_dev_run=fast_dev_run,
        num_nodes=num_nodes,
        machine=machine,
        reader=reader,
        batch_size=batch_size,
        mode=mode,
        use_checkpoint=use_checkpoint,
        item_loader=item_loader,
        start_method=start_method,
        storage_options=storage_options,
        keep_data_ordered=keep_data_ordered,
        verbose=verbose,
        key_fn=key_fn,
    )
    ex = resolve_executor(executor)
    node = _node_of(ex)
    _check_queue_support(ex, queue is not None or not keep_data_ordered)
    ex.start()  # e.g. join the Ray cluster: a missing one is reported before output_dir is touched
    try:
        _optimize(ex, node, opts)
    finally:
        ex.close()


def _optimize(ex: Executor, node: NodeEnv, opts: OptimizeOptions) -> None:
    """optimize() once its arguments are checked: split, join the other nodes, run, merge."""
    split = split_job(ex, node, opts, align=opts.align, strict_weights=False)
    items, n, workers, ranges = split.items, split.n, split.workers, split.ranges

    store = open_output(opts.url, opts.storage_options)
    layout = opts.layout
    if opts.mode == "append":  # the layout follows the dataset appended to (checked before any file is touched)
        layout = opts.layout_for(existing_config(store) if store.exists("index.json") else None)
    assert layout is not None  # OptimizeOptions sets it for every mode but "append", decided just above
    check_writable(store)
    ckpt_config: dict[str, Any] = {
        "num_workers": workers,
        "num_inputs": n,
        "ranges": [list(r) for r in ranges],
        "inputs_sha256": fingerprint(items) if opts.use_checkpoint else None,
        "writer": opts.writer_record(layout),
        "mode": opts.mode,
    }
    group: NodeGroup | None = None
    if node.multi:  # agree with the other nodes before touching anything in output_dir
        ckpt_config["num_nodes"] = node.num_nodes
        queued = opts.queue is not None
        agreed = {**ckpt_config, "kind": "optimize", "queue": queued, "key_fn": opts.key_fn is not None}
        agreed["inputs_sha256"] = None if queued else fingerprint(items)
        if opts.encryption is not None:  # the claims are plain files: a fingerprint of the key, not the key
            secret = json.dumps(ckpt_config["writer"]["encryption"], sort_keys=True, default=str)
            agreed["writer"] = {**ckpt_config["writer"], "encryption": hashlib.sha256(secret.encode()).hexdigest()}
        group = _join_nodes(store, node, agreed, "optimize")

    try:
        with kinds.optimize("optimize", inputs=n, workers=workers, url=store.url, node=node.node_rank):
            _optimize_node(store, node, group, ex, split, opts, ckpt_config, opts.writer_kwargs(layout))
    except BaseException:
        if group is not None:
            group.fail()
        raise


def _optimize_node(
    store: ObjectStore,
    node: NodeEnv,
    group: NodeGroup | None,
    ex: Executor,
    split: JobSplit,
    opts: OptimizeOptions,
    ckpt_config: dict[str, Any],
    writer_kwargs: dict[str, Any],
) -> None:
    """The body of optimize() once the arguments are checked (and, multi-node, the node joined its group):
    this node's workers ``split.mine`` of the ``split.world`` global ones."""
    multi = group is not None
    mine, world, n = split.mine, split.world, split.n
    mode, use_checkpoint, verbose = opts.mode, opts.use_checkpoint, opts.verbose
    has_index = store.exists("index.json")
    resume_records: dict[int, Resume] = {}
    saved = load_json(store, CKPT_CONFIG) if use_checkpoint else None
    if mode == "overwrite" and saved is not None:
        # a rerun of an interrupted overwrite job resumes (its first run already removed the old dataset);
        # a checkpoint of another job is simply replaced, as the rest of the old output is
        saved["start_chunk_index"] = [0] * world
        if has_index or saved != {**ckpt_config, "start_chunk_index": [0] * world}:
            saved = None
    if mode == "overwrite" and saved is None:
        wipe_dataset(store, mine if multi else None)
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
                f"{store.url}/{CKPT_CONFIG} was written for a different job "
                f"(workers, inputs or chunk settings differ): {_diff(saved, ckpt_config)}; delete "
                f"{CHECKPOINT_DIR}/ or rerun with the same arguments"
            )
        for w in mine:
            rec = load_json(store, checkpoint_key(w))
            resume_records[w] = Resume.from_record(rec) if rec else Resume(next_chunk_index=starts[w])
    else:
        if not has_index:  # leftovers of a failed run without an index (multi-node: of this node's workers)
            remove_chunks(store, (lambda r, k: r in mine) if multi else (lambda r, k: True))
        delete_checkpoints(store, mine if multi else None)
        starts = next_chunk_indexes(existing, world)
        ckpt_config["start_chunk_index"] = starts
        if use_checkpoint:  # every node writes the same record
            store.put(CKPT_CONFIG, json.dumps(ckpt_config, sort_keys=True).encode())
        resume_records = {w: Resume(next_chunk_index=starts[w]) for w in mine}

    staging = make_staging(store)
    jobs = split.jobs(
        "optimize",
        node,
        opts,
        staging,
        resume=resume_records,
        writer_kwargs=writer_kwargs,
        use_checkpoint=use_checkpoint,
    )
    run = split.run(jobs, "optimize", verbose, opts.start_method)
    try:
        results = ex.run(run)
        parts = [(f"worker {w}", *results[w]) for w in mine]
        if not multi:
            publish_index(store, parts, existing, n)
    except BaseException:
        if not use_checkpoint:
            remove_chunks(store, lambda r, k: r in mine and k >= starts[r])
        raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    if group is not None:
        chunks, config = merge_indexes(parts)
        if not group.finish({"chunks": chunks, "config": config}):
            if verbose:
                print(
                    f"optimize(): {node.describe()} wrote its share to {store.url}; index.json is written by the "
                    f"last node to finish (waiting for nodes {group.pending()})",
                    flush=True,
                )
            return
        if not merge_nodes(store, group, existing, existing_raw, n):
            return
    delete_checkpoints(store)
    if opts.key_fn is not None:
        from streamscope.processing.optimize_keys import write_keys_for  # noqa: PLC0415

        write_keys_for(store, opts.key_fn, verbose=verbose)
    if group is not None:
        for r in range(node.num_nodes):
            store.delete(node_index_key(r))
        group.cleanup()
        remove_nodes_dir(store)


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
    opts = MapOptions(
        fn=fn,
        inputs=inputs,
        output_dir=output_dir,
        weights=weights,
        num_workers=num_workers,
        fast_dev_run=fast_dev_run,
        num_nodes=num_nodes,
        machine=machine,
        error_when_not_empty=error_when_not_empty,
        reader=reader,
        batch_size=batch_size,
        start_method=start_method,
        storage_options=storage_options,
        keep_data_ordered=keep_data_ordered,
    )
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
        _map(ex, node, opts)
    finally:
        ex.close()


def _map(ex: Executor, node: NodeEnv, opts: MapOptions) -> None:
    """map() once its arguments are checked."""
    split = split_job(ex, node, opts)
    items, n, workers, ranges = split.items, split.n, split.workers, split.ranges
    store = open_output(opts.url, opts.storage_options)
    check_writable(store)
    if opts.error_when_not_empty and any(True for _ in store.list("")):
        raise OptimizeInputError(f"output_dir {store.url!r} is not empty (error_when_not_empty=True)")
    group: NodeGroup | None = None
    if node.multi:
        agreed = {
            "kind": "map",
            "num_workers": workers,
            "num_inputs": n,
            "ranges": [list(r) for r in ranges],
            "inputs_sha256": fingerprint(items),
        }
        group = _join_nodes(store, node, agreed, "map")
    staging = make_staging(store)
    run = split.run(split.jobs("map", node, opts, staging), "map", True, opts.start_method)
    try:
        with kinds.optimize("map", inputs=n, workers=workers, url=store.url, node=node.node_rank):
            ex.run(run)
        if group is not None and group.finish(None):
            group.cleanup()  # the last node: the job is over
            remove_nodes_dir(store)
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


def _diff(a: dict[str, Any], b: dict[str, Any]) -> str:
    keys = sorted(set(a) | set(b))
    return ", ".join(f"{k}: {a.get(k)!r} != {b.get(k)!r}" for k in keys if a.get(k) != b.get(k))[:500]
