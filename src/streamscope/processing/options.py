"""The validated arguments of ``optimize()`` and ``map()``: one frozen object that travels down the write path.

``optimize()`` and ``map()`` keep LitData's signatures; their bodies build an :class:`OptimizeOptions` or a
:class:`MapOptions` from the arguments as given. Building one validates every argument, in the order the checks
were always made, before any process starts or any file is touched, and derives what the rest of the job reads:
the output location ``url`` (``{%...}`` time templates expanded), ``chunk_bytes`` as an int (``cbytes``), and the
chunk layout (``layout``: ``write_format``, ``compression_level``, ``compression_batch_size``; for
``mode="append"`` it depends on the dataset appended to, so :meth:`OptimizeOptions.layout_for` decides it once the
output is open).
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from streamscope._core.dirs import Dir, as_dir
from streamscope._core.errors import ConfigError, FormatError, OptimizeInputError
from streamscope._core.units import parse_bytes
from streamscope.format.compression import parse_compression
from streamscope.format.framed_write import resolve_compression_level
from streamscope.format.writer import layout_of, resolve_write_format

__all__ = ["JobOptions", "MapOptions", "OptimizeOptions", "check_compression", "expand_time_template", "write_options"]


_VALID_MODES = (None, "append", "overwrite")
_TIME_TEMPLATE = re.compile(r"\{(%[^{}]*)\}")


@dataclass(frozen=True, kw_only=True)
class JobOptions:
    """What ``optimize()`` and ``map()`` share: the inputs and how they are dealt to workers, the output, and the
    arguments checked and dropped (``num_nodes``/``machine`` must be None). ``url``: the output's location."""

    fn: Callable[..., Any]
    inputs: Sequence[Any] | None
    output_dir: str | os.PathLike[str] | Dir
    queue: Any = None
    weights: list[int] | None = None
    num_workers: int | None = None
    fast_dev_run: bool | int = False
    num_nodes: int | None = None
    machine: str | None = None
    reader: Any = None
    batch_size: int | None = None
    start_method: str | None = None
    storage_options: dict[str, Any] = field(default_factory=dict)
    keep_data_ordered: bool = True
    verbose: bool = True
    url: str = field(init=False, default="")

    def _resolve_url(self) -> None:
        object.__setattr__(self, "url", _location(self.output_dir))


