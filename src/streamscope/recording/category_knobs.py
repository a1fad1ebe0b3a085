"""The category knobs of the event bus, parsed: ``metrics_level`` and ``trace_compact_categories``.

Below :mod:`.recorder` (which applies the compact categories at every configuration) and :mod:`.setup` (which
reads the environment), both of which use them.
"""

from __future__ import annotations

import sys

from streamscope._core import config
from streamscope.events import vocab

__all__ = ["compact_categories", "metric_categories"]


def metric_categories(raw: str) -> frozenset[str]:
    """The categories of a ``metrics_level`` value: a level name or a comma list of categories.

    Raises:
        TraceConfigError: an unknown category.
    """
    raw = (raw or "").strip()
    if not raw:
        return frozenset()
    if raw.lower() in vocab.LEVELS:
        return vocab.LEVELS[raw.lower()]
    return vocab.parse_categories(raw)


def compact_categories() -> frozenset[str]:
    """The ``trace_compact_categories`` knob (reported and ignored when bad)."""
    try:
        return vocab.parse_categories(config.get("trace_compact_categories"))
    except Exception as exc:
        sys.stderr.write(f"streamscope tracer: trace_compact_categories ignored: {exc}\n")
        return frozenset()
