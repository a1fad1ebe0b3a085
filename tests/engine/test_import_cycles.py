"""No import cycles among the engine's modules (issue 33): a lower module takes what it needs as an argument or a
protocol instead of importing the dataset that uses it. Imports inside functions count too: one there only hides a
cycle (grimp reads every import statement of a module)."""

from __future__ import annotations

import grimp

#: Cycles known and owned elsewhere (engine/hf_index.py <-> engine/parquet.py: the Parquet and Hub area).
_KNOWN = [{"streamscope.engine.hf_index", "streamscope.engine.parquet"}]


def _cycles(graph: grimp.ImportGraph, modules: set[str]) -> list[set[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    edges = {m: sorted(graph.find_modules_directly_imported_by(m) & modules) for m in modules}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[set[str]] = []
    counter = 0
    for root in sorted(modules):
        if root in index:
            continue
        work = [(root, 0)]
        while work:
            v, i = work.pop()
            if i == 0:
                index[v] = low[v] = counter
                counter += 1
                stack.append(v)
                on.add(v)
            if i < len(edges[v]):
                work.append((v, i + 1))
                w = edges[v][i]
                if w not in index:
                    work.append((w, 0))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            if low[v] == index[v]:
                comp = set()
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.add(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(comp)
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[v])
    return out


def test_the_engine_has_no_import_cycle():
    graph = grimp.build_graph("streamscope")
    engine = {m for m in graph.modules if m.startswith("streamscope.engine.")}
    assert "streamscope.engine.dataset" in engine and "streamscope.engine.split" in engine
    cycles = [c for c in _cycles(graph, engine) if c not in _KNOWN]
    assert cycles == []


def test_the_cycle_finder_finds_a_cycle():
    graph = grimp.ImportGraph()
    for m in ("a", "a.x", "a.y", "a.z"):
        graph.add_module(m)
    graph.add_import(importer="a.x", imported="a.y")
    graph.add_import(importer="a.y", imported="a.x")
    graph.add_import(importer="a.z", imported="a.x")
    assert _cycles(graph, {"a.x", "a.y", "a.z"}) == [{"a.x", "a.y"}]
