"""Which real LitData the tests run against, and the guard that keeps the ``interop`` marker honest.

``./run.sh test`` runs the suite with LitData 0.2.68 (the venv's), then the ``interop`` tests again with 0.2.76
first on ``PYTHONPATH``. So a test must know which one it meets:

* ``LITDATA_VERSION``: the version of the ``litdata`` that ``import litdata`` would load here, read from its
  ``__about__.py`` without importing it (collection stays cheap and marks can depend on it);
  ``LITDATA_076`` is true from 0.2.76 on.
* ``xfail_076(reason)``: a strict xfail that applies only under 0.2.76, for the gaps other work is closing
  (the mark fails loudly once the gap is closed, so it gets removed).
* ``litdata_env(env)``: an environment for a subprocess that must import the same LitData without
  streamscope's sources (the venv's site-packages plus, when it is not the venv's, the folder holding it).

The guard: every test that uses the real LitData carries ``pytest.mark.interop`` (else the 0.2.76 pass never runs
it). ``tests/conftest.py`` enforces it three ways: a test module or a helper module it imports that holds a
LitData object at import time must mark all its tests; while an unmarked test runs, ``import litdata`` (in
process) raises :class:`InteropMarkerMissing`; and its subprocesses find a ``litdata`` stub first on
``PYTHONPATH`` that raises the same. A subprocess started with an environment built without ``PYTHONPATH``
escapes the stub, which is why such tests build it with :func:`litdata_env`, and
``tests/test_interop_marker.py`` checks that no test file drops ``PYTHONPATH`` another way.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

STUB_DIR = str(Path(__file__).parent / "no_litdata")


class InteropMarkerMissing(RuntimeError):
    """A test without the ``interop`` marker imported the real LitData (not an ImportError: no silent skip)."""


def _litdata_package_dir() -> Path | None:
    """The folder of the ``litdata`` package ``import litdata`` would load (None when there is none).

    Searched on ``sys.path`` with the path finder directly: the import guard below may be installed, and a stub
    never counts.
    """
    spec = importlib.machinery.PathFinder.find_spec("litdata", [p for p in sys.path if p != STUB_DIR])
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def _read_version() -> str | None:
    pkg = _litdata_package_dir()
    if pkg is None:
        return None
    about = pkg / "__about__.py"
    match = re.search(r"""^__version__\s*=\s*["']([^"']+)["']""", about.read_text(), re.M) if about.exists() else None
    return match.group(1) if match else None


def version_tuple(version: str | None) -> tuple[int, ...]:
    """``"0.2.76"`` -> ``(0, 2, 76)``; no LitData -> ``()``."""
    return tuple(int(p) for p in re.findall(r"\d+", version or "")[:3])


LITDATA_VERSION: str | None = _read_version()
LITDATA_076: bool = version_tuple(LITDATA_VERSION) >= (0, 2, 76)


def xfail_076(reason: str) -> pytest.MarkDecorator:
    """Strict xfail under LitData 0.2.76 only; ``reason`` says which issue-22 gap the test meets."""
    return pytest.mark.xfail(LITDATA_076, reason=f"issue 22: {reason}", strict=True)


def litdata_env(env: dict[str, str] | None = None) -> dict[str, str]:
    """``env`` (default: ``os.environ``) for a subprocess that runs the real LitData alone.

    ``PYTHONPATH`` is replaced by the folder holding the LitData under test when that is not the interpreter's
    own site-packages (the 0.2.76 pass puts it first on the path), so the subprocess imports the same version
    and none of streamscope's sources.
    """
    out = dict(os.environ if env is None else env)
    out.pop("PYTHONPATH", None)
    pkg = _litdata_package_dir()
    if pkg is not None and str(pkg.parent) not in _site_packages():
        out["PYTHONPATH"] = str(pkg.parent)
    return out


def _site_packages() -> set[str]:
    import site

    return {str(Path(p)) for p in [*site.getsitepackages(), site.getusersitepackages()]}


# --- the guard ------------------------------------------------------------------------------------------------


def _is_litdata(name: str) -> bool:
    return name == "litdata" or name.startswith("litdata.")


class _BlockLitdata:
    """A meta-path finder that refuses LitData imports while an unmarked test runs."""

    def __init__(self, nodeid: str) -> None:
        self.nodeid = nodeid

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> None:
        if _is_litdata(fullname):
            raise InteropMarkerMissing(
                f"{self.nodeid} imports {fullname!r} (the real LitData) but is not marked "
                "`@pytest.mark.interop`: add the marker so the LitData 0.2.76 pass of ./run.sh test runs it"
            )
        return None


class LitdataBlocked:
    """Context: LitData hidden from ``sys.modules`` and refused by the import system; restored on exit."""

    def __init__(self, nodeid: str) -> None:
        self.finder = _BlockLitdata(nodeid)
        self.saved: dict[str, ModuleType] = {}

    def __enter__(self) -> LitdataBlocked:
        self.saved = {k: m for k, m in sys.modules.items() if _is_litdata(k)}
        for k in self.saved:
            del sys.modules[k]
        sys.meta_path.insert(0, self.finder)  # type: ignore[arg-type]
        return self

    def __exit__(self, *exc: object) -> None:
        if self.finder in sys.meta_path:
            sys.meta_path.remove(self.finder)  # type: ignore[arg-type]
        for k in [k for k in sys.modules if _is_litdata(k)]:
            del sys.modules[k]
        sys.modules.update(self.saved)


def holds_litdata(module: ModuleType, _seen: set[str] | None = None) -> str | None:
    """The first LitData object that ``module`` (or a ``tests.`` helper module it imports) holds at import time,
    as ``"module.name"``; None when there is none."""
    seen = set() if _seen is None else _seen
    if module.__name__ in seen:
        return None
    seen.add(module.__name__)
    helpers = []
    for name, value in list(vars(module).items()):
        if isinstance(value, ModuleType):
            if _is_litdata(value.__name__):
                return f"{module.__name__}.{name}"
            if value.__name__.startswith("tests."):
                helpers.append(value)
            continue
        owner = getattr(value, "__module__", None)
        if isinstance(owner, str) and _is_litdata(owner) and not isinstance(value, pytest.MarkDecorator):
            return f"{module.__name__}.{name}"
        if isinstance(owner, str) and owner.startswith("tests.") and owner in sys.modules:
            helpers.append(sys.modules[owner])
    for helper in helpers:
        found = holds_litdata(helper, seen)
        if found:
            return found
    return None
