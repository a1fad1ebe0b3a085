"""StreamingDataset: LitData's reading API over optimized chunk directories, local or remote.

A dataset is an index (``index.json``) plus chunk files. Construction reads the index, checks the item loader
against it and works out this process's place (DDP rank and world size). Each epoch is an
:class:`~streamscope.engine.plan.EpochPlan`: the order, this rank's share and its batches. Iteration reads the
batches of this DataLoader worker straight from mmapped chunks; random access ``ds[i]`` maps a global index to a
chunk by binary search.

Reading modes:

* local path, uncompressed: chunks are mapped where they are (no copy, no cache, no refcount);
* remote (an object-store URL, or a ``local:/dir`` folder read as remote storage, LitData's meaning) or
  compressed: chunks are fetched (and decompressed) into ``cache_dir`` by a
  :class:`~streamscope.cache.chunk_cache.ChunkCache`, prefetched ahead of use in plan order, leased while in use
  and evicted under ``max_cache_size``.

Worker/batch rule (exact resume with any number of workers): the batches of an epoch are fixed before workers
are involved; a loader that starts at batch ``s`` with ``W`` workers has worker ``w`` build batches
``s + w, s + w + W, ...``, so PyTorch's round robin over workers hands them to the training loop in order
``s, s+1, ...``.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Callable, Iterator, Sequence
from functools import partial
from typing import Any, cast

import numpy as np
from torch.utils.data import IterableDataset, get_worker_info

from streamscope import events as ev
from streamscope._core import config, hooks
from streamscope._core.board import KnobBoard
from streamscope._core.dirs import Dir, as_dir
from streamscope._core.errors import (
    ConfigError,
    DatasetError,
    DatasetIndexError,
    EncryptionError,
    FormatError,
    ItemLoaderMismatchError,
)
from streamscope._core.units import cache_budget
from streamscope.cache.chunk_cache import ChunkCache, dataset_cache_dir
from streamscope.cache.knobs import new_board
from streamscope.cache.leases import process_leases
from streamscope.engine.batch_mode import BatchMode, LoaderSettings
from streamscope.engine.batching import grouped, worker_items
from streamscope.engine.collate import ArrowCollator, BlockCollator, ColumnCollator
from streamscope.engine.dataset_decode import BatchDecoding
from streamscope.engine.dataset_index import (
    filter_parquet_chunks,
    input_path,
    is_remote,
    read_index,
    split_parquet_input,
)
from streamscope.engine.dataset_state import DatasetIdentity
from streamscope.engine.decrypted import decrypted_copy
from streamscope.engine.distributed import WorkerEnv, _DistributedEnv, _WorkerEnv
from streamscope.engine.keyed import KeyedAccess
from streamscope.engine.newer_options import check_newer_options
from streamscope.engine.plan import EpochPlan, make_plan
from streamscope.engine.reader import ChunkReader
from streamscope.engine.resume import Resumable
from streamscope.engine.split import subset_dataset
from streamscope.format.item_loader import BaseItemLoader, PyTreeLoader, TokensLoader

__all__ = ["StreamingDataset"]


class StreamingDataset(LoaderSettings, DatasetIdentity, Resumable, BatchDecoding, IterableDataset[Any]):
    """Stream samples of an optimized dataset (LitData-compatible arguments and defaults).

    Args:
        input_dir: local directory or URL (``s3://``, ``gs://``, ..., or ``local:/dir``: a folder copied into the
            cache like a remote one) holding ``index.json`` and the chunks.
        cache_dir: root of the chunk cache for remote or compressed datasets (default: the ``cache_dir`` knob).
        item_loader: ``PyTreeLoader()`` (default) or ``TokensLoader(block_size)``; must match the index.
        shuffle: shuffle by ``(seed, epoch)`` over chunks and within chunks.
        drop_last: drop the tail that does not fill a batch on every rank; None → True when world_size > 1.
        seed: shuffle seed.
        serializers: extra serializers by name (go first, like LitData).
        max_cache_size: budget of the cache: bytes (int, "100GB", "100G"), a share of the free disk (0.9), or
            None: 75 % of the free disk, leaving 50 GB free (LitData 0.2.76; ``_core.units.cache_budget``). It is
            the ``max_cache_size`` knob of :attr:`knobs`, so the main process (or the tuner) can move it while
            workers evict; the environment variables ``STREAMSCOPE_MAX_CACHE_SIZE`` / ``MAX_CACHE_SIZE`` win over it
            (as in LitData). None leaves it to the tuner; a value pins it.
        subsample: fraction of the items per epoch (> 1 repeats the dataset, LitData semantics).
        encryption: the key of an encrypted dataset (``streamscope.utilities.encryption``; LitData's key objects
            work too). Its chunks are decrypted once, at construction, into a private temporary directory under
            the cache root (removed when this process exits) and read from there. With no key, or a key of
            another algorithm or level, or a wrong key, the dataset is still built (its length and plan work,
            as in LitData) and reading it raises ``EncryptionError`` (a ``ValueError``); a wrong Fernet key
            raises ``WrongKeyError``, which is also ``cryptography.fernet.InvalidToken`` like LitData's error.
        storage_options: passed to the object store.
        session_options: accepted for compatibility (unused).
        max_pre_download: chunks prefetched ahead: the ``prefetch_depth`` knob of :attr:`knobs` starts here
            (``prefetch_depth`` set by ``config.set_value`` or ``STREAMSCOPE_PREFETCH_DEPTH`` wins over it).

    Live knobs: :attr:`knobs` is this dataset's :class:`~streamscope._core.board.KnobBoard`, shared with the
    DataLoader workers that read it (docs/knobs.md). An argument given here pins its knob: the tuner never moves it.
        index_path: an ``index.json`` to use instead of the one in ``input_dir``.
        force_override_state_dict: accept a state_dict whose configuration differs (restart the epoch).
        transform: a callable (or list of callables, applied in order) run on every sample.
        num_canonical_nodes, batch_decode, item_shuffle_window, window_direct_io: LitData 0.2.76's arguments,
            checked and kept; they do not change the samples (``stream.newer_options``).
        shuffle_buffer: opt-in cross-chunk shuffle window (samples); 0 disables it.
    """

    #: Workers read (epoch, start batch) from the loader's shared position, so persistent workers follow epochs.
    follows_shared_position = True

    def __init__(
        self,
        input_dir: Any,
        cache_dir: Any = None,
        item_loader: BaseItemLoader | None = None,
        shuffle: bool = False,
        drop_last: bool | None = None,
        seed: int = 42,
        serializers: dict[str, Any] | None = None,
        max_cache_size: int | float | str | None = None,
        subsample: float = 1.0,
        encryption: Any = None,
        storage_options: dict[str, Any] | None = None,
        session_options: dict[str, Any] | None = None,
        max_pre_download: int = config.default_arg(2),
        index_path: str | None = None,
        force_override_state_dict: bool = False,
        transform: Callable[[Any], Any] | Sequence[Callable[[Any], Any]] | None = None,
        num_canonical_nodes: int | None = None,
        batch_decode: int | str | bool = "auto",
        item_shuffle_window: int | str | None = None,
        window_direct_io: bool = False,
        shuffle_buffer: int = 0,
    ) -> None:
        super().__init__()
        ev.configure_from_env()  # an entry point: tracing switched on by the environment starts here (once)
        hooks.first_use()  # what the environment switches on with no call (STREAMSCOPE_PROMETHEUS_PORT), once
        if not isinstance(shuffle, bool):
            raise DatasetError(f"shuffle must be a bool, got {shuffle!r}")
        if not isinstance(subsample, (int, float)) or isinstance(subsample, bool) or subsample <= 0:
            raise DatasetError(f"subsample must be a float > 0, got {subsample!r}")
        if not isinstance(max_pre_download, int) or max_pre_download < 0:
            raise DatasetError(f"max_pre_download must be an int >= 0, got {max_pre_download!r}")
        check_newer_options(num_canonical_nodes, batch_decode, item_shuffle_window, window_direct_io)
        self.num_canonical_nodes = num_canonical_nodes
        self.batch_decode = batch_decode
        self.item_shuffle_window = item_shuffle_window
        self.window_direct_io = window_direct_io
        if transform is not None and not callable(transform):
            if not isinstance(transform, (list, tuple)) or not all(callable(t) for t in transform):
                raise DatasetError("transform must be a callable or a list of callables")

        self.input_dir, self._parquet_pattern = split_parquet_input(input_path(input_dir))
        self.remote = is_remote(self.input_dir)
        self.storage_options = dict(storage_options or {})
        self.session_options = dict(session_options or {})
        self.shuffle = shuffle
        self.seed = int(seed)
        self.subsample = float(subsample)
        self.index_path = index_path
        self.force_override_state_dict = force_override_state_dict
        if transform is not None or not callable(getattr(type(self), "transform", None)):
            # a subclass's own transform() method stays in charge unless transform= is given (as in LitData)
            self.transform = transform
        self.shuffle_buffer = int(shuffle_buffer)
        self.serializers = serializers
        #: LitData's ``cache_dir``: the argument as a ``Dir`` (``Dir(path=None, url=None)`` when not given)
        self.cache_dir = _as_dir(cache_dir)
        if cache_dir is None and getattr(input_dir, "url", None) and getattr(input_dir, "path", None):
            cache_dir = input_dir.path  # Dir(path=local cache, url=remote data), as LitData reads it
        self._cache_root = input_path(cache_dir) if cache_dir is not None else str(config.get("cache_dir"))
        # the live knobs, shared with the DataLoader workers; a knob set in the environment (MAX_CACHE_SIZE, as in
        # LitData) or by config.set_value wins over the argument
        self._knobs = new_board(
            {
                "prefetch_depth": (int(max_pre_download), config.given(max_pre_download), "max_pre_download"),
                "max_cache_size": (
                    cache_budget(max_cache_size, self._cache_root),
                    max_cache_size is not None,
                    "max_cache_size",
                ),
            }
        )

        self.input_dir, index = read_index(
            self.input_dir,
            remote=self.remote,
            index_path=self.index_path,
            parquet_pattern=self._parquet_pattern,
            open_store=self._store,
            cache_root=self._cache_root,
        )
        self.config: dict[str, Any] = index["config"]
        self.chunks, self._key_layout = filter_parquet_chunks(index["chunks"], self._parquet_pattern, self.input_dir)
        self._keys_section: Any = index.get("keys")
        self._keyed: KeyedAccess | None = None  # opened at the first get_by_key
        self.updated_at: str | None = index.get("updated_at")
        if not self.chunks:
            raise DatasetError(f"the index of {self.input_dir!r} lists no chunks")
        self.compression: str | None = self.config.get("compression")
        self._plain_dir: str | None = None  # decrypted copy of an encrypted dataset (engine/decrypted.py)
        # A key problem (none given, another algorithm or level, a wrong key) is raised at the first read, as in
        # LitData: the dataset is built, and its length, plan and state work.
        self._key_problem: tuple[type[EncryptionError], str] | None = None
        if encryption is not None or self.config.get("encryption"):
            try:
                self._plain_dir = decrypted_copy(
                    config=self.config,
                    chunks=self.chunks,
                    store=self._store(),
                    encryption=encryption,
                    cache_root=self._cache_root,
                    what=repr(self.input_dir),
                )
            except EncryptionError as exc:
                self._key_problem = (type(exc), str(exc))
        self.item_loader = self._setup_item_loader(item_loader)
        self.is_tokens = isinstance(self.item_loader, TokensLoader)
        self.is_parquet = getattr(self.item_loader, "name", "") == "ParquetLoader"
        self.is_mds = self.config.get("format") == "mds"  # MosaicML MDS shards (adapted index, MDS item layout)
        if isinstance(self.item_loader, TokensLoader):
            self.chunk_sizes = [self.item_loader.blocks_in_chunk(c) for c in self.chunks]
        else:
            self.chunk_sizes = [int(c["chunk_size"]) for c in self.chunks]

        self.regions: list[tuple[int, int, int]] | None = None
        if self.subsample != 1.0:
            from streamscope.engine.subsample import subsample_regions

            self.regions = [
                (int(c), int(a), int(b))
                for c, a, b in subsample_regions(self.chunk_sizes, self.subsample, self.shuffle, self.seed)
            ]
        if self.regions is None:
            sizes = np.asarray(self.chunk_sizes, dtype=np.int64)
            self._r_chunk = np.arange(len(sizes), dtype=np.int64)
            self._r_start = np.zeros(len(sizes), dtype=np.int64)
        else:
            arr = np.asarray(self.regions, dtype=np.int64).reshape(-1, 3)
            self._r_chunk, self._r_start, sizes = arr[:, 0], arr[:, 1], arr[:, 2] - arr[:, 1]
        self._set_region_arrays(sizes)

        dist = _DistributedEnv.detect()
        self.world_size, self.rank, self._num_nodes = dist.world_size, dist.global_rank, dist.num_nodes
        #: LitData's ``worker_env``: None until an iteration starts, then that iteration's DataLoader workers
        self.worker_env: _WorkerEnv | None = None
        self.drop_last = (self.world_size > 1) if drop_last is None else bool(drop_last)
        if self.total_items < self.world_size and not (self.total_items == 0 and self.regions is not None):
            # (a subsample that selects nothing is an empty dataset, as in LitData)
            raise DatasetError(
                f"{self.input_dir!r} has {self.total_items} samples, fewer than world_size={self.world_size}: "
                f"some ranks would get no data"
            )
        self.batch_size = 1
        self.num_workers = 0
        self.current_epoch = 1
        self._pending: tuple[int, int] | None = None  # (epoch, start_batch) from load_state_dict
        # (epoch, resumed_from) of an epoch continued with another world size: its plan covers the samples left
        self._elastic: tuple[int, tuple[tuple[int, ...], ...]] | None = None
        self._plans: dict[tuple[Any, ...], EpochPlan] = {}
        self._reader: Any = None
        self._reader_pid = -1
        self._column: ColumnCollator | BlockCollator | None = None
        self._arrow_column: ArrowCollator | None = None
        self._batch_mode: BatchMode | None = None  # set by StreamingDataLoader (set_batch_mode)

    # --- construction helpers ----------------------------------------------------------------------

    def _set_region_arrays(self, sizes: np.ndarray) -> None:
        self._regions_by_chunk: dict[int, list[tuple[int, int, int]]] | None = None
        self._r_end = np.cumsum(sizes)
        self.total_items = int(self._r_end[-1]) if len(self._r_end) else 0

    def with_regions(self, regions: Sequence[tuple[int, int, int]]) -> StreamingDataset:
        """A copy of this dataset that runs over ``regions`` ``(chunk, start, end)`` only (train_test_split)."""
        new = copy.copy(self)
        new.__dict__.update(self.__getstate__())
        new.item_loader = self.item_loader
        new.__dict__.pop("_loader_recipe", None)
        new._knobs = copy.copy(self._knobs)  # its own board (same values and pins): each split is tuned alone
        new.regions = [(int(c), int(a), int(b)) for c, a, b in regions]
        arr = np.asarray(new.regions, dtype=np.int64).reshape(-1, 3)
        new._r_chunk, new._r_start = arr[:, 0], arr[:, 1]
        new._set_region_arrays(arr[:, 2] - arr[:, 1])
        new._pending = None
        new._elastic = None
        new._batch_mode = None
        return new

    def subset(self, indices: Sequence[int] | slice) -> StreamingDataset:
        """A copy restricted to ``indices``, positions in this dataset's unshuffled order (LitData 0.2.76)."""
        return subset_dataset(self, indices)

    def _store(self) -> Any:
        from streamscope.storage import open_store

        return open_store(self.input_dir, self.storage_options)

    def _setup_item_loader(self, item_loader: BaseItemLoader | None) -> BaseItemLoader:
        recorded = self.config.get("item_loader")
        if item_loader is None and recorded == "ParquetLoader":  # no arguments needed: pick it (LitData raises)
            from streamscope.format.parquet import ParquetLoader

            item_loader = ParquetLoader()
        if item_loader is None:
            if recorded == "TokensLoader":
                raise ItemLoaderMismatchError(
                    f"{self.input_dir!r} was written with TokensLoader: pass item_loader=TokensLoader(block_size=...)"
                )
            item_loader = PyTreeLoader()
        name = getattr(item_loader, "name", type(item_loader).__name__)
        if recorded is not None and recorded != name:
            raise ItemLoaderMismatchError(
                f"{self.input_dir!r} was written with item_loader {recorded!r} but is read with {name!r}"
            )
        if isinstance(item_loader, TokensLoader) and not item_loader.block_size:
            raise ItemLoaderMismatchError("TokensLoader needs a block_size (TokensLoader(block_size=N))")
        try:
            item_loader.setup(self.config, self.serializers, self.chunks)
        except FormatError as exc:
            raise ItemLoaderMismatchError(f"{self.input_dir!r}: {exc}") from exc
        return item_loader

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_reader"] = None
        state["_reader_pid"] = -1
        state["_plans"] = {}
        state["_column"] = None
        state["_arrow_column"] = None
        # Item loaders hold compiled decoders that may not pickle (spawn workers): rebuild them from their args.
        loader = state.pop("item_loader")
        state["_loader_recipe"] = (type(loader), loader.state_dict() if self.is_tokens else {})
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        ev.configure_from_env()  # a spawned worker's bootstrap: trace as the parent does (once per process)
        cls, kwargs = state.pop("_loader_recipe")
        self.__dict__.update(state)
        loader = cls(**kwargs)
        loader.setup(self.config, self.serializers, self.chunks)
        self.item_loader = loader

    # --- settings (LitData names) ------------------------------------------------------------------

    def set_epoch(self, current_epoch: int) -> None:
        """Set the epoch (shuffle order); ignored while a loaded state is pending (LitData behaviour)."""
        if self._pending is None:
            self.current_epoch = int(current_epoch)

    # --- plan --------------------------------------------------------------------------------------

    def plan(self, epoch: int | None = None, batch_size: int | None = None) -> EpochPlan:
        """The epoch plan of this rank (cached per arguments)."""
        epoch = self.current_epoch if epoch is None else int(epoch)
        b = self.batch_size if batch_size is None else int(batch_size)
        history = self._elastic[1] if self._elastic is not None and self._elastic[0] == epoch else ()
        order = (self.shuffle, self.drop_last, self.seed, self.shuffle_buffer)
        key = (epoch, b, self.world_size, self.rank, order, history)
        plan = self._plans.get(key)
        if plan is None:
            if len(self._plans) > 4:
                self._plans.clear()
            plan = make_plan(
                self.chunk_sizes,
                world_size=self.world_size,
                rank=self.rank,
                batch_size=b,
                drop_last=self.drop_last,
                shuffle=self.shuffle,
                seed=self.seed,
                epoch=epoch,
                shuffle_buffer=self.shuffle_buffer,
                regions=self.regions,
                resumed_from=history,
            )
            self._plans[key] = plan
        return plan

    def __len__(self) -> int:
        return self.plan().num_samples

    def get_len(self, num_workers: int = 0, batch_size: int = 1) -> int:
        """Samples this rank yields per epoch with this batch size (LitData signature)."""
        return self.plan(batch_size=batch_size).num_samples

    # --- reading -----------------------------------------------------------------------------------

    def _get_reader(self) -> Any:
        if self._reader is None or self._reader_pid != os.getpid():
            if self._key_problem is not None:
                raise self._key_problem[0](self._key_problem[1])
            cache = None
            local_dir = None
            if (self.remote or self.compression) and self._plain_dir is None:
                source = self.input_dir
                cdir = dataset_cache_dir(
                    self._cache_root, source if self.remote else os.path.abspath(source), self.updated_at
                )
                store = self._store()
                budget = self._knobs.reader("max_cache_size")
                cache = ChunkCache(store, cdir, self.chunks, self.compression, budget, process_leases(), self.config)
            else:
                local_dir = self._plain_dir or self.input_dir
            if self.is_parquet:
                from streamscope.engine.parquet import ParquetChunkReader
                from streamscope.format.parquet import ParquetLoader

                # is_parquet checks the loader's name: LitData's own ParquetLoader passes too (same interface)
                loader = cast("ParquetLoader", self.item_loader)
                self._reader = ParquetChunkReader(
                    self.chunks, local_dir, cache, self._depth_reader(), loader, self._knobs
                )
            else:
                self._reader = ChunkReader(self.chunks, local_dir, cache, self._depth_reader(), self._knobs)
            self._reader_pid = os.getpid()
        return self._reader

    def _depth_reader(self) -> Callable[[], int]:
        """The reader's live prefetch depth: the board's ``prefetch_depth`` reader, which holds the board's memory
        and not this dataset: a reader that held the dataset would make a reference cycle, and a dropped
        dataset's mapped chunks would then wait for a garbage collection (unmapping them there stalls whatever
        runs at that moment)."""
        return self._knobs.reader("prefetch_depth")

    # --- where this dataset reads in the job (LitData's names) ------------------------------------------

    @property
    def distributed_env(self) -> _DistributedEnv:
        """LitData's ``distributed_env``: the job's ``world_size``, this process's ``global_rank`` and the
        ``num_nodes``, as :attr:`world_size` and :attr:`rank` say. Setting a field of it, or assigning another
        ``_DistributedEnv`` (LitData's or ours), moves this dataset to that rank of that world, as in LitData."""
        env = _DistributedEnv(self.world_size, self.rank, self._num_nodes)
        env._owner = self
        return env

    @distributed_env.setter
    def distributed_env(self, env: Any) -> None:
        try:
            world, rank, nodes = int(env.world_size), int(env.global_rank), int(env.num_nodes)
        except (AttributeError, TypeError, ValueError):
            raise DatasetError(
                f"distributed_env must have integer world_size, global_rank and num_nodes, got {env!r}"
            ) from None
        if world < 1 or not 0 <= rank < world or nodes < 1:
            raise DatasetError(f"invalid distributed_env: global_rank={rank}, world_size={world}, num_nodes={nodes}")
        self.world_size, self.rank, self._num_nodes = world, rank, nodes

    # --- live knobs --------------------------------------------------------------------------------

    @property
    def knobs(self) -> KnobBoard:
        """This dataset's live knobs (prefetch depth, download concurrency, cache budget, ...), shared with its
        DataLoader workers: see :class:`~streamscope._core.board.KnobBoard` and docs/knobs.md."""
        return self._knobs

    @property
    def max_pre_download(self) -> int:
        """Chunks prefetched ahead now (the board's ``prefetch_depth``)."""
        return int(self._knobs.value("prefetch_depth"))

    @max_pre_download.setter
    def max_pre_download(self, value: int) -> None:
        self._knobs.set("prefetch_depth", value, base=True)

    @property
    def max_cache_size(self) -> int:
        """The cache's byte budget now (the board's ``max_cache_size``)."""
        return int(self._knobs.value("max_cache_size"))

    @max_cache_size.setter
    def max_cache_size(self, value: int | float | str | None) -> None:
        self._knobs.set("max_cache_size", cache_budget(value, self._cache_root), base=True)

    def _overrides_getitem(self) -> bool:
        """True for a subclass that overrides ``__getitem__`` (LitData's "transform while streaming" recipe)."""
        return type(self).__getitem__ is not StreamingDataset.__getitem__

    def locate(self, index: int) -> tuple[int, int]:
        """(chunk, item in chunk) of global index ``index`` (binary search over regions)."""
        if not -self.total_items <= index < self.total_items:
            raise DatasetIndexError(f"index {index} is out of range for a dataset of {self.total_items} samples")
        if index < 0:
            index += self.total_items
        r = int(np.searchsorted(self._r_end, index, side="right"))
        begin = int(self._r_end[r - 1]) if r else 0
        return int(self._r_chunk[r]), int(self._r_start[r]) + index - begin

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, str):  # an entity key from the keys/ sidecar (LitData: ds["key"])
            return self.get_by_key(index)
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(self.total_items))]
        if isinstance(index, (bool, np.bool_)) or not isinstance(index, (int, np.integer)):
            raise TypeError(f"dataset indices must be integers or slices, got {type(index).__name__}")
        chunk, item = self.locate(int(index))
        reader = self.chunk_reader()
        return self.decode_item(reader.open(chunk), item)

    # --- keyed access --------------------------------------------------------------------------------

    def get_by_key(self, key: Any) -> Any:
        """The sample whose key (``key_fn`` of ``optimize``/``build_keys_index``) is ``key``.

        Raises:
            KeyIndexNotFoundError: the dataset has no ``keys/`` sidecar (a KeyError).
            SampleKeyError: no sample has this key (a KeyError).
        """
        if self._keyed is None:
            from streamscope.storage import open_store

            self._keyed = KeyedAccess(
                self.input_dir,
                self._keys_section,
                self.chunk_sizes,
                layout=self._key_layout,
                pattern=self._parquet_pattern,
                open_store=partial(open_store, self.input_dir, self.storage_options) if self.remote else None,
            )
        chunk, item = self._keyed.locate(key)
        return self.decode_item(self.chunk_reader().open(chunk), item)

    def __iter__(self) -> Iterator[Any]:
        """Samples of this worker's batches (plain ``torch.utils.data.DataLoader`` use; ``len()`` works on the
        iterator, as on LitData's).

        Under a :class:`~streamscope.engine.dataloader.StreamingDataLoader` (batch mode, read when ``iter()`` is
        called: the loader sets it only while it creates its iterator) it yields ``(batch_number, batch)``
        pairs instead.
        """
        w = WorkerEnv.detect()
        self.worker_env = _WorkerEnv(world_size=w.num_workers, rank=w.worker_id)
        mode = self._batch_mode
        if mode is None:
            return self._plain_iter("epoch", w.worker_id, w.num_workers, self.rank)
        return self._batch_pass(mode, w)

    def set_batch_mode(self, mode: BatchMode | None) -> None:
        """Yield ``(batch_number, batch)`` per ``mode`` from the next ``iter()`` on (None: plain samples again).

        StreamingDataLoader sets it around its ``iter(dataset)``; the iterator keeps the mode of that call.
        """
        self._batch_mode = mode

    def _batch_pass(self, mode: BatchMode, w: WorkerEnv) -> Iterator[Any]:
        epoch, start = mode.epoch_and_start()
        batches: Iterator[Any] = self.iter_batches(
            epoch, start, w.worker_id, w.num_workers, mode.batch_size, mode.collate_fn
        )
        group_bytes = int(config.get("loader_group_bytes"))
        if group_bytes > 0 and get_worker_info() is not None:
            total = len(self._batch_ids(epoch, start, w.worker_id, w.num_workers, mode.batch_size))
            batches = grouped(batches, group_bytes, mode.arena_flags, w.worker_id, total)
        yield from worker_items(batches, mode)

    # --- state -------------------------------------------------------------------------------------

    def reset(self) -> None:
        """Forget per-iteration state (reader, cached plans, a loaded state, epoch, batch settings), as LitData's
        ``reset()``: the dataset iterates again from epoch 1 with ``batch_size=1``."""
        if self._reader is not None and self._reader_pid == os.getpid():
            self._reader.stop()
            self._reader.close()
        self._reader = None
        self._reader_pid = -1
        self._plans = {}
        self._column = None
        self._arrow_column = None
        self._pending = None
        self._elastic = None
        self._batch_mode = None
        self.current_epoch = 1
        self.num_workers = 1
        self.batch_size = 1


def _as_dir(value: Any) -> Dir:
    """``value`` as a ``Dir`` (LitData's own ``Dir`` objects too); a value of no directory kind gives an empty one
    here and its error where the cache root is resolved."""
    try:
        return as_dir(value)
    except ConfigError:
        return Dir(path=getattr(value, "path", None), url=getattr(value, "url", None))
