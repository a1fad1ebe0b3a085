"""Finding the external programs the observability tests run (Prometheus, promtool, tmux, tsc), skip or fail.

``./run.sh test`` installs them (apt, npm). A developer's machine may lack them: the tests that need one skip
with the reason. Under CI (``CI=true``) a missing component fails the test instead, so a broken install step
cannot pass as a run of skipped tests.
"""

from __future__ import annotations

import os
import shutil
from typing import NoReturn

import pytest

INSTALL_HINT = "./run.sh test installs it"


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("true", "1", "yes")


def missing(reason: str) -> NoReturn:
    """Skip the calling test for ``reason``; under CI=true fail it instead."""
    if in_ci():
        pytest.fail(f"{reason}; CI=true, where every test component must be installed ({INSTALL_HINT})", pytrace=False)
    pytest.skip(reason)


def require_program(name: str, package: str) -> str:
    """The path of program ``name`` (from Debian package ``package``), or skip/fail the test."""
    path = shutil.which(name)
    if path is None:
        missing(
            f"{name} is not installed (Debian package {package!r}: "
            f"apt-get install -y --no-install-recommends {package}; {INSTALL_HINT})"
        )
    return path
