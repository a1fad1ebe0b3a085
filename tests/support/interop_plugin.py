"""Pytest plugin (loaded by ``tests/conftest.py``): the ``interop`` marker is honest, tests know their LitData.

* ``litdata_version`` fixture: ``litdata.__version__`` of the real LitData this run tests against (0.2.68 in the
  first pass of ``./run.sh test``, 0.2.76 in the second). ``tests.support.litdata_version`` has the same without
  an import (``LITDATA_VERSION``, ``LITDATA_076``) and ``xfail_076`` for gaps only 0.2.76 shows.
* Every test that uses the real LitData carries ``pytest.mark.interop`` (the 0.2.76 pass selects tests by it):
  a test module, or a ``tests.`` helper it imports, that holds LitData objects at import time must mark all its
  tests (else collection fails, naming them); while an unmarked test runs, importing LitData in process, or in a
  subprocess that keeps ``PYTHONPATH``, raises ``InteropMarkerMissing`` naming the test.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.litdata_version import STUB_DIR, LitdataBlocked, holds_litdata


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """The ``litdata`` stub is no test package (importing it raises)."""
    stub = Path(STUB_DIR)
    return True if collection_path == stub or stub in collection_path.parents else None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every test of a module that holds LitData objects at import time must be marked ``interop``."""
    held: dict[str, str | None] = {}
    unmarked: dict[str, list[str]] = {}
    for item in items:
        module = getattr(item, "module", None)
        if module is None:
            continue
        if module.__name__ not in held:
            held[module.__name__] = holds_litdata(module)
        if held[module.__name__] and item.get_closest_marker("interop") is None:
            unmarked.setdefault(f"{item.path} (holds {held[module.__name__]})", []).append(item.name)
    if unmarked:
        raise pytest.UsageError(
            "tests that use the real LitData must be marked `@pytest.mark.interop` (the LitData 0.2.76 pass of "
            "./run.sh test selects them by it):\n"
            + "\n".join(
                f"  {where}: {', '.join(names[:5])}{' ...' * (len(names) > 5)}" for where, names in unmarked.items()
            )
        )


@pytest.fixture(autouse=True)
def _interop_guard(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    if request.node.get_closest_marker("interop") is not None:
        yield
        return
    pythonpath = os.environ.get("PYTHONPATH")
    monkeypatch.setenv("PYTHONPATH", STUB_DIR + (os.pathsep + pythonpath if pythonpath else ""))
    with LitdataBlocked(request.node.nodeid):
        yield


@pytest.fixture(scope="session")
def litdata_version() -> str:
    """``litdata.__version__`` of the real LitData under test (a test using it must be marked ``interop``)."""
    os.environ.setdefault("LITDATA_DISABLE_VERSION_CHECK", "1")
    import litdata

    return str(litdata.__version__)
