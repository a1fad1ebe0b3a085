"""Every knob of streamscope, in one place, with its default, unit and environment variable.

A knob is read with :func:`get`. Resolution order: a value set at run time with :func:`set_value` (the user's
code and tests do this), then the environment variable, then the default. Values are checked against the knob's
type and bounds: a bad environment value raises :class:`~streamscope._core.errors.ConfigError` naming the
variable, a bad :func:`set_value` one naming the knob.

*Live* knobs may change while a job runs. They declare bounds and a step (the auto-tuner's move) and have a slot
on every :class:`~streamscope._core.board.KnobBoard`: the shared-memory board a dataset creates and its
DataLoader workers read, so a value set in the main process (:func:`set_value`, or the tuner's
``board.propose``) reaches every worker. A live knob set explicitly (here, by environment variable or by a
dataset argument) is *pinned* on the boards: the tuner never moves it.

Subsystems declare their knobs in their own section below (keep sections in layer order) with
:func:`knob`. ``python -m streamscope knobs`` prints this table; ``docs/knobs.md`` is generated from it.
"""

from __future__ import annotations

import math
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from streamscope._core.errors import ConfigError
from streamscope._core.units import cache_budget, parse_bytes

__all__ = [
    "ARGUMENT_KNOBS",
    "KNOBS",
    "Knob",
    "WRITE_FORMATS",
    "default_arg",
    "explicit",
    "get",
    "given",
    "knob",
    "live_names",
    "parse_port",
    "parse_write_format",
    "reset",
    "set_value",
    "table",
]


def _parse_bool(raw: str) -> bool:
    low = raw.strip().lower()
    if low in ("1", "true", "yes", "on"):
        return True
    if low in ("0", "false", "no", "off", ""):
        return False
    raise ValueError(f"expected a boolean (1/0, true/false), got {raw!r}")


def _parse_str(raw: str) -> str:
    return raw


def _parse_int(raw: str) -> int:
    try:
        return int(raw.strip())
    except ValueError:
        raise ValueError(f"expected a whole number, got {raw!r}") from None


def _parse_float(raw: str) -> float:
    try:
        value = float(raw.strip())
    except ValueError:
        raise ValueError(f"expected a number, got {raw!r}") from None
    if not math.isfinite(value):
        raise ValueError(f"expected a finite number, got {raw!r}")
    return value


_PARSERS: dict[type, Callable[[str], Any]] = {int: _parse_int, float: _parse_float, bool: _parse_bool, str: _parse_str}


@dataclass(frozen=True)
class Knob:
    """One setting: its name, default, unit, environment variable(s) and meaning.

    ``kind`` is the type of its values (int, float, bool or str; None: not checked). ``bounds`` (inclusive) and
    ``step`` are declared by every live knob: :meth:`check` enforces the bounds, and ``step`` is the smallest move
    worth making (the tuner's grid, see :meth:`snap` and :meth:`moved`). ``unset`` is the value that means "the
    dataset's own setting" (``prefetch_depth=0``: each dataset's ``max_pre_download``), or None.
    """

    name: str
    default: Any
    unit: str
    env: tuple[str, ...]
    doc: str
    parse: Callable[[str], Any]
    live: bool = False  # True: may change while a job runs (read it each time you use it, from the board)
    kind: type | None = None
    bounds: tuple[Any, Any] | None = None
    step: Any = None
    unset: Any = None
    value_default: Any = None  # ``default`` as a value of ``kind`` (``"100GB"`` -> 100_000_000_000)
    lazy_default: bool = False  # the default is worked out at each read (it depends on the machine, e.g. "auto")

    def default_value(self) -> Any:
        """The default as a value of ``kind``."""
        return self.check(self.default, f"default of knob {self.name}") if self.lazy_default else self.value_default

    def check(self, value: Any, where: str | None = None) -> Any:
        """``value`` as a value of this knob (a string is parsed first), or :class:`ConfigError` naming ``where``
        (default: the knob) when it has the wrong type or lies outside the bounds."""
        where = where or f"knob {self.name}"
        if isinstance(value, str) and self.kind not in (None, str):
            try:
                value = self.parse(value)
            except (ValueError, TypeError) as exc:
                raise ConfigError(f"{where}: {exc}") from None
        kind = self.kind
        if kind is not None:
            if kind is bool:
                ok = isinstance(value, bool)
            elif kind is int:
                ok = isinstance(value, int) and not isinstance(value, bool)
            elif kind is float:
                ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
                value = float(value) if ok else value
            else:
                ok = isinstance(value, kind)
            if not ok:
                raise ConfigError(f"{where}: expected {kind.__name__}, got {type(value).__name__} {value!r}")
        if self.bounds is not None and kind is not bool:
            lo, hi = self.bounds
            if not lo <= value <= hi:
                raise ConfigError(f"{where}: {value!r} is outside its bounds {lo}..{hi} ({self.unit})")
        return value

    def snap(self, value: float) -> Any:
        """The value of the step grid ``lo, lo + step, ..., hi`` nearest ``value`` (clamped into the bounds)."""
        if self.bounds is None or not self.step:
            raise ConfigError(f"knob {self.name} declares no bounds and step")
        lo, hi = self.bounds
        k = round((min(max(value, lo), hi) - lo) / self.step)
        out = lo + k * self.step
        if out > hi:
            out -= self.step
        return self.kind(out) if self.kind in (int, float, bool) else out

    def moved(self, value: Any, steps: int) -> Any:
        """``value`` moved by ``steps`` steps (negative: down), clamped into the bounds."""
        if self.bounds is None or not self.step:
            raise ConfigError(f"knob {self.name} declares no bounds and step")
        lo, hi = self.bounds
        out = min(max(value + steps * self.step, lo), hi)
        return self.kind(out) if self.kind in (int, float, bool) else out


