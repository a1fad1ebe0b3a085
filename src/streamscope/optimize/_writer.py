"""Which chunk writer optimize uses: the format engineer's ``streamscope.format.writer.ChunkWriter``.

Until that module lands on main, :mod:`._interim_writer` (same interface, PyTree subset) stands in.
"""

from __future__ import annotations

try:
    from streamscope.format.writer import ChunkWriter  # type: ignore[import-not-found,unused-ignore]

    INTERIM = False
except ImportError:  # format not merged yet
    from streamscope.optimize._interim_writer import ChunkWriter  # type: ignore[assignment]

    INTERIM = True

__all__ = ["ChunkWriter", "INTERIM"]
