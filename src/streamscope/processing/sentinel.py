"""The end-of-inputs sentinel of ``optimize(queue=...)`` (re-exported by :mod:`.data_processor`, LitData's path).

``ALL_DONE`` is what a producer puts on the queue it passes to ``optimize(queue=...)`` once it has no more
inputs. One sentinel is enough whatever the number of workers: a worker that takes it puts it back for the
next one and stops.
"""

from __future__ import annotations

ALL_DONE = "ALL_DONE"  # same value as LitData's, so a producer written for either engine works with both


def is_all_done(item: object) -> bool:
    """True if ``item`` is the ``ALL_DONE`` sentinel (safe for arrays, whose ``==`` is elementwise)."""
    return isinstance(item, str) and item == ALL_DONE


__all__ = ["ALL_DONE", "is_all_done"]