KNOBS: dict[str, Knob] = {}
_overrides: dict[str, Any] = {}
_lock = threading.Lock()
#: Called as ``hook(name, value)`` after :func:`set_value` (``value`` None after :func:`reset`): the knob boards
#: of this process pass the change on to their workers (see :mod:`streamscope._core.board`).
_HOOKS: list[Callable[[str, Any], None]] = []


def knob(
    name: str,
    default: Any,
    unit: str,
    env: str | tuple[str, ...],
    doc: str,
    parse: Callable[[str], Any] | None = None,
    live: bool = False,
    *,
    kind: type | None = None,
    bounds: tuple[Any, Any] | None = None,
    step: Any = None,
    unset: Any = None,
    lazy_default: bool = False,
) -> Knob:
    """Declare a knob. ``env`` may list several variable names; the first one set wins.

    ``kind`` defaults to the type of ``default`` (None when the default is None, or a string read by a custom
    ``parse``). A live knob must declare ``bounds`` and ``step``. ``lazy_default``: the default is parsed at each
    read, not at import (a default that measures the machine; importing reads no disk and no environment).
    """
    if name in KNOBS:
        raise ConfigError(f"knob {name!r} declared twice")
    envs = (env,) if isinstance(env, str) else tuple(env)
    if kind is None and default is not None and not (isinstance(default, str) and parse is not None):
        kind = type(default)
    if parse is None:
        parse = _PARSERS.get(kind or type(default), _parse_str)
    if live and (bounds is None or not step or kind not in (int, float, bool)):
        raise ConfigError(f"live knob {name!r} must be a number or a flag and declare bounds and a step")
    if bounds is not None and not bounds[0] <= bounds[1]:
        raise ConfigError(f"knob {name!r}: bounds {bounds} are empty")
    if step is not None and not step > 0:
        raise ConfigError(f"knob {name!r}: step must be > 0, got {step!r}")
    k = Knob(name, default, unit, envs, doc, parse, live, kind, bounds, step, unset)
    value_default = default if default is None or lazy_default else k.check(default, f"default of knob {name}")
    k = Knob(name, default, unit, envs, doc, parse, live, kind, bounds, step, unset, value_default, lazy_default)
    KNOBS[name] = k
    return k


def _knob(name: str) -> Knob:
    try:
        return KNOBS[name]
    except KeyError:
        raise ConfigError(f"unknown knob {name!r}; known: {', '.join(sorted(KNOBS))}") from None


def _from_env(k: Knob) -> tuple[Any, str] | None:
    """(value, variable) of the first environment variable of ``k`` that is set, checked; None when none is."""
    for var in k.env:
        raw = os.environ.get(var)
        if raw is not None:
            where = f"environment variable {var}={raw!r} (knob {k.name})"
            try:
                value = k.parse(raw)
            except (ValueError, TypeError) as exc:
                raise ConfigError(f"{where} is not valid: {exc}") from None
            return k.check(value, where), var
    return None


def get(name: str) -> Any:
    """Current value of knob ``name`` in this process (the run-time override, the environment, the default)."""
    k = _knob(name)
    if name in _overrides:
        return _overrides[name]
    found = _from_env(k)
    return found[0] if found is not None else k.default_value()


def explicit(name: str) -> tuple[Any, str] | None:
    """``(value, where)`` when the user set knob ``name`` explicitly in this process: by :func:`set_value`
    (``where`` = ``"set_value"``) or by environment variable (``where`` = its name); None otherwise."""
    k = _knob(name)
    if name in _overrides:
        return _overrides[name], "set_value"
    return _from_env(k)


class _IntDefault(int):
    """A parameter's default int: equal to the int, but told apart from the same value passed by the caller."""

    __slots__ = ()


class _StrDefault(str):
    """A parameter's default string (see :class:`_IntDefault`)."""

    __slots__ = ()


