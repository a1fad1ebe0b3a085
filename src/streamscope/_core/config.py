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

Where things are:

* the knobs: one module per layer in :mod:`streamscope._core.knobs` (``events``, ``format``, ``storage``,
  ``cache``, ``processing``, ``engine``, ``raw``, ``tune``, ``telemetry``), each declaring its knobs with
  :func:`knob` (importing the package declares them all, in layer order); this module holds
  :data:`ARGUMENT_KNOBS`;
* the machinery: :class:`Knob` and the parsers of values in :mod:`streamscope._core.knob`, the registry
  (:func:`get`, :func:`set_value`, ...) in :mod:`streamscope._core.knob_registry`.

Import this module, not those: it is what declares every knob. ``python -m streamscope knobs`` prints the
table; ``docs/knobs.md`` is generated from it.
"""

from __future__ import annotations

from streamscope._core.knob import Knob, parse_port
from streamscope._core.knob_registry import (
    KNOBS,
    default_arg,
    explicit,
    get,
    given,
    knob,
    live_names,
    on_change,
    reset,
    set_value,
    table,
)
from streamscope._core.knobs import DECLARED
from streamscope._core.knobs.format import WRITE_FORMATS, parse_write_format
from streamscope._core.knobs.processing import EXECUTOR_CHOICES, NODE_ENV_CHOICES

__all__ = [
    "ARGUMENT_KNOBS",
    "DECLARED",
    "EXECUTOR_CHOICES",
    "KNOBS",
    "Knob",
    "NODE_ENV_CHOICES",
    "WRITE_FORMATS",
    "default_arg",
    "explicit",
    "get",
    "given",
    "knob",
    "live_names",
    "on_change",
    "parse_port",
    "parse_write_format",
    "reset",
    "set_value",
    "table",
]


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
