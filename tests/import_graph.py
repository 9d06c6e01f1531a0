"""The import graph of a package, read from its source (ast), and a cycle finder: the one pair the
import tests use."""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path


def _module_name(path: Path, folder: Path, package: str) -> str:
    parts = [package, *path.relative_to(folder).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(folder: Path, package: str) -> dict[str, set[str]]:
    """``{module: modules of package it imports}`` for every module under ``folder`` (the package
    ``package``, subpackages included), from the source, with relative imports resolved; imports
    inside functions count (one closes a cycle as surely when it runs). ``from package import name``
    is an edge to the submodule ``name`` if there is one, else to the package itself (its ``__init__``)."""
    files = {_module_name(p, folder, package): p for p in sorted(folder.rglob("*.py"))}
    graph: dict[str, set[str]] = {}
    for module, path in files.items():
        here = module if path.stem == "__init__" else module.rpartition(".")[0]
        edges: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = importlib.util.resolve_name("." * node.level + (node.module or ""), here) if node.level \
                    else node.module
                targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in files else base for alias in node.names]
            else:
                continue
            edges |= {t for t in targets if t in files and t != module}
        graph[module] = edges
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` as a path ``[a, b, ..., a]``, or None (depth-first search)."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (cycle := visit(start)):
            return cycle
    return None