def default_arg(value: Any) -> Any:
    """``value`` marked as a parameter's default, for :func:`given` (``max_pre_download: int = default_arg(2)``;
    the signature still shows ``2`` and compares equal to it)."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise TypeError(f"default_arg takes an int or a str, got {value!r}")
    return _IntDefault(value) if isinstance(value, int) else _StrDefault(value)


def given(value: Any) -> bool:
    """False for a value made by :func:`default_arg` (the caller left the parameter out), True otherwise: a
    dataset argument the user gave pins its knob (the tuner leaves it)."""
    return type(value) not in (_IntDefault, _StrDefault)


def set_value(name: str, value: Any) -> None:
    """Set a knob at run time in this process, and on every knob board this process created (so a live knob
    reaches the DataLoader workers too; there it is pinned: the tuner leaves it alone).

    Raises:
        ConfigError: unknown knob, or a value of the wrong type or outside the knob's bounds (naming the knob).
    """
    value = _knob(name).check(value)
    with _lock:
        _overrides[name] = value
    for hook in list(_HOOKS):
        hook(name, value)


def reset(name: str | None = None) -> None:
    """Drop run-time overrides (all of them, or one); the boards of this process go back to what the
    environment and their dataset's arguments say."""
    with _lock:
        names = list(_overrides) if name is None else [name]
        for n in names:
            _overrides.pop(n, None)
    for hook in list(_HOOKS):
        for n in names:
            hook(n, None)


#: Dataset arguments that start a live knob on the dataset's board, as (class, argument, knob, note):
#: given, the argument pins the knob (docs/knobs.md is generated from this).
ARGUMENT_KNOBS: tuple[tuple[str, str, str, str], ...] = (
    ("StreamingDataset", "max_pre_download", "prefetch_depth", "chunks ahead of each reader"),
    (
        "StreamingDataset",
        "max_cache_size",
        "max_cache_size",
        "bytes; `STREAMSCOPE_MAX_CACHE_SIZE` / `MAX_CACHE_SIZE` win over the argument (as in LitData)",
    ),
    ("StreamingRawDataset", "max_concurrent_downloads", "raw_concurrency", "None (the default) = 0: adaptive"),
    ("StreamingRawDataset", "max_prefetch", "raw_prefetch", "items ahead of each worker"),
)


def live_names() -> tuple[str, ...]:
    """The live knobs, sorted by name (the slots of a knob board)."""
    return tuple(sorted(n for n, k in KNOBS.items() if k.live))


def table() -> list[dict[str, Any]]:
    """All knobs as rows (name, default, unit, env, live, bounds, step, doc), sorted by name."""
    return [
        {
            "name": k.name,
            "default": k.default,
            "unit": k.unit,
            "env": ", ".join(k.env),
            "live": k.live,
            "bounds": k.bounds,
            "step": k.step,
            "doc": k.doc,
        }
        for k in sorted(KNOBS.values(), key=lambda k: k.name)
    ]


def _bytes(raw: str) -> int:
    return parse_bytes(raw)


def _cache_size(raw: str) -> int:
    # "auto" and shares of the free disk are measured where the cache_dir knob puts the cache
    return cache_budget(raw, str(get("cache_dir")))


# --- general --------------------------------------------------------------------------------------

knob(
    "cache_dir",
    os.path.join(os.path.expanduser("~"), ".lightning", "chunks"),
    "path",
    ("STREAMSCOPE_CACHE_DIR", "LITDATA_CACHE_DIR"),
    "Default root of the local chunk cache for remote datasets.",
)

# --- events / trace -------------------------------------------------------------------------------

