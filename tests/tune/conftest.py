"""The simulator gate's table at the end of the run, where ``./run.sh test`` (xdist) shows it."""

from __future__ import annotations

import os
import time
from typing import Any

_START = [0.0]


def pytest_sessionstart(session: Any) -> None:
    _START[0] = time.time()
    if not hasattr(session.config, "workerinput"):  # the xdist controller, or a run without xdist
        from tests.tune.sim.test_gate import TABLE

        if os.path.exists(TABLE):
            os.remove(TABLE)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    from tests.tune.sim.test_gate import TABLE

    if os.path.exists(TABLE) and os.path.getmtime(TABLE) >= _START[0]:
        with open(TABLE) as f:
            text = f.read()
        terminalreporter.write_sep("-", "tuner simulator gate (tests/tune/sim)")
        terminalreporter.write(text)
