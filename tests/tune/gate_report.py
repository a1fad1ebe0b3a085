"""The simulator gate's table at the end of the run, where ``./run.sh test`` (xdist) shows it: a pytest plugin
(``tests/conftest.py`` lists it, so the xdist controller, which collects nothing, loads it too).

The gate's test appends its row to a file named for the pytest session (by the controller, in an environment variable
its xdist workers inherit), which the session's terminal summary prints and removes: concurrent sessions do not mix
their rows.
"""

from __future__ import annotations

import os
import tempfile
from typing import Any

_VAR = "STREAMSCOPE_TUNE_GATE_TABLE"


def table_path() -> str:
    """The file of this pytest session's gate rows (named by the controller, inherited by its xdist workers)."""
    path = os.environ.get(_VAR)
    if not path:
        path = os.path.join(tempfile.gettempdir(), f"streamscope-tune-gate-{os.getuid()}-{os.getpid()}.txt")
        os.environ[_VAR] = path
    return path


def pytest_configure(config: Any) -> None:
    if not hasattr(config, "workerinput"):  # the controller (or a run without xdist), before any worker starts
        os.environ.pop(_VAR, None)
        table_path()


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if hasattr(terminalreporter.config, "workerinput"):
        return  # an xdist worker: its terminal is not shown, the controller prints the rows
    path = table_path()
    if os.path.exists(path):
        with open(path) as f:
            text = f.read()
        os.remove(path)
        terminalreporter.write_sep("-", "tuner simulator gate (tests/tune/sim)")
        terminalreporter.write(text)
