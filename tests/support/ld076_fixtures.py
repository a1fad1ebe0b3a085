"""pytest fixtures over :mod:`tests.support.litdata076`; a package's conftest imports the ones it uses.

* ``ld076``: the session's LitData 0.2.76 process (``ld076.call("module.function", ...)``).
* ``ld076_data``: the directory of the session's 0.2.76 datasets (see ``tests/support/ld076_datasets.py``).

Both skip the test when LitData 0.2.76 cannot be found (``STREAMSCOPE_LITDATA076_DIR``).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import litdata076


@pytest.fixture(scope="session")
def ld076() -> Iterator[litdata076.LitData076]:
    yield litdata076.oracle()
    litdata076.shutdown()


@pytest.fixture(scope="session")
def ld076_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return litdata076.session_datasets(tmp_path_factory.getbasetemp())
