"""The stages of the wait split: what a worker can be doing while the training loop waits for data.

The runtime (:mod:`streamscope.recording.attribution`) splits each wait of the loop among these stages; the API
needs them too: :func:`streamscope.events.span` hands the spans of a category in :data:`STAGED` to the runtime's
staged span (which moves the process's stage clock), and :func:`streamscope.events.stage` marks a block spent in a
stage without a span (the chunk cache's wait for a chunk another process downloads). Nothing here runs anything.
"""

from __future__ import annotations

__all__ = ["CATEGORY_STAGES", "DECODE", "DECOMPRESS", "DOWNLOAD", "IDLE", "READ", "STAGED"]

#: Stage codes in priority order (a lower code wins when two are active at once); IDLE is never on a clock.
DOWNLOAD, DECOMPRESS, READ, DECODE, IDLE = 0, 1, 2, 3, 4
#: Span categories that move a worker's clock, and to which stage.
CATEGORY_STAGES: dict[str, int] = {"download": DOWNLOAD, "decompress": DECOMPRESS, "read": READ}
#: Categories whose spans report to the stage clock now: empty unless this process attributes its loop's waits
#: (the runtime mutates it in place; never rebound, like ``ACTIVE``).
STAGED: set[str] = set()