knob(
    "trace_level",
    "off",
    "level",
    ("STREAMSCOPE_TRACE_LEVEL", "LITDATA_TRACE_LEVEL"),
    "Trace level: off, batch, chunk, sample or debug.",
)
knob(
    "trace_categories",
    "",
    "comma list",
    ("STREAMSCOPE_TRACE_CATEGORIES", "LITDATA_TRACE_CATEGORIES"),
    "Explicit trace categories (overrides the level).",
)
knob(
    "trace_log_file",
    "litdata_debug.log",
    "path",
    ("STREAMSCOPE_LOG_FILE", "LITDATA_LOG_FILE"),
    "Where the Litracer-compatible log is written.",
)
knob(
    "trace_flush_interval",
    5.0,
    "s",
    ("STREAMSCOPE_TRACE_FLUSH_INTERVAL",),
    "How often the background flusher hands buffered events to the sinks.",
)
knob(
    "trace_buffer_events",
    200_000,
    "events",
    ("STREAMSCOPE_TRACE_BUFFER_EVENTS",),
    "Per-process event buffer bound; events beyond it are dropped and counted.",
)
knob(
    "trace_hold_max",
    30.0,
    "s",
    ("STREAMSCOPE_TRACE_HOLD_MAX",),
    "Events a thread records after the begin of a complete event still open there are held back (so each "
    "thread's lines are in ts order) for at most this long.",
)
knob(
    "trace_handover_max_events",
    4096,
    "events",
    ("STREAMSCOPE_TRACE_HANDOVER_MAX_EVENTS",),
    "A non-persistent DataLoader worker whose epoch share ends with at most this many trace events unwritten "
    "hands them to the main process, which writes them (the worker then neither opens the log nor encodes); "
    "with more it writes them itself, in parallel with the other workers. 0: workers always write their own. "
    "Read when tracing is switched on.",
)
knob(
    "trace_handover_wait",
    60.0,
    "s",
    ("STREAMSCOPE_TRACE_HANDOVER_WAIT",),
    "A worker exiting before the main process has taken (or given up) its trace parcel waits at most this long "
    "for the answer, then writes the parcel's events itself. Read when tracing is switched on.",
)
knob(
    "trace_compact_categories",
    "sample,batch,stall,read",
    "comma list",
    ("STREAMSCOPE_TRACE_COMPACT",),
    "Categories whose spans are written as one complete X event (with dur) instead of a B/E pair (the "
    "loader's per-batch batch/stall events and the workers' decode_batch are then also recorded in bulk, off the loop's "
    "hot path); empty for LitData's B/E pairs everywhere.",
)
knob(
    "trace_sinks",
    "",
    "comma list",
    ("STREAMSCOPE_TRACE_SINKS",),
    "Sink factories as 'package.module:Factory' dotted paths or names streamscope installs, resolved lazily in "
    "every process (enable_tracer adds litracer, the Litracer log).",
)
knob(
    "trace_clock_anchor",
    "",
    "ns",
    ("STREAMSCOPE_TRACE_CLOCK_ANCHOR",),
    "Internal: Unix-epoch minus CLOCK_MONOTONIC nanoseconds of the run, set by the first traced process so "
    "that every process of the run stamps events on one time axis.",
)
knob(
    "metrics_level",
    "off",
    "level",
    ("STREAMSCOPE_METRICS_LEVEL",),
    "Categories aggregated into metrics even when no trace log is written (a level name or a comma list of "
    "categories); the traced categories are always aggregated too.",
)
knob(
    "metrics_dir",
    "",
    "path",
    ("STREAMSCOPE_METRICS_DIR",),
    "Run directory where every process publishes its metrics snapshot (<pid>.json); created by the first "
    "traced process and inherited by its workers.",
)
knob(
    "metrics_interval",
    1.0,
    "s",
    ("STREAMSCOPE_METRICS_INTERVAL",),
    "How often each process aggregates its events and publishes its metrics snapshot.",
)

# --- format ---------------------------------------------------------------------------------------

#: The on-disk layouts streamscope can write, by the LitData release that writes them.
WRITE_FORMATS = ("0.2.76", "0.2.68")


def parse_write_format(raw: str) -> str:
    """A ``write_format`` value: one of :data:`WRITE_FORMATS` (surrounding blanks ignored)."""
    value = str(raw).strip()
    if value not in WRITE_FORMATS:
        raise ValueError(f"expected one of {', '.join(WRITE_FORMATS)}, got {raw!r}")
    return value


knob(
    "write_format",
    "0.2.76",
    "LitData release",
    ("STREAMSCOPE_WRITE_FORMAT",),
    "Layout optimize() and BinaryWriter write: '0.2.76' (LitData 0.2.76's: config.types and its compression "
    "keys, json leaves, Arrow-footer rows for JSON-like dict samples, framed zstd; LitData 0.2.68 cannot read "
    "all of it) or '0.2.68' (byte-identical to LitData 0.2.68, which 0.2.76 reads too). "
    "optimize(mode='append') keeps the layout of the dataset it appends to, whatever this says.",
    parse=parse_write_format,
)

# --- storage --------------------------------------------------------------------------------------

knob(
    "storage_max_attempts",
    5,
    "attempts",
    ("STREAMSCOPE_STORAGE_MAX_ATTEMPTS",),
    "Attempts per storage request (first try included) before giving up on retryable errors.",
)
knob(
    "storage_retry_base_delay",
    0.1,
    "s",
    ("STREAMSCOPE_STORAGE_RETRY_BASE_DELAY",),
    "First retry backoff; doubles each attempt up to storage_retry_max_delay (with jitter).",
)
knob(
    "storage_retry_max_delay",
    5.0,
    "s",
    ("STREAMSCOPE_STORAGE_RETRY_MAX_DELAY",),
    "Upper bound of one retry backoff.",
)
knob(
    "storage_retry_jitter",
    1.0,
    "fraction",
    ("STREAMSCOPE_STORAGE_RETRY_JITTER",),
    "Share of each backoff that is randomised (0 = fixed delays, 1 = full jitter).",
)
knob(
    "storage_deadline",
    120.0,
    "s",
    ("STREAMSCOPE_STORAGE_DEADLINE",),
    "Total time budget of one storage operation across all its attempts.",
)
knob(
    "storage_connect_timeout",
    3.0,
    "s",
    ("STREAMSCOPE_STORAGE_CONNECT_TIMEOUT",),
    "TCP/TLS connect timeout; small so an unreachable endpoint fails fast (well under 30 s).",
)
knob(
    "storage_read_timeout",
    30.0,
    "s",
    ("STREAMSCOPE_STORAGE_READ_TIMEOUT",),
    "Longest silence while reading a response before the attempt counts as a timeout.",
)
knob(
    "storage_request_timeout",
    300.0,
    "s",
    ("STREAMSCOPE_STORAGE_REQUEST_TIMEOUT",),
    "Longest single request (connect to last byte); large chunks need minutes on slow links.",
)
knob(
    "storage_s3_backend",
    "auto",
    "name",
    ("STREAMSCOPE_S3_BACKEND",),
    "S3 client: obstore, boto3, or auto (obstore when importable, else boto3).",
)
knob(
    "storage_s3_light_get",
    True,
    "flag",
    ("STREAMSCOPE_S3_LIGHT_GET",),
    "Where boto3 serves S3 with an explicit endpoint and explicit keys, whole-object GETs (index.json) use a "
    "stdlib SigV4 client instead, so opening a dataset does not wait 0.1-0.3 s for a boto3 client.",
)
knob(
    "storage_s3_streaming_backend",
    "obstore",
    "name",
    ("STREAMSCOPE_S3_STREAMING_BACKEND",),
    "S3 client for the chunk downloads of an iteration when storage_s3_backend is auto: obstore (fast; used "
    "in the main process too when it iterates itself, num_workers=0 - DataLoader workers that this process "
    "forks LATER then use boto3, with a warning) or auto (boto3 in processes that may fork workers).",
)

