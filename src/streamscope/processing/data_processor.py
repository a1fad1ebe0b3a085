"""``litdata.processing.data_processor`` at the same path: the queue sentinel and LitData's recipe API.

* ``ALL_DONE``: the sentinel a producer puts on the queue it passes to ``optimize(queue=...)`` (see
  :mod:`.sentinel`).
* Recipes, LitData's way to write ``optimize``/``map`` as a class: a :class:`DataChunkRecipe` (or
  :class:`MapRecipe`) subclass says what the inputs are (``prepare_structure(input_dir)``) and what one input
  becomes (``prepare_item``), and ``DataProcessor(input_dir, output_dir, ...).run(recipe)`` runs it. Here
  ``run`` hands the recipe to :func:`~streamscope.processing.functions.optimize` or
  :func:`~streamscope.processing.functions.map`, so the output, the workers, the errors and the progress bar
  are theirs. The recipe object goes to the worker processes, so it must be picklable (its class defined at
  module level, as LitData's spawned workers need too).

Differences from LitData 0.2.68: inputs keep their order (``reorder_files`` is accepted and unused, as in
``optimize``); ``num_downloaders``, ``num_uploaders``, ``delete_cached_files``, ``random_seed``, ``state_dict``
and ``broadcast_paths`` are accepted and unused (input files are read where they are); an ``output_dir`` that
already holds a dataset is replaced (``mode="overwrite"``), which is what LitData's processor ends with.
"""

from __future__ import annotations

import multiprocessing.queues
import os
import tempfile
from typing import Any

from streamscope._core import config as cfg
from streamscope._core.dirs import Dir, as_dir
from streamscope.processing.functions import map as _map
from streamscope.processing.functions import optimize
from streamscope.processing.sentinel import ALL_DONE, is_all_done

__all__ = ["ALL_DONE", "DataChunkRecipe", "DataProcessor", "DataRecipe", "MapRecipe", "is_all_done"]


class DataRecipe:
    """Base of the recipes: ``prepare_structure`` lists the inputs, ``prepare_item`` processes one."""

    def __init__(self, storage_options: dict[str, Any] = {}) -> None:  # noqa: B006 - LitData's signature (copied)
        self._name: str | None = None
        self.storage_options = dict(storage_options or {})

    def prepare_structure(self, input_dir: str | None) -> Any:
        """The inputs: a list (or a ``multiprocessing.Queue`` ending with ``ALL_DONE``, chunk recipes only)."""
        raise NotImplementedError(f"{type(self).__name__} must define prepare_structure(input_dir)")

    def prepare_item(self, *args: Any, **kwargs: Any) -> Any:
        """Process one input (see the subclasses for the arguments)."""
        raise NotImplementedError(f"{type(self).__name__} must define prepare_item")


class DataChunkRecipe(DataRecipe):
    """``prepare_item(item)`` returns the sample (or yields several) to write into chunks, as ``optimize``'s fn.

    Args:
        chunk_size: max samples per chunk; at most one of chunk_size/chunk_bytes (neither: 64 MiB chunks,
            LitData's default ``1 << 26`` bytes).
        chunk_bytes: max bytes per chunk (int, or a string such as ``"64MB"``).
        compression: None, ``"zstd"`` or ``"zstd:N"``.
        compression_level: ``"batch"``, ``"sample"`` or ``"chunk"`` (see ``optimize``).
        compression_batch_size: samples per zstd frame at level ``"batch"`` (default 256).
        encryption: a key from ``streamscope.utilities.encryption``.
        storage_options: options of the output's object store.
        key_fn: sample -> key, to look samples up by key (see ``optimize(key_fn=...)``).
    """

    def __init__(
        self,
        chunk_size: int | None = None,
        chunk_bytes: int | str | None = None,
        compression: str | None = None,
        compression_level: str | None = None,
        compression_batch_size: int | None = None,
        encryption: Any | None = None,
        storage_options: dict[str, Any] = {},  # noqa: B006 - LitData's signature (copied, never mutated)
        key_fn: Any | None = None,
    ) -> None:
        super().__init__(storage_options)
        if chunk_size is not None and chunk_bytes is not None:
            raise ValueError("Either one of the `chunk_size` or the `chunk_bytes` need to be provided.")
        self.chunk_size = chunk_size
        self.chunk_bytes = 1 << 26 if chunk_size is None and chunk_bytes is None else chunk_bytes
        self.compression = compression
        self.compression_level = compression_level
        self.compression_batch_size = compression_batch_size
        self.encryption = encryption
        self.key_fn = key_fn

    def prepare_item(self, item_metadata: Any) -> Any:
        """The sample(s) of one input."""
        raise NotImplementedError(f"{type(self).__name__} must define prepare_item(item_metadata)")


