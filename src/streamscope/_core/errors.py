"""The one exception tree of streamscope.

Every error streamscope raises on purpose derives from :class:`StreamscopeError`. Where users of LitData
would catch a builtin (``ValueError`` for a bad argument, ``FileNotFoundError`` for a missing file,
``TimeoutError``), the streamscope class also derives from that builtin, so code written against LitData
keeps working.

Subsystems add their classes in their own section below; keep sections in layer order.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "CacheError",
    "CheckpointMismatchError",
    "ChunkDownloadError",
    "ChunkNotFoundError",
    "ChunkOverflowError",
    "ChunkWaitTimeoutError",
    "ClusterUnreachableError",
    "ConfigError",
    "CorruptChunkError",
    "DatasetError",
    "DatasetExistsError",
    "DatasetIndexError",
    "DuplicateKeyError",
    "EmptyRawSourceError",
    "EncryptionError",
    "ExecutorError",
    "FormatError",
    "IndexNotFoundError",
    "InvalidRangeError",
    "ItemLoaderMismatchError",
    "KeyIndexExistsError",
    "KeyIndexNotFoundError",
    "MapReturnError",
    "MergeDatasetsError",
    "MissingDependencyError",
    "NodeConfigError",
    "NodeRankClaimedError",
    "NotAStreamingDatasetError",
    "ObjectChangedError",
    "ObjectNotFoundError",
    "OptimizeError",
    "OptimizeInputError",
    "OutputDirError",
    "PlanError",
    "PrometheusPortError",
    "RawDatasetError",
    "RawDownloadError",
    "RawDownloadTimeoutError",
    "RawFileSizeError",
    "RawIndexError",
    "RawSchemeError",
    "RawSetupError",
    "RawSourceNotFoundError",
    "SampleKeyError",
    "SchemaMismatchError",
    "StateDictError",
    "StorageAuthError",
    "StorageConnectionError",
    "StorageError",
    "StorageResponseError",
    "StorageTimeoutError",
    "StreamscopeError",
    "TelemetryConfigError",
    "TraceConfigError",
    "TransientStorageError",
    "TruncatedBodyError",
    "TuneBudgetError",
    "UnsupportedOperationError",
    "UnsupportedURLError",
    "UpdateSessionError",
    "WorkerDiedError",
    "WorkerFailedError",
    "short_repr",
]


def short_repr(obj: Any, limit: int = 200) -> str:
    """``repr(obj)`` cut to ``limit`` characters, for error messages (a broken ``__repr__`` is reported, not raised)."""
    try:
        r = repr(obj)
    except Exception as exc:  # noqa: BLE001 - a broken __repr__ must not hide the real error
        r = f"<unrepresentable {type(obj).__name__}: {exc}>"
    return r if len(r) <= limit else r[: limit - 3] + "..."


class StreamscopeError(Exception):
    """Base of every error streamscope raises on purpose."""


class ConfigError(StreamscopeError, ValueError):
    """A knob, argument or environment variable has a value streamscope cannot use."""


class MissingDependencyError(StreamscopeError, ModuleNotFoundError):
    """A feature needs an optional package that is not installed; the message names the extra that installs it
    (see :mod:`streamscope._core.optional`). Also a ``ModuleNotFoundError``, so ``except ImportError`` works."""


# --- format ---------------------------------------------------------------------------------------


class FormatError(StreamscopeError, ValueError):
    """Bytes on disk or a sample do not match the chunk format."""


class SchemaMismatchError(FormatError, TypeError):
    """A sample's leaves differ in structure or type from the first sample's (also a TypeError, which LitData's
    serializers raise for a leaf of the wrong type)."""


class CorruptChunkError(FormatError):
    """A chunk file is truncated or its header is inconsistent; names the file and offset."""


class DuplicateKeyError(FormatError):
    """A keys sidecar (``keys/shard-*.parquet``) would hold the same key twice; the message names it."""


class ChunkOverflowError(FormatError):
    """A chunk would exceed the 4 GiB limit of the u32 offsets in the chunk header."""


class EncryptionError(FormatError):
    """Encrypted data cannot be written or read: no/wrong key, algorithm or level mismatch, bad ciphertext."""


# --- storage --------------------------------------------------------------------------------------


class StorageError(StreamscopeError, OSError):
    """An object store or filesystem operation failed. The message names the URL (credentials removed)."""


class ObjectNotFoundError(StorageError, FileNotFoundError):
    """The object, key, bucket or file does not exist."""


class StorageAuthError(StorageError, PermissionError):
    """The store refused the credentials."""


class StorageTimeoutError(StorageError, TimeoutError):
    """The store did not answer within the deadline."""


class UnsupportedURLError(StorageError, ValueError):
    """The URL is malformed or its scheme has no backend."""


class InvalidRangeError(StorageError, ValueError):
    """A byte range is negative, reversed, or reaches past the end of the object."""


class StorageResponseError(StorageError):
    """The server answered with something that is not a valid response (garbage, wrong length, bad XML)."""


class TransientStorageError(StorageError):
    """A failure worth retrying (5xx, 503 SlowDown, connection reset, truncated body).

    Raised to the caller only after the retry policy gave up; the message says how many attempts were made.
    """


class StorageConnectionError(TransientStorageError, ConnectionError):
    """The endpoint could not be reached or dropped the connection."""


class TruncatedBodyError(TransientStorageError):
    """Fewer bytes arrived than the response announced (Content-Length) or the caller expected."""


class ObjectChangedError(TransientStorageError):
    """The object changed (ETag mismatch) while a download was resuming; the download restarts from byte 0."""


class UnsupportedOperationError(StorageError):
    """The store cannot do this at all (e.g. writing to or listing a read-only http(s) store)."""


# --- cache ----------------------------------------------------------------------------------------


class CacheError(StreamscopeError, OSError):
    """The local chunk cache could not hold or publish a file."""


class ChunkWaitTimeoutError(CacheError, FileNotFoundError):
    """A chunk did not become available in time (LitData's ``ChunkWaitTimeoutError`` is a FileNotFoundError)."""

    def __init__(self, path: str, waited_s: float) -> None:
        super().__init__(f"chunk {path!r} was not available after {waited_s:.1f} s")
        self.path = path
        self.waited_s = waited_s


class ChunkDownloadError(CacheError):
    """Fetching or publishing a chunk into the cache failed; names the chunk and the URL (no credentials)."""


class ChunkNotFoundError(ChunkDownloadError, FileNotFoundError):
    """The chunk to fetch is not in the store (a FileNotFoundError, as the store's own error is)."""


# --- optimize -------------------------------------------------------------------------------------


class OptimizeError(StreamscopeError, RuntimeError):
    """An optimize() or map() job failed; the message names the failing input."""


class DatasetExistsError(OptimizeError):
    """The output directory already holds a dataset and ``mode`` is None."""


class OptimizeInputError(OptimizeError, ValueError):
    """The inputs or arguments of optimize()/map() cannot be used (empty inputs, bad mode, bad sizes)."""


class OutputDirError(OptimizeError, OSError):
    """The output directory cannot be created or written; names the directory."""


class WorkerFailedError(OptimizeError):
    """``fn`` (or the serializer after it) raised for one input; names the input index and repr."""


class WorkerDiedError(OptimizeError):
    """A worker process ended without reporting (killed, segfault, os._exit); names the worker and signal."""


class CheckpointMismatchError(OptimizeError, ValueError):
    """``use_checkpoint=True`` found a checkpoint written for different inputs, workers or chunk settings."""


class MapReturnError(OptimizeError, ValueError):
    """map()'s ``fn`` returned a value; it must write files into its ``output_dir`` and return None."""


class NodeConfigError(OptimizeError, ValueError):
    """Multi-node optimize()/map(): a node variable is unusable (not a number, rank out of range) or the nodes
    of one job disagree (node count, workers, inputs, chunk settings). Raised before the node writes any chunk."""


class NodeRankClaimedError(NodeConfigError):
    """Another live node already holds this node's rank in the shared output_dir (two nodes given one rank)."""


class ExecutorError(OptimizeError):
    """The executor of optimize()/map() (``executor="ray"``, an executor object) cannot run the workers."""


class ClusterUnreachableError(ExecutorError, ConnectionError):
    """No cluster answers at the executor's address (``RAY_ADDRESS``, ``RayExecutor(address=...)``); names it."""


# --- stream ---------------------------------------------------------------------------------------


class DatasetError(StreamscopeError, ValueError):
    """A streaming dataset cannot be built or iterated with these arguments."""


class IndexNotFoundError(DatasetError, FileNotFoundError):
    """A dataset directory has no ``index.json``; the message names the path looked at."""


class ItemLoaderMismatchError(DatasetError):
    """The item_loader given to a dataset does not match the ``item_loader`` recorded in its index."""


class StateDictError(DatasetError):
    """A state_dict does not belong to this dataset, seed or configuration."""


class DatasetIndexError(DatasetError, IndexError):
    """An index out of range: an ``IndexError`` (Python's convention) and a ``ValueError`` (LitData's)."""


class NotAStreamingDatasetError(DatasetError, RuntimeError):
    """StreamingDataLoader got a dataset it cannot drive (a ``RuntimeError`` as in LitData, and a ValueError)."""


class PlanError(DatasetError):
    """The epoch plan cannot be built: no samples, a rank left without data, or a bad argument."""


class KeyIndexNotFoundError(DatasetError, KeyError):
    """Keyed access (``get_by_key``, ``ds["key"]``) on a dataset without a ``keys/`` sidecar (a KeyError, like LitData)."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class SampleKeyError(DatasetError, KeyError):
    """``get_by_key(key)``: no sample has this key (a KeyError, like LitData); the message names the key."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class UpdateSessionError(DatasetError, NotImplementedError):
    """``dataset_update``: a remote dataset (LitData raises NotImplementedError) or a session already committed."""


class KeyIndexExistsError(DatasetError, FileExistsError):
    """``build_keys_index`` over a dataset that already has a keys sidecar and ``overwrite=False``."""


# --- raw ------------------------------------------------------------------------------------------


class RawDatasetError(StreamscopeError, ValueError):
    """A raw-file dataset cannot be indexed or read."""


class RawSourceNotFoundError(RawDatasetError, FileNotFoundError):
    """The input folder, or a file listed in the index, does not exist (any more)."""


class EmptyRawSourceError(RawDatasetError):
    """The input folder holds no file the indexer accepts."""


class RawFileSizeError(RawDatasetError):
    """A file is smaller than the size recorded in the index (truncated or replaced after indexing)."""


class RawSchemeError(RawDatasetError):
    """The input URL's scheme is not supported for raw-file streaming."""


class RawSetupError(RawDatasetError, TypeError):
    """``setup(files)`` returned something other than a list of FileMetadata or of lists of FileMetadata."""


class RawIndexError(RawDatasetError):
    """An ``index.json.zstd`` file is unreadable or does not match the schema."""


class RawDownloadError(RawDatasetError, OSError):
    """A file could not be fetched after the retries allowed; names the path and the last cause."""


class RawDownloadTimeoutError(RawDatasetError, TimeoutError):
    """A batch of files did not arrive within its time budget."""


# --- events / trace -------------------------------------------------------------------------------


class TraceConfigError(StreamscopeError, ValueError):
    """An unknown trace level or category, or an unusable log destination."""


# --- telemetry: the Prometheus endpoint ----------------------------------------------------------


class PrometheusPortError(StreamscopeError, OSError):
    """The Prometheus endpoint cannot listen on its port (in use, or not allowed); the message names it."""


# --- tune -----------------------------------------------------------------------------------------


class TuneBudgetError(ConfigError):
    """The auto-tuner's budgets (RAM, the cache's disk) are too small for the loader to run at all; raised before
    the first batch, naming the budget, its knob or variable, and what the loader needs."""


# --- telemetry: OpenTelemetry --------------------------------------------------------------------


class TelemetryConfigError(StreamscopeError, ValueError):
    """A malformed ``OTEL_*`` environment variable or ``enable_telemetry`` argument; the message names it."""


# --- api (merge_datasets) -------------------------------------------------------------------------


class MergeDatasetsError(StreamscopeError, ValueError):
    """``merge_datasets`` refused its inputs (too few, no index, incompatible configs, output not empty)."""