# --- cache ----------------------------------------------------------------------------------------

knob(
    "prefetch_depth",
    0,
    "chunks",
    ("STREAMSCOPE_PREFETCH_DEPTH",),
    "Chunks fetched ahead of the reader. 0 = each dataset's max_pre_download (its board starts there). Read live "
    "from the dataset's knob board each prefetch loop.",
    live=True,
    bounds=(0, 4096),
    step=1,
    unset=0,
)
knob(
    "download_concurrency",
    4,
    "chunks",
    ("STREAMSCOPE_DOWNLOAD_CONCURRENCY",),
    "Chunks one reader (DataLoader worker) fetches at once from storage, within prefetch_depth (at most 32 "
    "threads). Read live from the dataset's knob board.",
    live=True,
    bounds=(1, 32),
    step=1,
)
knob(
    "prefetch_head_first",
    True,
    "flag",
    ("STREAMSCOPE_PREFETCH_HEAD_FIRST",),
    "While the reader waits for a chunk that is still downloading, start no download of a later chunk (the "
    "waited-for chunk gets the bandwidth; downloads already running go on). Read live from the dataset's knob board.",
    live=True,
    bounds=(False, True),
    step=1,
)
knob(
    "chunk_wait_timeout",
    120.0,
    "s",
    ("STREAMSCOPE_CHUNK_WAIT_TIMEOUT",),
    "Longest a reader waits for a chunk download (or another process's download lock) before raising.",
)
knob(
    "max_cache_size",
    "auto",
    "bytes",
    ("STREAMSCOPE_MAX_CACHE_SIZE", "MAX_CACHE_SIZE"),
    "Budget of the chunk cache: a dataset's max_cache_size argument (the environment variables win over it, as "
    'in LitData): a size ("100GB"), a share of the free disk ("0.9"), or "auto" (what max_cache_size=None means: '
    "75 % of the free disk, leaving 50 GB free; from the environment, measured on the cache_dir knob's volume). "
    "Eviction reads it live from the dataset's knob board.",
    _cache_size,
    live=True,
    kind=int,
    bounds=(0, 2**60),
    step=2**26,
    lazy_default=True,
)
knob(
    "open_chunks_max",
    64,
    "chunks",
    ("STREAMSCOPE_OPEN_CHUNKS_MAX",),
    "Most chunk files one reader keeps mmapped at once (least recently used are closed first).",
)

# --- optimize -------------------------------------------------------------------------------------

#: Values of the ``optimize_node_env`` and ``optimize_executor`` knobs.
NODE_ENV_CHOICES = ("auto", "litdata", "off")
EXECUTOR_CHOICES = ("process", "ray")


def _choice(choices: tuple[str, ...]) -> Callable[[str], str]:
    def parse(raw: str) -> str:
        value = str(raw).strip().lower()
        if value not in choices:
            raise ValueError(f"expected one of {', '.join(choices)}, got {raw!r}")
        return value

    return parse