class MapRecipe(DataRecipe):
    """``prepare_item(item, output_dir, is_last)`` writes files into ``output_dir`` and returns None, as ``map``'s
    fn (``is_last``: the input is its worker's last)."""

    def prepare_item(self, item_metadata: Any, output_dir: str, is_last: bool) -> None:
        """Write the files of one input into ``output_dir``."""
        raise NotImplementedError(f"{type(self).__name__} must define prepare_item(item_metadata, output_dir, is_last)")


class _Samples:
    """``optimize``'s fn for a chunk recipe (picklable when the recipe is)."""

    def __init__(self, recipe: DataChunkRecipe) -> None:
        self.recipe = recipe

    def __call__(self, item: Any) -> Any:
        return self.recipe.prepare_item(item)


class _Files:
    """``map``'s fn for a map recipe (picklable when the recipe is)."""

    def __init__(self, recipe: MapRecipe) -> None:
        self.recipe = recipe

    def __call__(self, item: Any, output_dir: str, is_last: bool) -> None:
        return self.recipe.prepare_item(item, output_dir, is_last)


def _default_output() -> str:
    """Where LitData's processor writes without an ``output_dir``: its chunk cache folder (knob
    ``processor_output_dir``)."""
    return str(cfg.get("processor_output_dir")) or os.path.join(tempfile.gettempdir(), "chunks")


