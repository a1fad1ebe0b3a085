"""streamscope: a LitData-compatible streaming-data engine for deep-learning training that you can see into.

Switch from LitData by changing one import: ``import streamscope as ld``.

Public names are imported lazily, so ``import streamscope`` stays cheap (DataLoader workers started with
"spawn" import it before they do anything else).
"""

from __future__ import annotations

import importlib
import os
from typing import Any

from streamscope._core import hooks as _hooks
from streamscope._core.dirs import Dir  # noqa: F401
from streamscope._core.errors import ChunkWaitTimeoutError, StreamscopeError  # noqa: F401

__version__ = "0.1.0"

# public name -> module that defines it
_LAZY: dict[str, str] = {
    "optimize": "streamscope.processing",
    "map": "streamscope.processing",
    "walk": "streamscope.processing",
    "StreamingDataset": "streamscope.engine",
    "StreamingDataLoader": "streamscope.engine",
    "CombinedStreamingDataset": "streamscope.engine.combined",
    "ParallelStreamingDataset": "streamscope.engine.parallel",
    "train_test_split": "streamscope.engine",
    "TokensLoader": "streamscope.format.item_loader",
    "StreamingRawDataset": "streamscope.raw",
    "enable_tracer": "streamscope.api.tracing",
    "flush_tracer": "streamscope.api.tracing",
    "metrics": "streamscope.api.tracing",
    "enable_telemetry": "streamscope.api.telemetry",
    "merge_datasets": "streamscope.api.merge",
    "breakpoint": "streamscope.api.breakpoint",
    "index_parquet_dataset": "streamscope.engine.parquet",
    "index_hf_dataset": "streamscope.engine.hf_index",
    "optimize_hf": "streamscope.processing.optimize_hf",
    "build_keys_index": "streamscope.engine.key_lookup",
    "dataset_update": "streamscope.engine.update",
    "litdata_collate": "streamscope.engine.collate_fn",
    "NumaAffinity": "streamscope.utilities.affinity",
    "get_gpu_affinity": "streamscope.utilities.affinity",
    "get_numa_affinity": "streamscope.utilities.affinity",
    "complete_dataset": "streamscope.format.complete",
    "is_complete_dataset": "streamscope.format.complete",
    "list_media_folder": "streamscope.processing.media_folder",
    "iter_webdataset_tar": "streamscope.processing.media_folder",
}

__all__ = sorted(["ChunkWaitTimeoutError", "Dir", "StreamscopeError", "__version__", *_LAZY])


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'streamscope' has no attribute {name!r}")
    from streamscope.events.setup import configure_from_env

    configure_from_env()  # a public entry point: tracing switched on by the environment starts here (once)
    try:
        value = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as exc:
        raise AttributeError(f"streamscope.{name} is not available: {exc}") from exc
    globals()[name] = value
    return value


def _first_use() -> None:
    """The ``first_use`` hook (the engine runs it once per process, when a dataset or loader is built): what the
    environment switches on with no call in the training script. Unset, it costs one environment lookup and imports
    nothing; set, the rank's Prometheus endpoint opens (``streamscope.telemetry.prometheus.start_from_env``: a
    rank's main process only, a failure is one line on stderr)."""
    if not os.environ.get("STREAMSCOPE_PROMETHEUS_PORT", "").strip():
        return
    from streamscope.telemetry.prometheus import start_from_env

    start_from_env(warn=True)


# provided here, not by a dotted path the engine would import: this module runs before any other of the package
_hooks.provide(_hooks.FIRST_USE, _first_use)


def __dir__() -> list[str]:
    return __all__