knob(
    "optimize_staging_dir",
    "",
    "path",
    ("STREAMSCOPE_OPTIMIZE_STAGING_DIR",),
    "Parent of the per-job staging directory where optimize()/map() workers write chunks before publishing "
    "them. Empty: inside a local output_dir (publish = rename), else the system temp dir.",
)
knob(
    "optimize_poll_interval",
    0.05,
    "s",
    ("STREAMSCOPE_OPTIMIZE_POLL_INTERVAL",),
    "How often the optimize() main process checks worker messages, liveness and progress.",
)
knob(
    "optimize_exit_grace",
    5.0,
    "s",
    ("STREAMSCOPE_OPTIMIZE_EXIT_GRACE",),
    "How long the main process waits for the final message of a worker that has already exited.",
)
knob(
    "processor_fast_dev_run",
    True,
    "bool",
    ("DATA_OPTIMIZER_FAST_DEV_RUN",),
    "DataProcessor(fast_dev_run=None) processes only the first optimize_fast_dev_run_items inputs (LitData's "
    "default: on; set 0 to process them all).",
)
knob(
    "processor_output_dir",
    "",
    "path",
    ("DATA_OPTIMIZER_CACHE_FOLDER",),
    "Where DataProcessor(output_dir=None) writes (LitData's chunk cache folder). Empty: <system temp dir>/chunks.",
)
knob(
    "optimize_node_env",
    "auto",
    "choice",
    ("STREAMSCOPE_OPTIMIZE_NODE_ENV",),
    "Which variables make optimize()/map() one node of a multi-node job. auto: DATA_OPTIMIZER_NUM_NODES/"
    "DATA_OPTIMIZER_NODE_RANK (LitData's), else NNODES/NODE_RANK (torchrun launch scripts), else SLURM_NNODES/"
    "SLURM_NODEID; litdata: LitData's pair only; off: always one node.",
    parse=_choice(NODE_ENV_CHOICES),
)
knob(
    "optimize_node_heartbeat",
    5.0,
    "s",
    ("STREAMSCOPE_OPTIMIZE_NODE_HEARTBEAT",),
    "How often a node of a multi-node optimize()/map() rewrites its claim (.nodes/node-<rank>.json in output_dir) "
    "to show it is alive.",
)
knob(
    "optimize_node_stale_after",
    60.0,
    "s",
    ("STREAMSCOPE_OPTIMIZE_NODE_STALE_AFTER",),
    "A node claim not rewritten for this long belongs to a dead node: a rerun of that rank takes it over (at "
    "once when the claim names a dead process on this host). Node clocks must agree to well within this.",
)
knob(
    "optimize_node_claim_settle",
    0.25,
    "s",
    ("STREAMSCOPE_OPTIMIZE_NODE_CLAIM_SETTLE",),
    "After writing its claim a node waits this long and reads it back: a node that started with the same rank "
    "at the same moment has overwritten it by then (a read and a write of one small object), and one of the two "
    "stops with NodeRankClaimedError. One that slips through is caught at the next heartbeat, before its node "
    "publishes its {rank}-index.json.",
)
knob(
    "optimize_executor",
    "process",
    "choice",
    ("STREAMSCOPE_OPTIMIZE_EXECUTOR",),
    "Where optimize()/map() run their workers when executor is not given: process (worker processes on this "
    "machine) or ray (tasks on the Ray cluster ray.init() joins: RAY_ADDRESS, else a local one).",
    parse=_choice(EXECUTOR_CHOICES),
)
knob(
    "ray_connect_timeout",
    15.0,
    "s",
    ("STREAMSCOPE_RAY_CONNECT_TIMEOUT",),
    "executor='ray': how long to wait for the cluster at the given address to answer before "
    "ClusterUnreachableError.",
)
knob(
    "ray_max_retries",
    3,
    "retries",
    ("STREAMSCOPE_RAY_MAX_RETRIES",),
    "executor='ray': how many times Ray reruns a worker task whose process or node died (an exception in fn is "
    "never retried). A rerun rewrites the same chunks, so the output does not change.",
)
knob(
    "ray_progress_interval",
    0.25,
    "s",
    ("STREAMSCOPE_RAY_PROGRESS_INTERVAL",),
    "executor='ray': least time between two progress reports of a worker task to the driver's progress bar.",
)
knob(
    "optimize_fast_dev_run_items",
    10,
    "inputs",
    ("DATA_OPTIMIZER_FAST_DEV_RUN_ITEMS",),
    "Number of inputs each worker processes when fast_dev_run=True (LitData: items per process).",
)

# --- stream ---------------------------------------------------------------------------------------

knob(
    "loader_group_bytes",
    8_000_000,
    "bytes",
    ("STREAMSCOPE_LOADER_GROUP_BYTES",),
    "A DataLoader worker decodes its batches into shared-memory arenas of about this many bytes and sends each "
    "arena's batches as one group (one queue message; the first group is one batch). Arenas are reused once the "
    "training loop has dropped every batch in them (at most 8 pooled per worker). 0 sends every batch on its own.",
)

# --- raw ------------------------------------------------------------------------------------------

