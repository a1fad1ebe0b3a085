"""Every module of src/streamscope says what it exports: ``__all__`` lists its public names, and only those.

Read from the source (no import), so the check is fast and covers modules whose optional packages are missing.
A name without a leading underscore that a module defines (function, class) is public and must be in
``__all__``; everything in ``__all__`` must exist in the module. Names that are internal get a leading underscore.
"""

from __future__ import annotations

import ast
import pathlib

import pytest

SRC = pathlib.Path(__file__).resolve().parents[1] / "src" / "streamscope"
MODULES = sorted(p for p in SRC.rglob("*.py"))


def _module_name(path: pathlib.Path) -> str:
    rel = path.relative_to(SRC.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _bindings(body: list[ast.stmt], defs: set[str], bound: set[str]) -> None:
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            defs.add(node.name)
            bound.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            bound.update(n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            bound.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.If):
            _bindings(node.body, defs, bound)
            _bindings(node.orelse, defs, bound)
        elif isinstance(node, ast.Try):
            for block in (node.body, node.orelse, node.finalbody, *[h.body for h in node.handlers]):
                _bindings(block, defs, bound)


def _declared_all(tree: ast.Module) -> list[str] | None:
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
            value = node.value
            if isinstance(value, (ast.List, ast.Tuple)) and all(isinstance(e, ast.Constant) for e in value.elts):
                return [e.value for e in value.elts]  # type: ignore[attr-defined]
            return []  # computed (a re-export of another module's __all__): checked by importing it below
    return None


@pytest.mark.parametrize("path", MODULES, ids=lambda p: _module_name(p))
def test_module_declares_its_public_names(path: pathlib.Path) -> None:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    declared = _declared_all(tree)
    name = _module_name(path)
    assert declared is not None, f"{name} has no __all__ (list its public names; internal names start with _)"
    defs: set[str] = set()
    bound: set[str] = set()
    _bindings(tree.body, defs, bound)
    public_defs = {d for d in defs if not d.startswith("_")}
    missing = sorted(public_defs - set(declared))
    assert not missing, f"{name}: public but not in __all__: {missing} (export them or prefix them with _)"
    lazy = "__getattr__" in defs
    unknown = sorted(n for n in declared if n not in bound and not lazy)
    assert not unknown, f"{name}: __all__ names what the module does not define: {unknown}"
    assert len(set(declared)) == len(declared), f"{name}: __all__ lists a name twice"


def test_computed_exports_resolve() -> None:
    import streamscope.streaming.serializers as shim

    assert shim.__all__ and all(hasattr(shim, n) for n in shim.__all__)
