"""The write path: optimize(), map() and walk().

Modules: :mod:`.functions` (the public functions and the job's bookkeeping), :mod:`.split` (contiguous
per-worker input ranges), :mod:`.executors` (where workers run), :mod:`.runner` (worker processes, progress bar,
failure detection), :mod:`.ray_executor` (workers as Ray tasks, the ``ray`` extra), :mod:`.nodes` (one node
of a multi-node job: node variables, claims, who merges), :mod:`.worker` (the body of one worker, checkpoint
records), :mod:`.walk`, :mod:`._store` (the output store), :mod:`._writer` (the chunk writer from
:mod:`streamscope.format`).

This package is itself callable as ``optimize(...)``: ``streamscope.processing`` names both this package and the
function, and once the package is imported Python binds the package to that attribute, so calling it must work.

Trace events (``streamscope.events``), name / category:

==================  ==========  ===========================================================================
``optimize``/``map``  epoch       the whole job, in the main process (fields: inputs, workers, url, node: its rank)
``optimize_input``  read        ``reader.read(item)`` for one input, when a reader is given
``optimize_fn``     sample      ``fn(item)`` for one input (not including the samples a generator yields)
``serialize``       sample      serializing one sample into the open chunk (and closing it when full)
``chunk_write``     write       instant when a chunk is closed; span around the final flush
``upload``          upload      publishing one chunk (or map output file) to the output store
``index_merge``     read        merging the workers' (multi-node: the nodes') chunk lists, writing ``index.json``
``overwrite``       delete      removing the old dataset for ``mode="overwrite"``
``crash``           crash       instant in the worker whose input failed
==================  ==========  ===========================================================================
"""

from __future__ import annotations

from streamscope.processing.functions import map, optimize
from streamscope.processing.ray_executor import RayExecutor  # imports ray only when it runs a job
from streamscope.processing.walk import walk

__all__ = ["RayExecutor", "map", "optimize", "walk"]