knob(
    "raw_concurrency",
    0,
    "requests",
    ("STREAMSCOPE_RAW_CONCURRENCY",),
    "Per-process cap on in-flight raw-file GETs. 0 = the dataset's max_concurrent_downloads, or the adaptive "
    "default from the median file size when that is None (latency-driven, per worker: see "
    "raw_adaptive_concurrency). A board value > 0 switches the adaptive limit off. Read live from the dataset's "
    "knob board at every batch.",
    live=True,
    bounds=(0, 1024),
    step=1,
    unset=0,
)
knob(
    "raw_prefetch",
    -1,
    "items",
    ("STREAMSCOPE_RAW_PREFETCH",),
    "Per-worker look-ahead of raw-file items. -1 = the dataset's max_prefetch (capped so all DataLoader workers "
    "together hold about 64 items); another value is each worker's depth as it is; 0 = off. Read live from the "
    "dataset's knob board at every batch.",
    live=True,
    bounds=(-1, 4096),
    step=1,
    unset=-1,
)
knob(
    "raw_lookahead_when_left",
    -1,
    "items",
    ("STREAMSCOPE_RAW_LOOKAHEAD_WHEN_LEFT",),
    "Raw-file look-ahead GETs start once at most this many items of the current batch are still in flight, "
    "so a server that answers in arrival order works on them across the next batch's round trip. -1 = the "
    "look-ahead depth; a large number = together with the batch. Read live from the dataset's knob board at "
    "every batch.",
    live=True,
    bounds=(-1, 1 << 20),
    step=1,
)
knob(
    "raw_io_threads",
    256,
    "threads",
    ("STREAMSCOPE_RAW_IO_THREADS",),
    "Upper bound on the raw-file I/O thread pool of one process (threads start only as needed).",
)
knob(
    "raw_write_source_index",
    False,
    "bool",
    ("STREAMSCOPE_RAW_WRITE_SOURCE_INDEX",),
    "Also write index.json.zstd into a LOCAL source folder (LitData does this always; streamscope only on "
    "request). Remote sources always get a copy next to the data.",
)
knob(
    "raw_min_throughput",
    25 * 1024 * 1024,
    "bytes/s",
    ("STREAMSCOPE_RAW_MIN_THROUGHPUT",),
    "Slowest per-object throughput assumed when sizing batch timeouts and hedge delays.",
)
knob(
    "raw_hedge_max_bytes",
    8 * 1024 * 1024,
    "bytes",
    ("STREAMSCOPE_RAW_HEDGE_MAX_BYTES",),
    "Objects at or above this size are not hedged whole (their ranged parts are).",
)
knob(
    "raw_adaptive_concurrency",
    True,
    "bool",
    ("STREAMSCOPE_RAW_ADAPTIVE_CONCURRENCY",),
    "When max_concurrent_downloads is None, move the raw-file GET limit with measured latency (grow while "
    "latency stays flat, shrink when it climbs) under the size-based default. False: the size-based default.",
)
knob(
    "raw_main_obstore_after",
    4,
    "batches",
    ("STREAMSCOPE_RAW_MAIN_OBSTORE_AFTER",),
    "Raw S3 reads in the MAIN process switch to the obstore client at the first multi-index batch "
    "(num_workers=0 streaming) or after this many single-item calls (faster than boto3, but DataLoader "
    "workers forked later fall back to boto3). 0 = never.",
)
knob(
    "raw_local_inline_s",
    0.001,
    "s",
    ("STREAMSCOPE_RAW_LOCAL_INLINE_S",),
    "Local files are read in the calling thread (no pool, no look-ahead) while the running average read "
    "takes less than this; slower local storage (network mounts) gets the concurrent path. 0 = never inline.",
)

# --- tune -----------------------------------------------------------------------------------------

knob(
    "autotune",
    False,
    "flag",
    ("STREAMSCOPE_AUTOTUNE",),
    "Auto-tune every StreamingDataLoader (as its autotune=True does; autotune=False wins): a thread in each "
    "rank's main process moves the live knobs nobody pinned, and num_workers between epochs, to cut the training "
    "loop's wait for data, within the RAM and cache budgets. Switches metrics on (level chunk). See "
    "src/streamscope/tune/README.md.",
)
knob(
    "autotune_ram_budget",
    "0",
    "bytes",
    ("STREAMSCOPE_AUTOTUNE_RAM_BUDGET",),
    "Resident memory the tuner lets one rank's main process and its DataLoader workers use together (e.g. 8GB). "
    "0 = autotune_ram_fraction of the memory limit (the cgroup's memory.max, else physical memory) divided by the "
    "ranks of the node (LOCAL_WORLD_SIZE).",
    _bytes,
    kind=int,
    bounds=(0, 2**60),
)
knob(
    "autotune_ram_fraction",
    0.5,
    "fraction",
    ("STREAMSCOPE_AUTOTUNE_RAM_FRACTION",),
    "Share of the memory limit the node's ranks may use when autotune_ram_budget is 0 (tf.data's ram_budget "
    "takes half).",
    bounds=(0.01, 1.0),
)
knob(
    "autotune_max_workers",
    -1,
    "workers",
    ("STREAMSCOPE_AUTOTUNE_MAX_WORKERS",),
    "Most DataLoader workers the tuner gives a loader (it adds workers between epochs, never with "
    "persistent_workers). -1 = the CPU cores this process may use (affinity and cgroup quota); 0 = num_workers "
    "stays as given.",
    bounds=(-1, 1024),
)
knob(
    "autotune_period_max",
    60.0,
    "s",
    ("STREAMSCOPE_AUTOTUNE_PERIOD_MAX",),
    "Longest pause between two runs of the capacity model by a tuner that found nothing to improve (the pause "
    "doubles from one metrics interval up to this; a regime change is watched for at every reading).",
    bounds=(1.0, 3600.0),
)
knob(
    "autotune_min_gain",
    0.01,
    "fraction",
    ("STREAMSCOPE_AUTOTUNE_MIN_GAIN",),
    "Gain in the loop's throughput, relative, that the lower bound of a candidate's paired check (95%) must "
    "exceed for the tuner to adopt it; otherwise the incumbent values stay.",
    bounds=(0.0, 0.9),
)
knob(
    "autotune_wait_share",
    0.05,
    "fraction",
    ("STREAMSCOPE_AUTOTUNE_WAIT_SHARE",),
    "The tuner does nothing while the training loop waits for data less than this share of its time (below it "
    "a move could gain less than its check costs).",
    bounds=(0.0, 1.0),
)
knob(
    "autotune_rank_every",
    5,
    "readings",
    ("STREAMSCOPE_AUTOTUNE_RANK_EVERY",),
    "Under torch.distributed (more than one rank), tuner readings between two publications of a rank's model "
    "inputs in the process group's store (a side channel, never a collective); the rank that waits most per batch "
    "decides, and every rank applies its values at one published step. 0 = each rank tunes alone.",
    bounds=(0, 10_000),
)
knob(
    "autotune_probe_share",
    0.02,
    "fraction",
    ("STREAMSCOPE_AUTOTUNE_PROBE_SHARE",),
    "Share of the run's time the tuner may lose measuring candidates that turn out worse than the incumbent "
    "(weighted by how much worse); past it no new check starts until the run has grown.",
    bounds=(0.0, 1.0),
)

