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
from streamscope._core.version import VERSION

__version__ = VERSION

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
    from streamscope.events import configure_from_env

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


def _autotuner(loader: Any) -> Any:
    """The ``autotuner`` hook: ``streamscope.api.autotune.attach`` (imported when a loader asks for tuning; importing
    it provides itself in place of this function)."""
    from streamscope.api.autotune import attach

    return attach(loader)


def _observer(loader: Any) -> Any:
    """The ``observer`` hook: the capacity model's gauges of a loader the tuner does not tune, metrics on
    (``streamscope.api.observe.before_epoch``, imported at the first epoch that asks)."""
    from streamscope.api.observe import before_epoch

    return before_epoch(loader)


def _litracer_sink() -> Any:
    """The ``litracer`` exporter of the event bus (the default when tracing is on and no sink is named)."""
    from streamscope.trace.exporters import LitracerFileSink

    return LitracerFileSink()


def _span_sink() -> Any:
    """The OpenTelemetry span exporter of the event bus, the name ``telemetry.otel`` adds to
    ``STREAMSCOPE_TRACE_SINKS`` (so that the rank's workers spool their spans to it)."""
    from streamscope.telemetry.otel import span_sink

    return span_sink()


def _runtime() -> None:
    """The ``runtime`` hook: the event bus's runtime (``streamscope.recording``: recorder, flusher, metrics, the
    wait split) installed into the event API (``streamscope.events.set_runtime``). The API runs it the first time
    it needs the runtime (a configuration, a flush, a staged span), so ``import streamscope`` imports neither."""
    from streamscope.recording import install

    install()


def _loader_observer() -> None:
    """The ``loader_observer`` hook: the runtime's loader observer (``streamscope.recording.loader_observer``:
    parcels, the wait split, the loader's events and metrics) installed into the engine
    (``streamscope.engine.observer.set_factory``). The engine runs it when the first loader is built."""
    from streamscope.engine.observer import set_factory
    from streamscope.recording.loader_observer import RecordingObserver

    set_factory(RecordingObserver)


def _otel_entry() -> None:
    """The ``otel_entry`` hook: run once per process when OpenTelemetry's API is loaded (see
    ``streamscope.recording.setup``)."""
    from streamscope.telemetry.otel import on_entry

    on_entry()


# The runtime pieces the lower layers call (the engine, the event bus) are installed here, once, as OpenTelemetry's
# set_tracer_provider installs a provider: a lower layer never names a higher one (tests/test_import_graph.py).
# Python imports a package before any of its submodules, so every process that imports any streamscope module has
# run this first: a DataLoader worker started with "spawn" that imports only streamscope.engine.dataset (to unpickle
# its dataset) gets its sinks and hooks too (tests/_core/test_hooks.py checks it). The functions import what they
# install when first called: ``import streamscope`` stays cheap.
_hooks.provide(_hooks.RUNTIME, _runtime)
_hooks.provide(_hooks.FIRST_USE, _first_use)
_hooks.provide(_hooks.AUTOTUNER, _autotuner)
_hooks.provide("observer", _observer)
_hooks.provide(_hooks.OTEL_ENTRY, _otel_entry)
_hooks.provide(_hooks.LOADER_OBSERVER, _loader_observer)
_hooks.provide(_hooks.sink("litracer"), _litracer_sink)
# the value STREAMSCOPE_TRACE_SINKS carried before the sink got its name (a job's environment may still hold it)
_hooks.provide(_hooks.sink("streamscope.trace.litracer:LitracerFileSink"), _litracer_sink)
# by the spec telemetry.otel.SPAN_SINK names (the runtime would else import a higher layer by that dotted path)
_hooks.provide(_hooks.sink("streamscope.telemetry.otel:span_sink"), _span_sink)


def __dir__() -> list[str]:
    return __all__
