"""The ``interop`` marker is honest: a test that uses the real LitData without it fails (tests/support/interop_plugin.py).

``./run.sh test`` runs the ``interop`` tests a second time against LitData 0.2.76; a test that used LitData
without the marker would only ever meet 0.2.68.
"""

from __future__ import annotations

import ast
import importlib
import re
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import pytest

from tests.support import interop_plugin
from tests.support.litdata_version import (
    LITDATA_076,
    LITDATA_VERSION,
    InteropMarkerMissing,
    holds_litdata,
    litdata_env,
    version_tuple,
)

TESTS = Path(__file__).parent


def test_import_in_an_unmarked_test_fails_naming_the_test() -> None:
    with pytest.raises(InteropMarkerMissing, match="test_import_in_an_unmarked_test_fails_naming_the_test"):
        importlib.import_module("litdata")
    with pytest.raises(InteropMarkerMissing):  # not an ImportError: importorskip must not turn it into a skip
        pytest.importorskip("litdata.streaming.writer")


def test_subprocess_of_an_unmarked_test_fails() -> None:
    proc = subprocess.run([sys.executable, "-c", "import litdata"], capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0
    assert "not marked `@pytest.mark.interop`" in proc.stderr
    assert "test_subprocess_of_an_unmarked_test_fails" in proc.stderr


@pytest.mark.interop
def test_marked_test_meets_the_litdata_it_was_told_about(litdata_version: str) -> None:
    import litdata

    assert litdata.__version__ == litdata_version == LITDATA_VERSION
    assert LITDATA_076 == (version_tuple(litdata_version) >= (0, 2, 76))


@pytest.mark.interop
def test_litdata_env_subprocess_meets_the_same_litdata() -> None:
    env = {**litdata_env(), "LITDATA_DISABLE_VERSION_CHECK": "1"}
    code = "import litdata; print(litdata.__version__)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env, check=True)
    assert out.stdout.split() == [LITDATA_VERSION]


def test_holds_litdata_finds_module_level_objects_and_helpers() -> None:
    fake_litdata = types.ModuleType("litdata.streaming.writer")
    direct = types.ModuleType("tests.fake_direct")
    direct.lit = fake_litdata  # type: ignore[attr-defined]
    assert holds_litdata(direct) == "tests.fake_direct.lit"

    cls = type("BinaryWriter", (), {"__module__": "litdata.streaming.writer"})
    helper = types.ModuleType("tests.fake_helper")
    helper.Writer = cls  # type: ignore[attr-defined]
    user = types.ModuleType("tests.fake_user")
    user.helper = helper  # type: ignore[attr-defined]
    assert holds_litdata(user) == "tests.fake_helper.Writer"

    clean = types.ModuleType("tests.fake_clean")
    clean.np = importlib.import_module("json")  # type: ignore[attr-defined]
    clean.mark = pytest.mark.interop  # type: ignore[attr-defined]
    assert holds_litdata(clean) is None


def test_collection_refuses_an_unmarked_test_of_a_litdata_module() -> None:
    module = types.ModuleType("tests.fake_lit")
    module.litdata = types.ModuleType("litdata")  # type: ignore[attr-defined]

    class Item:
        def __init__(self, name: str, marked: bool) -> None:
            self.module, self.path, self.name, self.marked = module, Path("tests/fake_lit.py"), name, marked

        def get_closest_marker(self, name: str) -> Any:
            return object() if (name == "interop" and self.marked) else None

    interop_plugin.pytest_collection_modifyitems(None, [Item("test_ok", True)])  # type: ignore[arg-type,list-item]
    with pytest.raises(pytest.UsageError, match=r"fake_lit\.py .*test_unmarked"):
        interop_plugin.pytest_collection_modifyitems(None, [Item("test_unmarked", False)])  # type: ignore[arg-type,list-item]


def _marks_every_test_interop(code: str) -> bool:
    """Whether the module's ``pytestmark`` includes ``interop`` (read from the source: importing a test module
    that holds LitData here, in an unmarked test, would trip the guard)."""
    for node in ast.parse(code).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "pytestmark" for t in node.targets):
            return "interop" in (ast.get_source_segment(code, node.value) or "")
    return False


# test files that set a child's PYTHONPATH for another reason than LitData: why the child never imports it
RUNS_NO_LITDATA = {
    "tests/_core/test_optional.py": "hides optional packages (sitecustomize) from a child that runs streamscope only",
    "tests/cli/test_top.py": "runs `streamscope top` (in tmux) with our sources on its path; no LitData",
    "tests/api/test_telemetry.py": "enable_telemetry in a fresh interpreter with our sources: OpenTelemetry, no LitData",
    "tests/processing/test_ray.py": "Ray workers run streamscope's optimize from this checkout; no LitData",
    "tests/telemetry/test_otel.py": "the OpenTelemetry wiring in a fresh interpreter with our sources; no LitData",
    "tests/trace_tools/test_tuner_summary.py": "a tuned streamscope loader writes a trace; no LitData",
    "tests/trace_tools/test_traced_run.py": "a traced optimize and loader of streamscope, then trace_tools; no LitData",
    "tests/cli/test_top_model.py": "`streamscope top` on a streamscope job reading the latency store; no LitData",
    "tests/telemetry/test_prometheus_env.py": "plain training scripts of streamscope with the variable set; no LitData",
}


def test_files_that_set_pythonpath_for_a_subprocess_are_interop() -> None:
    """A subprocess whose ``PYTHONPATH`` the test builds itself escapes the stub that catches unmarked tests: such a
    file builds it with ``litdata_env`` (which keeps the LitData under test) or marks all its tests ``interop``
    (or is listed in RUNS_NO_LITDATA with the reason its child never imports LitData)."""
    offenders = []
    for path in sorted(TESTS.rglob("*.py")):
        if TESTS / "support" in path.parents or path == Path(__file__):
            continue
        if str(path.relative_to(TESTS.parent)) in RUNS_NO_LITDATA:
            continue
        code = path.read_text()
        if re.search(r"""["']PYTHONPATH["']""", code) and path.name.startswith("test_"):
            if not _marks_every_test_interop(code):
                offenders.append(str(path.relative_to(TESTS.parent)))
    assert offenders == []
