"""Errors trace_tools raises for user mistakes (bad paths, unreadable logs). The CLI turns them into exit code 2."""

from __future__ import annotations


class TraceToolError(Exception):
    """A user error: the message names the offending file or argument and is printed without a traceback."""