@dataclass(frozen=True, kw_only=True)
class OptimizeOptions(JobOptions):
    """``optimize()``'s arguments, validated (see :func:`streamscope.processing.functions.optimize`).

    Raises (on construction):
        OptimizeInputError: a bad argument (LitData's sentence first where LitData has one).
        ConfigError: a bad compression, ``compression_level`` or ``write_format`` knob value.
        MissingDependencyError: ``key_fn`` without pyarrow.
    """

    chunk_size: int | None = None
    chunk_bytes: int | str | None = None
    align_chunking: bool = False
    compression: str | None = None
    compression_level: str | None = None
    compression_batch_size: int | None = None
    encryption: Any = None
    mode: str | None = None
    use_checkpoint: bool = False
    item_loader: Any = None
    key_fn: Callable[[Any], Any] | None = None
    cbytes: int | None = field(init=False, default=None)
    layout: dict[str, Any] | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        if not callable(self.fn):
            raise OptimizeInputError(f"fn must be callable, got {type(self.fn).__name__}")
        queue, inputs = self.queue, self.inputs
        if queue is not None and inputs is not None:
            raise OptimizeInputError("pass either inputs or queue to optimize(), not both")
        if queue is None and inputs is None:
            raise OptimizeInputError("optimize() needs inputs or queue")
        if queue is not None and not (callable(getattr(queue, "get", None)) and callable(getattr(queue, "put", None))):
            raise OptimizeInputError(f"queue must be a multiprocessing.Queue, got {type(queue).__name__}")
        if self.use_checkpoint and (queue is not None or not self.keep_data_ordered):
            raise OptimizeInputError(
                "use_checkpoint=True needs a fixed split of the inputs: it cannot be combined with queue=... or "
                "keep_data_ordered=False"
            )
        self._check_chunking()
        if self.mode not in _VALID_MODES:
            raise OptimizeInputError(  # LitData's sentence first
                f"The provided `mode` should be either `append` or `overwrite`: mode must be None, 'append' or "
                f"'overwrite', got {self.mode!r}"
            )
        if self.mode != "append":
            object.__setattr__(self, "layout", self.layout_for(None))
        _reject_platform_args(self.num_nodes, self.machine)
        _check_encryption_arg(self.encryption, self.item_loader)
        self._check_key_fn()
        self._resolve_url()

    def _check_chunking(self) -> None:
        chunk_size, chunk_bytes = self.chunk_size, self.chunk_bytes
        if chunk_size is None and chunk_bytes is None:
            raise OptimizeInputError("optimize() needs chunk_size or chunk_bytes")
        if chunk_size is not None and chunk_bytes is not None:
            raise OptimizeInputError("pass either chunk_size or chunk_bytes to optimize(), not both")
        if chunk_size is not None and (not isinstance(chunk_size, int) or chunk_size <= 0):
            raise OptimizeInputError(f"chunk_size must be a positive int, got {chunk_size!r}")
        cbytes = None if chunk_bytes is None else parse_bytes(chunk_bytes)
        if cbytes is not None and cbytes <= 0:
            raise OptimizeInputError(f"chunk_bytes must be positive, got {chunk_bytes!r}")
        object.__setattr__(self, "cbytes", cbytes)
        if self.align_chunking and chunk_size is None:
            raise OptimizeInputError(  # LitData's sentence first
                "`align_chunking` is set to True, but the `chunk_size` is not defined in the data recipe: "
                "align_chunking=True needs chunk_size"
            )

    def _check_key_fn(self) -> None:
        key_fn = self.key_fn
        if key_fn is not None and not callable(key_fn):
            raise OptimizeInputError(f"key_fn must be callable (sample -> str or int key), got {key_fn!r}")
        if key_fn is not None and self.encryption is not None:
            raise OptimizeInputError("optimize(key_fn=...) does not support encrypted datasets")
        if key_fn is not None:  # before the work: the keys sidecar is written with pyarrow at the end
            from streamscope.format.keys_store import KEYS_FEATURE
            from streamscope.format.parquet import require_pyarrow

            require_pyarrow(KEYS_FEATURE, "keys")

    @property
    def align(self) -> int | None:
        """Whole chunks of this many work items per worker (``align_chunking``), else None."""
        return self.chunk_size if self.align_chunking else None

    def layout_for(self, existing_config: dict[str, Any] | None) -> dict[str, Any]:
        """The chunk layout (:func:`write_options`) for the dataset appended to (``existing_config``), or a new
        one (None)."""
        return write_options(
            existing_config,
            self.compression,
            self.compression_level,
            self.compression_batch_size,
            self.encryption,
            self.item_loader,
        )

    def writer_kwargs(self, layout: dict[str, Any]) -> dict[str, Any]:
        """The keyword arguments of every worker's :class:`~streamscope.format.writer.ChunkWriter`."""
        return {
            "chunk_size": self.chunk_size,
            "chunk_bytes": self.cbytes,
            "compression": self.compression,
            "item_loader": self.item_loader,
            "encryption": self.encryption,
            **layout,
        }

    def writer_record(self, layout: dict[str, Any]) -> dict[str, Any]:
        """The writer settings as the checkpoint and node records hold them (plain JSON)."""
        return {
            "chunk_size": self.chunk_size,
            "chunk_bytes": self.cbytes,
            "compression": self.compression,
            "item_loader": None if self.item_loader is None else type(self.item_loader).__name__,
            "encryption": None if self.encryption is None else self.encryption.state_dict(),
            **layout,
        }


@dataclass(frozen=True, kw_only=True)
class MapOptions(JobOptions):
    """``map()``'s arguments, validated (see :func:`streamscope.processing.functions.map`).

    Raises (on construction):
        OptimizeInputError: ``fn`` not callable, platform arguments, an output_dir naming no directory.
    """

    error_when_not_empty: bool = False

    def __post_init__(self) -> None:
        if not callable(self.fn):
            raise OptimizeInputError(f"fn must be callable, got {type(self.fn).__name__}")
        _reject_platform_args(self.num_nodes, self.machine)
        self._resolve_url()


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