class DataProcessor:
    """Run a recipe over ``input_dir`` into ``output_dir`` (LitData's signature; see the module docstring).

    Args:
        input_dir: where the inputs are (its local path is passed to ``prepare_structure``; None without one).
        output_dir: where the dataset (or the map's files) goes; None: knob ``processor_output_dir``
            (``DATA_OPTIMIZER_CACHE_FOLDER``, else ``<tmp>/chunks``), as LitData.
        num_workers: worker processes (None: optimize's/map's default).
        align_chunking: give every worker but the last whole chunks (needs the recipe's ``chunk_size``).
        fast_dev_run: process only the first inputs (True: 10; an int: that many). None: knob
            ``processor_fast_dev_run`` (``DATA_OPTIMIZER_FAST_DEV_RUN``), on by default, as in LitData.
        weights: per-input weights moving the boundaries between the workers' ranges.
        reader: a reader mapping inputs to work items (not together with ``weights``).
        use_checkpoint: resume an interrupted chunk recipe (see ``optimize``).
        item_loader: ``TokensLoader(...)`` for token datasets.
        start_method: ``"fork"`` or ``"spawn"`` for the workers.
        storage_options: options of the output's object store.
        keep_data_ordered: False: the workers share one queue of inputs.
        verbose: print and show progress.
        num_downloaders, num_uploaders, delete_cached_files, random_seed, reorder_files, state_dict,
        broadcast_paths: accepted for compatibility; unused.
    """

    def __init__(
        self,
        input_dir: str | Dir | None,
        output_dir: str | Dir | None = None,
        num_workers: int | None = None,
        align_chunking: bool = False,
        num_downloaders: int | None = None,
        num_uploaders: int | None = None,
        delete_cached_files: bool = True,
        fast_dev_run: bool | int | None = None,
        random_seed: int | None = 42,
        reorder_files: bool = True,
        weights: list[int] | None = None,
        reader: Any | None = None,
        state_dict: dict[int, int] | None = None,
        use_checkpoint: bool = False,
        item_loader: Any | None = None,
        start_method: str | None = None,
        storage_options: dict[str, Any] = {},  # noqa: B006 - LitData's signature (copied, never mutated)
        keep_data_ordered: bool = True,
        verbose: bool = True,
        broadcast_paths: bool = False,
    ) -> None:
        if reader is not None and weights is not None:
            raise ValueError("Either the reader or the weights needs to be defined.")
        self.input_dir = as_dir(input_dir)
        self.output_dir = as_dir(output_dir) if output_dir is not None else None
        self.num_workers = num_workers
        self.align_chunking = align_chunking
        self.num_downloaders = num_downloaders
        self.num_uploaders = num_uploaders
        self.delete_cached_files = delete_cached_files
        self.fast_dev_run = bool(cfg.get("processor_fast_dev_run")) if fast_dev_run is None else fast_dev_run
        self.random_seed = random_seed
        self.reorder_files = reorder_files
        self.weights = weights
        self.reader = reader
        self.state_dict = state_dict
        self.use_checkpoint = use_checkpoint
        self.item_loader = item_loader
        self.start_method = start_method
        self.storage_options = dict(storage_options or {})
        self.keep_data_ordered = keep_data_ordered
        self.verbose = verbose
        self.broadcast_paths = broadcast_paths

    def run(self, data_recipe: DataRecipe) -> None:
        """List the inputs with ``data_recipe.prepare_structure`` and process them with its ``prepare_item``.

        Raises:
            ValueError: not a recipe, ``prepare_structure`` returned neither a list nor a queue, a queue for a
                map recipe, or ``align_chunking`` without the recipe's ``chunk_size`` (LitData's messages);
                then whatever ``optimize``/``map`` raise.
        """
        if not isinstance(data_recipe, DataRecipe):
            raise ValueError("The provided value should be a data recipe.")
        items = data_recipe.prepare_structure(self.input_dir.path)
        is_queue = isinstance(items, multiprocessing.queues.Queue)
        if not isinstance(items, list) and not is_queue:
            raise ValueError("The `prepare_structure` should return a list of item metadata or a Queue.")
        out = self.output_dir if self.output_dir is not None else _default_output()
        storage_options = self.storage_options or data_recipe.storage_options
        common: dict[str, Any] = {
            "num_workers": self.num_workers,
            "fast_dev_run": self.fast_dev_run,
            "reader": self.reader,
            "start_method": self.start_method,
            "storage_options": storage_options,
            "keep_data_ordered": self.keep_data_ordered,
        }
        if isinstance(data_recipe, DataChunkRecipe):
            optimize(
                fn=_Samples(data_recipe),
                inputs=None if is_queue else items,
                queue=items if is_queue else None,
                output_dir=out,
                weights=self.weights,
                chunk_size=data_recipe.chunk_size,
                chunk_bytes=data_recipe.chunk_bytes,
                align_chunking=self.align_chunking,
                compression=data_recipe.compression,
                # a recipe subclass written for LitData 0.2.68 may not call our __init__
                compression_level=getattr(data_recipe, "compression_level", None),
                compression_batch_size=getattr(data_recipe, "compression_batch_size", None),
                encryption=data_recipe.encryption,
                use_checkpoint=self.use_checkpoint,
                item_loader=self.item_loader,
                key_fn=data_recipe.key_fn,
                verbose=self.verbose,
                mode="overwrite",
                **common,
            )
        elif isinstance(data_recipe, MapRecipe):
            if is_queue:
                raise ValueError("A MapRecipe needs a list of inputs; a Queue works with a DataChunkRecipe only.")
            _map(fn=_Files(data_recipe), inputs=items, output_dir=out, weights=self.weights, **common)
        else:
            raise ValueError(
                f"{type(data_recipe).__name__} is a DataRecipe but neither a DataChunkRecipe nor a MapRecipe"
            )
