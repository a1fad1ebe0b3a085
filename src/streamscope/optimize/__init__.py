"""The write path: optimize(), map() and walk()."""

from __future__ import annotations

from streamscope.optimize.functions import map, optimize
from streamscope.optimize.walk import walk

__all__ = ["map", "optimize", "walk"]
