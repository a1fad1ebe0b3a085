"""The write path: optimize(), map() and walk().

Modules: :mod:`.functions` (the public functions and the job's bookkeeping), :mod:`.split` (contiguous
per-worker input ranges), :mod:`.runner` (worker processes, progress bar, failure detection), :mod:`.worker`
(the body of one worker, checkpoint records), :mod:`.walk`, :mod:`._store` (the output store),
:mod:`._writer` (the chunk writer from :mod:`streamscope.format`).

Trace events (``streamscope.events``), name / category:

==================  ==========  ===========================================================================
``optimize``/``map``  epoch       the whole job, in the main process (fields: inputs, workers, url)
``optimize_input``  read        ``reader.read(item)`` for one input, when a reader is given
``optimize_fn``     sample      ``fn(item)`` for one input (not including the samples a generator yields)
``serialize``       sample      serializing one sample into the open chunk (and closing it when full)
``chunk_write``     read        instant when a chunk is closed; span around the final flush
``upload``          download    publishing one chunk (or map output file) to the output store
``index_merge``     read        merging the workers' chunk lists and writing ``index.json``
``overwrite``       delete      removing the old dataset for ``mode="overwrite"``
``crash``           crash       instant in the worker whose input failed
==================  ==========  ===========================================================================
"""

from __future__ import annotations

from streamscope.optimize.functions import map, optimize
from streamscope.optimize.walk import walk

__all__ = ["map", "optimize", "walk"]
