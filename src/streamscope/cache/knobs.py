"""Knob boards of the datasets, with their changes traced as ``tune`` events.

:func:`new_board` makes a :class:`~streamscope._core.board.KnobBoard` (the live knobs shared with DataLoader
workers) whose value changes are recorded as ``tune`` instants: name = the knob, fields ``knob``, ``old``,
``new``, ``source`` (``user`` or ``tuner``) and, from the tuner, ``reason``. The board itself lives in ``_core``
(stdlib only, so ``events`` can report its values as the ``streamscope.knob.value`` gauges); the event is sent
from here, the layer above ``events``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from streamscope._core.board import KnobBoard
from streamscope.events import kinds

__all__ = ["new_board", "tune_event"]


def tune_event(knob: str, old: Any, new: Any, source: str, reason: str) -> None:
    """A board value change as a ``tune`` instant (nothing when the category is off)."""
    kinds.knob(knob, old=old, new=new, source=source, reason=reason)


def new_board(base: Mapping[str, tuple[Any, bool, str]] | None = None) -> KnobBoard:
    """A knob board for a dataset (``base``: its own settings, see :class:`KnobBoard`), traced."""
    return KnobBoard(base, listener=tune_event)
