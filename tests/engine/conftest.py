"""Fixtures of the read-path tests."""

from __future__ import annotations

from tests.support.ld076_fixtures import ld076, ld076_data  # noqa: F401 (fixtures)
