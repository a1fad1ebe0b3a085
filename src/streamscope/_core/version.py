"""streamscope's version, below every layer.

The package root re-exports it (``streamscope.__version__``); the OpenTelemetry exporters name their
instrumentation scope with it. Importing the root for it instead would make the importer depend, as import-linter
sees it, on everything the root loads lazily (the hooks it provides import ``api``, ``trace`` and ``telemetry``).
"""

from __future__ import annotations

__all__ = ["VERSION"]

#: The package version (pyproject.toml's ``version``).
VERSION = "0.1.0"
