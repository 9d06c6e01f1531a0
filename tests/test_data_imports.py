"""The package imports without a cycle (the whole of it, and ``contrastfit.data`` on its own): every import statement (also those
inside functions) is an edge of the graph, and each module imports in a fresh interpreter on its own."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import contrastfit.data
from import_graph import find_cycle, import_graph

PACKAGE = "contrastfit.data"
FOLDER = Path(contrastfit.data.__file__).parent
MODULES = sorted(p.stem for p in FOLDER.glob("*.py") if p.stem != "__init__")


def test_cycle_finder_on_small_graphs():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b", "d"}, "b": {"d"}, "d": set()}) is None  # a diamond is no cycle


def test_graph_reads_relative_imports_inside_functions_too(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("from .a import x\n")
    (pkg / "a.py").write_text("from .types import T\nx = 1\n")
    (pkg / "b.py").write_text("def f():\n    from .a import x\n    from . import types\n    import os\n")
    (pkg / "types.py").write_text("def g():\n    from pkg.b import f\nT = 1\n")
    graph = import_graph(pkg, "pkg")
    assert graph == {"pkg": {"pkg.a"}, "pkg.a": {"pkg.types"}, "pkg.b": {"pkg.a", "pkg.types"},
                     "pkg.types": {"pkg.b"}}
    assert find_cycle(graph) == ["pkg.a", "pkg.types", "pkg.b", "pkg.a"]


def test_no_import_cycle_in_the_package():
    """The whole of contrastfit, subpackages included: every import statement is an edge."""
    graph = import_graph(FOLDER.parent, "contrastfit")
    assert {"contrastfit.export", "contrastfit.serve", "contrastfit.inference", "contrastfit.experiments.runner",
            "contrastfit.data.loading"} <= set(graph)
    assert "contrastfit.inference" in graph["contrastfit.export"] and "contrastfit.inference" in graph["contrastfit.serve"]
    assert find_cycle(graph) is None, " -> ".join(find_cycle(graph))


def test_no_import_cycle_in_contrastfit_data():
    graph = {k: {m for m in v if m.startswith(PACKAGE)}
             for k, v in import_graph(FOLDER.parent, "contrastfit").items() if k.startswith(PACKAGE)}
    assert f"{PACKAGE}.types" in graph and f"{PACKAGE}.builtin" in graph[f"{PACKAGE}.loading"]
    assert graph[f"{PACKAGE}.types"] == set(), "types.py is the bottom of the graph"
    assert find_cycle(graph) is None, " -> ".join(find_cycle(graph))


#: Run in a fresh interpreter: ``contrastfit`` and ``contrastfit.data`` are registered as bare
#: packages (their ``__init__`` not run, since it would import the modules in an order of its own that
#: can hide a cycle), then the one module is imported, and with it only what it imports itself.
ALONE = """
import importlib, sys, types
for name, path in (("contrastfit", {root!r}), ("contrastfit.data", {data!r})):
    package = types.ModuleType(name)
    package.__path__ = [path]
    sys.modules[name] = package
importlib.import_module("contrastfit.data.{module}")
"""


def test_each_data_module_imports_alone_in_a_fresh_interpreter():
    """One interpreter per module, two at a time."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONWARNINGS": "ignore"}
    failures, pending = [], list(MODULES)
    running: list[tuple[str, subprocess.Popen]] = []
    while pending or running:
        while pending and len(running) < 2:
            name = pending.pop(0)
            code = ALONE.format(root=str(FOLDER.parent), data=str(FOLDER), module=name)
            running.append((name, subprocess.Popen([sys.executable, "-c", code], env=env,
                                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE)))
        name, proc = running.pop(0)
        _, err = proc.communicate(timeout=300)
        if proc.returncode:
            failures.append(f"{name}: {err.decode(errors='replace').strip().splitlines()[-1]}")
    assert not failures, failures
    assert {"types", "loading", "builtin", "sampling"} <= set(MODULES)


@pytest.mark.parametrize("name", ["TextData", "TEXT", "TEXT_PAIR", "LABEL"])
def test_shared_types_are_the_same_objects_everywhere(name):
    from contrastfit.data import builtin, loading, types

    assert getattr(loading, name) is getattr(types, name) is getattr(contrastfit.data, name)
    if hasattr(builtin, name):
        assert getattr(builtin, name) is getattr(types, name)


def test_only_the_command_line_imports_the_experiments_layer():
    """The experiments (grids, store, reports) sit on top of the jobs: a job, the record, the model or
    the data never import them (the run identity lives beside the record, in ``contrastfit.identity``)."""
    root = Path(contrastfit.data.__file__).parents[1]
    graph = import_graph(root, "contrastfit")
    upward = {m: sorted(e for e in edges if e.startswith("contrastfit.experiments"))
              for m, edges in graph.items() if not m.startswith("contrastfit.experiments")}
    assert {m: e for m, e in upward.items() if e} == {"contrastfit.cli": upward["contrastfit.cli"]}


def _layers() -> dict[str, int]:
    """The layer of each name the Design page draws (its ``text`` block: names joined by `` · ``, a line
    a layer, top down)."""
    page = (Path(__file__).parents[1] / "docs" / "design.md").read_text(encoding="utf-8")
    block = page.split("```text\n", 1)[1].split("```", 1)[0]
    return {name.strip().rstrip("/"): i for i, line in enumerate(block.strip().splitlines()) for name in line.split("·")}


def _upward(graph: dict[str, set[str]], layer_of: dict[str, int]) -> tuple[list[str], list[str]]:
    """The package's modules no layer holds, and the imports that run back up a layer."""

    def layer(module: str) -> int | None:
        return layer_of.get(module.split(".")[1]) if module != "contrastfit" else None

    unplaced = sorted(m for m in graph if m != "contrastfit" and layer(m) is None)
    upward = sorted(f"{m} -> {e}" for m, edges in graph.items() if layer(m) is not None
                    for e in edges if layer(e) is not None and layer(e) < layer(m))
    return unplaced, upward


def test_the_package_imports_only_down_the_layers_the_design_page_draws():
    """Every module of the package is on one line of the Design page's drawing, and imports only
    modules on its own line or below it (inside functions too): the layers read top-down."""
    graph = import_graph(Path(contrastfit.data.__file__).parents[1], "contrastfit")
    assert _upward(graph, _layers()) == ([], [])


def test_the_layer_check_finds_an_import_that_runs_back_up_and_a_module_it_does_not_place():
    layers = _layers()
    assert layers["cli"] < layers["training"] < layers["shapes"] < layers["modeling"] < layers["losses"]
    graph = {"contrastfit.modeling": {"contrastfit.training", "contrastfit.losses.supcon"},
             "contrastfit.training": {"contrastfit.modeling"}, "contrastfit.losses.supcon": set(),
             "contrastfit.newthing": set()}
    assert _upward(graph, layers) == (["contrastfit.newthing"], ["contrastfit.modeling -> contrastfit.training"])
