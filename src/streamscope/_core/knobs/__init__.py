"""The declarations of every knob, one module per layer, named for it; read them through
:mod:`streamscope._core.config`.

Importing this package declares every knob: its modules are imported here in layer order, lowest first, so the
registry lists the knobs in that order. A new knob goes into the module of the layer that reads it.
"""

# isort: off
from streamscope._core.knobs import events
from streamscope._core.knobs import format
from streamscope._core.knobs import storage
from streamscope._core.knobs import cache
from streamscope._core.knobs import processing
from streamscope._core.knobs import engine
from streamscope._core.knobs import raw
from streamscope._core.knobs import tune
from streamscope._core.knobs import telemetry

# isort: on

#: The declaring modules, in layer order.
DECLARED = (events, format, storage, cache, processing, engine, raw, tune, telemetry)

__all__ = ["DECLARED"]
