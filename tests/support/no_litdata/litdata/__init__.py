"""Stand-in ``litdata`` first on ``PYTHONPATH`` for the subprocesses of tests not marked ``interop``.

A subprocess of such a test that imports LitData fails here, naming the test, instead of silently running only
against the venv's LitData (see ``tests/support/litdata_version.py``).
"""

import os

raise RuntimeError(
    f"{os.environ.get('PYTEST_CURRENT_TEST', 'a test')} starts a process that imports the real LitData but is not "
    "marked `@pytest.mark.interop`: add the marker so the LitData 0.2.76 pass of ./run.sh test runs it"
)