# --- telemetry: Prometheus ------------------------------------------------------------------------


def parse_port(raw: str) -> int | None:
    """A TCP port (0..65535; 0 = a free one); empty = off."""
    raw = raw.strip()
    if not raw:
        return None
    port = int(raw)
    if not 0 <= port <= 65535:
        raise ValueError(f"a TCP port is 0..65535, got {port}")
    return port


knob(
    "prometheus_port",
    None,
    "port",
    ("STREAMSCOPE_PROMETHEUS_PORT",),
    "Serve the metrics for Prometheus on this port in each rank's main process (unset: off), from its first "
    "dataset or loader on (or `streamscope.enable_telemetry()`); switches metrics on (chunk level). Local rank r "
    "listens on port + r; 0 picks a free port per rank, said on stderr. A port in use is a warning line naming "
    "it (training goes on); `streamscope.telemetry.prometheus.start_endpoint` is the call that raises instead.",
    parse_port,
)
knob(
    "prometheus_addr",
    "127.0.0.1",
    "address",
    ("STREAMSCOPE_PROMETHEUS_ADDR",),
    "Address the Prometheus endpoint listens on (0.0.0.0 or :: for a Prometheus on another host).",
)

# --- telemetry: OpenTelemetry ---------------------------------------------------------------------
knob(
    "otel_auto",
    True,
    "flag",
    ("STREAMSCOPE_OTEL_AUTO",),
    "When the application has loaded OpenTelemetry's API, streamscope's entry points (a dataset or loader built) "
    "wire streamscope to its global providers with no call: the registry's metrics, and spans at the tracer's "
    "level. 0: only streamscope.enable_telemetry() does.",
)
knob(
    "otel_span_rate",
    100.0,
    "spans/s",
    ("STREAMSCOPE_OTEL_SPAN_RATE",),
    "Sustained rate of chunk-level and stall spans a rank exports to OpenTelemetry (a token bucket, see "
    "otel_span_burst); spans over it are counted on their epoch span (streamscope.spans.sampled_out), not sent. "
    "Epoch, crash and failed spans are always sent; per-sample and per-batch work never becomes a span.",
)
knob(
    "otel_span_burst",
    1000,
    "spans",
    ("STREAMSCOPE_OTEL_SPAN_BURST",),
    "Spans a rank may export at once above otel_span_rate (the token bucket's size).",
)
knob(
    "otel_stall_min",
    0.01,
    "s",
    ("STREAMSCOPE_OTEL_STALL_MIN",),
    "Shortest wait of the training loop for its next batch that becomes a stall span (every wait is in the "
    "streamscope.loader.wait metrics; with num_workers=0 every batch's decoding is a wait).",
)
knob(
    "otel_exit_timeout",
    5.0,
    "s",
    ("STREAMSCOPE_OTEL_EXIT_TIMEOUT",),
    "Longest enable_telemetry()'s last export may hold up process exit (an unreachable or hanging endpoint).",
)
knob(
    "run_id",
    "",
    "text",
    ("STREAMSCOPE_RUN_ID", "TORCHELASTIC_RUN_ID"),
    "Id of the training run, the streamscope.run.id resource attribute of every rank's telemetry (torchrun's "
    "TORCHELASTIC_RUN_ID is the same on every rank). Empty: enable_telemetry() makes one and passes it to the "
    "processes it starts.",
)
